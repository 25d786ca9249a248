"""What remains of a deleted run (ADR 0017): who ran what, when, how it ended, how much it
used — never its input, answer or events. Tenant-scoped like the run was."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.errors import NotFound
from tenantry.ids import AgentId, RunId, TenantId

Q = load(__package__)

NO_TOMBSTONE = "No tombstone for this run id."


@dataclass(frozen=True, slots=True)
class Tombstone:
    tenant: TenantId
    run_id: RunId
    kind: str
    agent_id: str
    agent_version: int
    parent_run_id: str | None
    status: str  # finished | failed | cancelled | dead_lettered
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime
    steps: int
    events: int
    input_tokens: int
    output_tokens: int
    cost_micros: int
    reason: str  # retention | request | erase
    deleted_at: datetime

    @classmethod
    def from_row(cls, tenant: TenantId, row: Any) -> Tombstone:
        parent = row["parent_run_id"]
        return cls(
            tenant=tenant, run_id=RunId(row["run_id"]), kind=row["kind"],
            agent_id=str(AgentId(row["agent_id"])), agent_version=row["agent_version"],
            parent_run_id=str(RunId(parent)) if parent is not None else None,
            status=row["status"], created_at=row["created_at"], started_at=row["started_at"],
            ended_at=row["ended_at"], steps=row["steps"], events=row["events"],
            input_tokens=row["input_tokens"], output_tokens=row["output_tokens"],
            cost_micros=row["cost_micros"], reason=row["reason"],
            deleted_at=row["deleted_at"])


async def find(db: Database, tenant: TenantId, run: RunId) -> Tombstone | None:
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.tombstone, tenant.value, run.uuid)
    return None if row is None else Tombstone.from_row(tenant, row)


async def get(db: Database, tenant: TenantId, run: RunId) -> Tombstone:
    """The tombstone, or NotFound — another tenant's run looks like no run at all."""
    found = await find(db, tenant, run)
    if found is None:
        raise NotFound(NO_TOMBSTONE)
    return found


async def page(db: Database, tenant: TenantId, *,
               after: tuple[datetime, RunId] | None = None,
               limit: int = 50) -> list[Tombstone]:
    """Newest deletion first; ``after``: the (deleted_at, run id) of the previous page's
    last one."""
    async with db.tenant_tx(tenant) as conn:
        rows = await conn.fetch(Q.tombstones, tenant.value,
                                after[1].uuid if after else None,
                                after[0] if after else None, limit)
    return [Tombstone.from_row(tenant, r) for r in rows]
