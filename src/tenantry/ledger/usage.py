"""Usage reports: sums over the billing record (usage facts), never over metrics."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.ids import AgentId, TenantId

Q = load(__package__)

_FIELDS = ("runs", "calls", "input_tokens", "cached_input_tokens", "output_tokens",
           "cost_micros")


def _sums(row: asyncpg.Record) -> dict[str, int]:
    return {name: int(row[name] or 0) for name in _FIELDS}


async def for_tenant(
    db: Database, tenant: TenantId, start: datetime, end: datetime, group_by: str | None,
) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """The tenant's total over [start, end) and, if asked, per agent or per UTC day."""
    async with db.tenant_tx(tenant) as conn:
        total = await conn.fetchrow(Q.usage_total, tenant.value, start, end)
        rows = []
        if group_by == "agent":
            rows = await conn.fetch(Q.usage_by_agent, tenant.value, start, end)
        elif group_by == "day":
            rows = await conn.fetch(Q.usage_by_day, tenant.value, start, end)
    assert total is not None
    groups = []
    for row in rows:
        key = str(AgentId(uuid.UUID(row["key"]))) if group_by == "agent" else row["key"]
        groups.append({"key": key, **_sums(row)})
    return _sums(total), groups


async def per_tenant(db: Database, start: datetime, end: datetime) -> list[dict[str, Any]]:
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.usage_per_tenant, start, end)
    return [{"tenant_id": r["tenant_id"], "key": r["tenant_id"], **_sums(r)} for r in rows]
