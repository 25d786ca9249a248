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


_SANDBOX_FIELDS = ("sandbox_ms", "sandbox_cost_micros")


#: The model calls' sums over the tenant's own accounts (bring your own key): what the
#: query names ``own_<name>``.
_OWN_FIELDS = ("calls", "input_tokens", "cached_input_tokens", "output_tokens",
               "cost_micros")
NO_OWN: dict[str, int] = dict.fromkeys(_OWN_FIELDS, 0)


def _sums(row: asyncpg.Record) -> dict[str, Any]:
    return {**{name: int(row[name] or 0) for name in _FIELDS},
            "own_accounts": {name: int(row[f"own_{name}"] or 0) for name in _OWN_FIELDS}}


def _sandbox_sums(row: asyncpg.Record) -> dict[str, Any]:
    return {**{name: int(row[name] or 0) for name in _SANDBOX_FIELDS},
            "activities": _activity_sums(row)}


def _activity_sums(row: asyncpg.Record) -> dict[str, Any]:
    """The activity attempts' part of the sandbox facts (ADR 0016). CPU and peak stay None
    when no attempt had them measured: an unmeasured figure is not a zero."""
    cpu_us, peak = row["activity_cpu_us"], row["activity_peak_memory_bytes"]
    return {"attempts": int(row["activity_attempts"] or 0),
            "sandbox_ms": int(row["activity_sandbox_ms"] or 0),
            "cpu_seconds": None if cpu_us is None else int(cpu_us) / 1e6,
            "peak_memory_bytes": None if peak is None else int(peak),
            "cost_micros": int(row["activity_cost_micros"] or 0)}


NO_ACTIVITIES: dict[str, Any] = {"attempts": 0, "sandbox_ms": 0, "cpu_seconds": None,
                                 "peak_memory_bytes": None, "cost_micros": 0}


async def for_tenant(
    db: Database, tenant: TenantId, start: datetime, end: datetime, group_by: str | None,
) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """The tenant's total over [start, end) and, if asked, per agent or per UTC day: model
    calls, tokens and cost from the usage facts, sandbox time and its cost from the sandbox
    facts (the month's spend is ``cost_micros + sandbox_cost_micros``) — activity attempts'
    sandbox time included, and broken out under ``activities``; the model calls that went
    through the tenant's own accounts (bring your own key) broken out under
    ``own_accounts``."""
    async with db.tenant_tx(tenant) as conn:
        total = await conn.fetchrow(Q.usage_total, tenant.value, start, end)
        sandbox_total = await conn.fetchrow(Q.sandbox_total, tenant.value, start, end)
        rows: list[asyncpg.Record] = []
        sandbox_rows: list[asyncpg.Record] = []
        if group_by == "agent":
            rows = await conn.fetch(Q.usage_by_agent, tenant.value, start, end)
            sandbox_rows = await conn.fetch(Q.sandbox_by_agent, tenant.value, start, end)
        elif group_by == "day":
            rows = await conn.fetch(Q.usage_by_day, tenant.value, start, end)
            sandbox_rows = await conn.fetch(Q.sandbox_by_day, tenant.value, start, end)
    assert total is not None and sandbox_total is not None
    groups: dict[str, dict[str, Any]] = {}
    for row in rows:
        groups[row["key"]] = {**_sums(row), **dict.fromkeys(_SANDBOX_FIELDS, 0),
                              "activities": dict(NO_ACTIVITIES)}
    for row in sandbox_rows:  # a group with sandbox time but no model call in the window
        group = groups.setdefault(row["key"], {**dict.fromkeys(_FIELDS, 0),
                                               "own_accounts": dict(NO_OWN),
                                               "runs": int(row["runs"])})
        group.update(_sandbox_sums(row))
    ordered = []
    for key in sorted(groups):
        shown = str(AgentId(uuid.UUID(key))) if group_by == "agent" else key
        ordered.append({"key": shown, **groups[key]})
    return {**_sums(total), **_sandbox_sums(sandbox_total)}, ordered


async def per_tenant(db: Database, start: datetime, end: datetime) -> list[dict[str, Any]]:
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.usage_per_tenant, start, end)
    return [{"tenant_id": r["tenant_id"], "key": r["tenant_id"], **_sums(r),
             **_sandbox_sums(r)} for r in rows]
