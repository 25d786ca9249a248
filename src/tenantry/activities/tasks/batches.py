"""What the dispatcher asks the database for batching and warm state (ADR 0014): the next
task of a batch — a queued task of the *same tenant and activity version* only, claimed
under the tenant's ``max_activity_slots`` like any claim — and a tenant's slots, which also
cap how many warm sandboxes it keeps."""

from __future__ import annotations

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.ids import AgentId, RunId, TenantId
from tenantry.runs.lease import Lease

Q = load(__package__, "batches.sql")


async def claim_next(db: Database, worker: str, lease_seconds: float, tenant: TenantId,
                     agent_id: AgentId, version: int) -> Lease | None:
    """Lease the tenant's next queued task of this version (None: none is due, or the
    tenant is at its slots or out of its policy's room)."""
    async with db.unscoped() as conn:
        row = await conn.fetchrow(Q.claim_next_activity, worker, tenant.value, agent_id.uuid,
                                  version, float(lease_seconds))
    if row is None:
        return None
    return Lease(TenantId(row["tenant_id"]), RunId(row["run_id"]), row["lease_epoch"])


async def activity_slots(db: Database, tenant: TenantId) -> int:
    async with db.tenant_tx(tenant) as conn:
        slots = await conn.fetchval(Q.activity_slots, tenant.value)
    return 2 if slots is None else int(slots)
