"""Refused egress of activity attempts: what the dispatcher takes from the proxy
when an attempt ends, and how it is recorded.

An attempt's sandbox is bound to the attempt (a reused one, ADR 0014, to its first task's
attempt), and the proxy keeps the refusals under that binding until they are taken. The
dispatcher takes them once the attempt's execution is over — the proxy notes a refusal
before the code can read the answer, so every attempt the code saw refused is there — and
records them with the attempt, in its fenced transaction: the first ``MAX_SHOWN`` on the
``ActivityAttempted`` (host, port, reason code), the count of all and by reason code, the
count against the activity version's review flag (``agents.flags``, as for agent runs),
and — once committed — the process's counter by tenant class and reason.

What is left once the lease's work is over — the whole lot when no attempt was recorded
(the lease was lost, a fault of ours, a stop), or refusals that landed after the take
(a connection being vetted when the sandbox was killed) — is taken then too, after the
sandbox is gone, so nothing stays in the proxy: counted and flagged the same way (in a
transaction of its own: no attempt carries them) and logged."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tenantry.activities.code.versions import ActivityVersion
from tenantry.agents import flags
from tenantry.db import Connection, Database
from tenantry.ids import RunId, TenantId
from tenantry.sandbox import SandboxDriver
from tenantry.sandbox.egress import EgressProxy, TakenRefusals

logger = logging.getLogger(__name__)

#: Refused egress attempts shown one by one on an attempt; past them only counted.
MAX_SHOWN = 20

#: (tenant class, reason code) → refused egress attempts, for the dispatcher's metrics.
RefusedCounts = Counter[tuple[str, str]]


def proxy_of(driver: SandboxDriver) -> EgressProxy | None:
    """The proxy a driver's sandboxes reach out through (the pooled driver's ``egress``);
    None for a driver without one (its sandboxes have no way out to refuse)."""
    found = getattr(driver, "egress", None)
    return found if isinstance(found, EgressProxy) else None


def event_fields(refused: TakenRefusals) -> dict[str, Any]:
    """What ``ActivityAttempted`` records of an attempt's refusals (nothing when none)."""
    if not refused.total:
        return {}
    return {"egress_refused": [{"host": r.host, "port": r.port, "reason_code": r.reason_code}
                               for r in refused.kept[:MAX_SHOWN]],
            "egress_refused_count": refused.total,
            "egress_refused_by_reason": refused.by_reason()}


@dataclass(slots=True)
class SandboxEgress:
    """One sandbox a lease's attempts ran in: where its refusals are kept (the proxy, under
    the sandbox's tenant and bound run), whose version they count against, and what was
    taken but is not recorded yet."""

    proxy: EgressProxy | None
    tenant: TenantId
    run: str  # the sandbox's Binding.run: an attempt id
    version: ActivityVersion
    tenant_class: str
    unrecorded: TakenRefusals = field(default_factory=TakenRefusals)

    def take(self) -> TakenRefusals:
        """Everything refused and not yet recorded, freed at the proxy."""
        if self.proxy is not None:
            self.unrecorded = _merged(self.unrecorded,
                                      self.proxy.take(self.tenant.value, self.run))
        return self.unrecorded

    def recorded(self, counts: RefusedCounts) -> None:
        """What ``take`` returned is committed with an attempt: counted, and let go."""
        _count(counts, self.tenant_class, self.unrecorded)
        self.unrecorded = TakenRefusals()


async def count_flag(conn: Connection, version: ActivityVersion, refused: TakenRefusals, *,
                     threshold: int) -> None:
    """Count an attempt's refusals against its version's review flag, in the caller's
    (fenced) transaction."""
    if refused.total:
        await flags.count_refused_egress(conn, version.tenant, version.agent_id,
                                         version.version, refused.total, threshold=threshold)


async def settle_left(db: Database, used: list[SandboxEgress], counts: RefusedCounts, *,
                      task: RunId, threshold: int) -> None:
    """Take what is left of the lease's sandboxes (each one gone, or paused) and count it:
    the metric, the version's flag (a transaction of its own) and a log line. A failure
    to write the flag is logged, never raised: the proxy is freed either way."""
    for egress in used:
        left = egress.take()
        egress.unrecorded = TakenRefusals()
        if not left.total:
            continue
        _count(counts, egress.tenant_class, left)
        logger.warning("egress refusals of an activity attempt that no attempt records",
                       extra={"tenant_id": egress.tenant.value, "run_id": str(task),
                              "attempt_sandbox": egress.run, "refused": left.total,
                              "by_reason": left.by_reason()})
        try:
            # Shielded: a dispatcher stopping while this is written does not lose it.
            await asyncio.shield(_count_flag_alone(db, egress, left, threshold))
        except Exception:
            logger.exception("counting an activity version's refused egress failed",
                             extra={"tenant_id": egress.tenant.value, "run_id": str(task)})


async def _count_flag_alone(db: Database, egress: SandboxEgress, refused: TakenRefusals,
                            threshold: int) -> None:
    async with db.tenant_tx(egress.tenant) as conn:
        await count_flag(conn, egress.version, refused, threshold=threshold)


def _count(counts: RefusedCounts, tenant_class: str, refused: TakenRefusals) -> None:
    for reason, n in refused.by_reason().items():
        counts[(tenant_class, reason)] += n


def _merged(first: TakenRefusals, then: TakenRefusals) -> TakenRefusals:
    if not first.total:
        return then
    if not then.total:
        return first
    dropped = dict(first.dropped)
    for reason, n in then.dropped.items():
        dropped[reason] = dropped.get(reason, 0) + n
    return TakenRefusals(first.kept + then.kept, dropped)
