"""Deletion on request (ADR 0017).

Erasing a tenant: it admits nothing more (``tenants.erased_at``), its live runs are
cancelled (a running one by its worker, between steps), its secrets, data key and tool
servers are deleted at once (crypto-shredding: a backup's copy of a sealed secret opens
for nobody), its API keys are revoked, and from then on every cleaner pass deletes its
runs with retention zero — so the deleting is leased and fenced like any pass. The job's
counts say how far it got; it is done once the tenant has no run left. Tombstones stay
per their own policy."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound
from tenantry.ids import RunId, TenantId
from tenantry.retention.cleaner import Cleaner
from tenantry.runs import service as runs

Q = load(__package__)

NO_JOB = "No erase job with this id."
#: Live runs cancelled per round trip while an erase starts.
CANCEL_BATCH = 200


@dataclass(frozen=True, slots=True)
class EraseJob:
    job_id: str
    tenant: TenantId
    status: str  # running | done
    runs_total: int
    runs_deleted: int
    runs_cancelled: int
    runs_left: int
    secrets_deleted: int
    tool_servers_deleted: int
    blobs_queued: int
    requested_by: str
    created_at: datetime
    finished_at: datetime | None

    @classmethod
    def from_row(cls, row: Any, runs_left: int) -> EraseJob:
        return cls(job_id=str(row["job_id"]), tenant=TenantId(row["tenant_id"]),
                   status=row["status"], runs_total=row["runs_total"],
                   runs_deleted=row["runs_deleted"], runs_cancelled=row["runs_cancelled"],
                   runs_left=runs_left, secrets_deleted=row["secrets_deleted"],
                   tool_servers_deleted=row["tool_servers_deleted"],
                   blobs_queued=row["blobs_queued"], requested_by=row["requested_by"],
                   created_at=row["created_at"], finished_at=row["finished_at"])


async def start(db: Database, tenant: TenantId, *, requested_by: str,
                operator_db: Database) -> EraseJob:
    """Begin erasing ``tenant`` (idempotent: a second request returns the running job).
    NotFound for an unknown tenant. ``operator_db``: the pool that may call the shredding
    function (the console's role, ADR 0011); the tenant pool may not."""
    async with db.tenant_tx(tenant) as conn:
        if await conn.fetchrow(Q.tenant_state, tenant.value) is None:
            raise NotFound("No tenant with this id.")
        job_id = await conn.fetchval(Q.start_erase, tenant.value, uuid.uuid4(), requested_by)
        if job_id is None:
            job_id = await conn.fetchval(Q.running_erase, tenant.value)
            if job_id is None:  # it finished between the two statements: start another
                raise Conflict("An erase of this tenant has just finished; ask again.")
            return await get(db, job_id, tenant=tenant)
    async with operator_db.unscoped() as conn:
        shredded = await conn.fetchrow(Q.erase_state, tenant.value)
    assert shredded is not None  # the function returns one row
    async with db.tenant_tx(tenant) as conn:
        await conn.execute(Q.erase_progress, tenant.value, 0, 0, shredded["secrets"],
                           shredded["tool_servers"], 0)
    cancelled = await _cancel_live_runs(db, tenant)
    async with db.tenant_tx(tenant) as conn:
        await conn.execute(Q.erase_progress, tenant.value, 0, cancelled, 0, 0, 0)
    return await get(db, job_id, tenant=tenant)


async def _cancel_live_runs(db: Database, tenant: TenantId) -> int:
    """Cancel every queued, running or waiting run (a dead letter is deleted as it is)."""
    cancelled = 0
    after = uuid.UUID(int=0)
    while True:
        async with db.tenant_tx(tenant) as conn:
            rows = await conn.fetch(Q.live_runs, tenant.value, after, CANCEL_BATCH)
        if not rows:
            return cancelled
        for r in rows:
            after = r["run_id"]
            try:
                await runs.cancel_run(db, tenant, RunId(r["run_id"]))
            except (NotFound, Conflict):  # it ended (or went) meanwhile
                continue
            cancelled += 1


#: Why a terminal run is kept now, as ``DELETE /v1/runs/{id}`` names it (``blocked_by``).
BLOCKERS = {
    "webhook_pending": "its webhook has not been delivered yet",
    "live_children": "a run it started has not ended",
    "pending_approval": "it has an approval still waiting for a decision",
}


async def delete_run(cleaner: Cleaner, tenant: TenantId, run: RunId) -> None:
    """Delete one terminal run now, on the tenant's request (a tombstone remains).
    NotFound for no such run (another tenant's included: the runs' own 404); Conflict
    with ``run_status`` for a run that has not ended, and with ``blocked_by`` too for an
    ended one the cleaner must keep for now."""
    async with cleaner.db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.run_blocker, tenant.value, run.uuid)
    if row is None:
        raise NotFound(runs.NOT_FOUND)
    status = "dead_lettered" if row["dead_lettered"] else row["status"]
    if status not in ("finished", "failed", "cancelled", "dead_lettered"):
        raise Conflict(f"The run has not ended (it is {status}); cancel it first, then "
                       "delete it.", run_status=status)
    for blocker, why in BLOCKERS.items():
        if row[blocker]:
            raise Conflict(f"The run ended ({status}) but is kept for now: {why}. Retry "
                           "once that is done.", run_status=status, blocked_by=blocker)
    if await cleaner.delete_run(tenant, run):
        return
    async with cleaner.db.tenant_tx(tenant) as conn:
        if await conn.fetchrow(Q.run_blocker, tenant.value, run.uuid) is None:
            return  # a cleaner's pass deleted it meanwhile: gone all the same
    # Its row was locked (a cleaner or a worker's last write): nothing was deleted.
    raise Conflict("The run is being changed right now; retry shortly.", run_status=status)


async def get(db: Database, job_id: uuid.UUID | str, *,
              tenant: TenantId | None = None) -> EraseJob:
    """The job now, or NotFound. With ``tenant``: that tenant's job, through ``db``'s
    tenant transaction; without: any tenant's, and ``db`` must be the operator's pool
    (the console role: erase jobs are tenant rows like any other)."""
    try:
        key = job_id if isinstance(job_id, uuid.UUID) else uuid.UUID(job_id)
    except ValueError:
        raise NotFound(NO_JOB) from None
    if tenant is None:
        async with db.unscoped() as conn:
            row = await conn.fetchrow(Q.any_erase_job, key)
        if row is None:
            raise NotFound(NO_JOB)
        return EraseJob.from_row(row, row["runs_left"])
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.erase_job, tenant.value, key)
        if row is None:
            raise NotFound(NO_JOB)
        left = await conn.fetchval(Q.runs_left, tenant.value)
    return EraseJob.from_row(row, left)


async def run_until_done(cleaner: Cleaner, tenant: TenantId, job_id: str, *,
                         progress: Any = None, poll_seconds: float = 1.0) -> EraseJob:
    """The command form: passes over the tenant until its job is done (a running run is
    deleted once its worker has stopped it)."""
    while True:
        await cleaner.clean(tenant, progress=progress)
        await cleaner.drain_blobs()
        job = await get(cleaner.db, job_id, tenant=tenant)
        if progress is not None:
            progress(job)
        if job.status == "done":
            return job
        await asyncio.sleep(poll_seconds)
