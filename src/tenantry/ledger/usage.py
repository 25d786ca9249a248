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
    """The tenant's total over [start, end) and, if asked, per agent or per UTC day: model
    calls, tokens and cost from the usage facts, sandbox time from the sandbox facts."""
    async with db.tenant_tx(tenant) as conn:
        total = await conn.fetchrow(Q.usage_total, tenant.value, start, end)
        sandbox_total = await conn.fetchval(Q.sandbox_total, tenant.value, start, end)
        rows: list[asyncpg.Record] = []
        sandbox_rows: list[asyncpg.Record] = []
        if group_by == "agent":
            rows = await conn.fetch(Q.usage_by_agent, tenant.value, start, end)
            sandbox_rows = await conn.fetch(Q.sandbox_by_agent, tenant.value, start, end)
        elif group_by == "day":
            rows = await conn.fetch(Q.usage_by_day, tenant.value, start, end)
            sandbox_rows = await conn.fetch(Q.sandbox_by_day, tenant.value, start, end)
    assert total is not None
    groups: dict[str, dict[str, Any]] = {}
    for row in rows:
        groups[row["key"]] = {**_sums(row), "sandbox_ms": 0}
    for row in sandbox_rows:  # a group with sandbox time but no model call in the window
        group = groups.setdefault(row["key"], {**dict.fromkeys(_FIELDS, 0),
                                               "runs": int(row["runs"])})
        group["sandbox_ms"] = int(row["sandbox_ms"] or 0)
    ordered = []
    for key in sorted(groups):
        shown = str(AgentId(uuid.UUID(key))) if group_by == "agent" else key
        ordered.append({"key": shown, **groups[key]})
    return {**_sums(total), "sandbox_ms": int(sandbox_total or 0)}, ordered


async def per_tenant(db: Database, start: datetime, end: datetime) -> list[dict[str, Any]]:
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.usage_per_tenant, start, end)
    return [{"tenant_id": r["tenant_id"], "key": r["tenant_id"], **_sums(r),
             "sandbox_ms": int(r["sandbox_ms"] or 0)} for r in rows]
