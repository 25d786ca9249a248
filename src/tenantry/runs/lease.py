"""Leases: which worker may write a run now, fenced by an epoch.

A claim bumps the run's epoch; every write under the lease names that epoch, so a worker
that stalled past its lease (and whose run was claimed again) gets no slot and no update
(invariant 2). Claims go through one SQL function, ``tenantry_claim_runs``: the fair
scheduler (migration 0007)."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.ids import RunId, TenantId

Q = load(__package__)
logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Lease:
    tenant: TenantId
    run: RunId
    epoch: int


async def claim(
    db: Database, worker: str, batch: int, lease_seconds: float, *, order: str = "fair",
    in_flight_first: bool = False,
) -> list[Lease]:
    """Up to ``batch`` runs for this worker, in the fair order (or ``fifo``: oldest run of
    any tenant, ignoring policies — kept only as the fairness benchmark's baseline).

    ``in_flight_first`` (the cell is overloaded, ADR 0008): runs that already took steps,
    of every tenant, before the first step of any new run.

    Runs taken from another worker come first: those of a registered worker whose session
    lock is gone (dead: ADR 0018), then expired leases; each is logged."""
    async with db.unscoped() as conn:
        if order == "fifo":
            rows = await conn.fetch(Q.claim_runs_fifo, worker, batch, lease_seconds)
        else:
            rows = await conn.fetch(Q.claim_runs, worker, batch, lease_seconds,
                                    in_flight_first)
    leases = []
    for r in rows:
        lease = Lease(TenantId(r["tenant_id"]), RunId(r["run_id"]), r["lease_epoch"])
        leases.append(lease)
        if order != "fifo" and r["taken_from"] is not None:
            # Rare (a crash, a stall): operators see where each run went, and when its old
            # lease would have ended (in the future when its owner was seen dead).
            logger.info("took over a run", extra={
                "run_id": str(lease.run), "taken_from": r["taken_from"],
                "owner_gone": r["owner_gone"], "epoch": lease.epoch,
                "lease_was_until": str(r["lease_was_until"].isoformat()
                                       if r["lease_was_until"] is not None else None)})
    return leases


async def renew(
    db: Database, worker: str, leases: list[Lease], lease_seconds: float
) -> set[Lease]:
    """Extend every lease still held; return the ones that were lost."""
    if not leases:
        return set()
    async with db.unscoped() as conn:
        rows = await conn.fetch(
            Q.renew_leases, worker, [x.tenant.value for x in leases],
            [x.run.uuid for x in leases], [x.epoch for x in leases], lease_seconds,
        )
    kept = {(r["tenant_id"], r["run_id"]) for r in rows}
    return {x for x in leases if (x.tenant.value, x.run.uuid) not in kept}


async def release(db: Database, lease: Lease, available_at: datetime | None = None) -> bool:
    """Hand the run back to the queue (only if we still hold it)."""
    async with db.tenant_tx(lease.tenant) as conn:
        status = await conn.execute(Q.release_lease, lease.tenant.value, lease.run.uuid,
                                    lease.epoch, available_at)
    return status.endswith(" 1")


def worker_id(prefix: str = "worker") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"
