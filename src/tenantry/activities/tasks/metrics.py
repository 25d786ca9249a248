"""Activity metrics (ADR 0013): the dispatcher's attempts by outcome, the egress its
attempts had refused by tenant class and reason, and the dead letters by tenant
class.

The attempts are counted by the process that runs the dispatcher (``Dispatcher.outcomes``,
read at scrape time): in ``tenantry up`` the API's ``/metrics`` shows them with the worker
loops' figures; like every process counter they restart at zero with the process. The
dead letters are a database gauge (``tenantry_dead_letter_gauge``, the console role's), so
any API process shows the same figure whichever dispatcher dead-lettered the task. Labels
are outcomes and tenant classes (plans), never tenant ids (invariant 10)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.telemetry.registry import Registry, Sample, escape

Q = load(__package__, "metrics.sql")

ATTEMPTS = "tenantry_activity_attempts_total"
EGRESS_REFUSED = "tenantry_activity_egress_refused_total"
DEAD_LETTERS = "tenantry_activity_dead_letters"
#: How a dispatcher's lease of a task can end; each is shown, zero included.
OUTCOMES = ("completed", "retried", "failed", "dead_lettered", "cancelled", "lease_lost",
            "error")


def watch_dispatcher(
    registry: Registry, outcomes: Callable[[], Mapping[str, int]],
    egress_refused: Callable[[], Mapping[tuple[str, str], int]] | None = None,
) -> Callable[[], None]:
    """Report a dispatcher's outcomes (and, given ``egress_refused``, its attempts' refused
    egress by (tenant class, reason)) at each scrape; returns the un-register function."""
    registry.gauge(ATTEMPTS, "Activity task leases this process's dispatcher ended, by "
                             "outcome: completed, retried (back to the queue after its "
                             "backoff), failed, dead_lettered, cancelled, lease_lost "
                             "(another dispatcher took the task over), error (ours: the "
                             "task goes back, its attempt uncounted).", "counter")
    if egress_refused is not None:
        registry.gauge(EGRESS_REFUSED, "Egress attempts from activity attempts' sandboxes "
                                       "that the proxy refused, by tenant class and reason: "
                                       "not_allowed (off the allow-list), internal_address, "
                                       "metadata_address.", "counter")

    def collect() -> Iterable[Sample]:
        seen = outcomes()
        samples: list[Sample] = [(ATTEMPTS, (("outcome", outcome),),
                                  float(seen.get(outcome, 0))) for outcome in OUTCOMES]
        if egress_refused is not None:
            samples += [(EGRESS_REFUSED, (("tenant_class", tenant_class), ("reason", reason)),
                         float(count))
                        for (tenant_class, reason), count in sorted(egress_refused().items())]
        return samples

    return registry.add_collector(collect)


async def render_dead_letters(db: Database) -> str:
    """``db``: the pool that may call the console role's functions."""
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.dead_letter_gauge)
    lines = [f"# HELP {DEAD_LETTERS} Activity tasks dead-lettered now (never dispatched "
             "again until requeued), by tenant class (plan).", f"# TYPE {DEAD_LETTERS} gauge"]
    lines += [f'{DEAD_LETTERS}{{tenant_class="{escape(r["tenant_class"])}"}} '
              f'{r["dead_lettered"]}' for r in rows]
    return "\n".join(lines) + "\n"
