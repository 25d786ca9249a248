"""A tenant's month spend, seen from outside: its policy's load, and the turn of a month.

Postgres's clock decides which month a spend counts in (``date_trunc('month', now())``), and
a test cannot wait for the next one. ``a_month_passes`` does what a month would: it moves
back by one month every time the tenant's spend and its runs' holds were recorded at — the
spend's period, its reservations, and the times its runs are held back to — as the
superuser, since nothing in the product may rewrite them."""

from __future__ import annotations

import asyncpg

from tests.support.api import Api


async def month_spend(api: Api, tenant: str) -> int:
    """The figure admission and the cap compare: spent plus reserved this month."""
    r = await api.client.get(f"/admin/v1/tenants/{tenant}/policy", headers=api.operator)
    assert r.status_code == 200, r.text
    spend: int = r.json()["load"]["month_spend_micros"]
    return spend


async def set_cap(api: Api, tenant: str, cap: int | None) -> None:
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/policy", headers=api.operator,
                             json={"monthly_spend_cap_micros": cap})
    assert r.status_code == 200, r.text


async def a_month_passes(conn: asyncpg.Connection, tenant: str) -> None:
    """As if the database's clock moved on by one month, for ``tenant``'s spend."""
    async with conn.transaction():
        await conn.execute("UPDATE tenant_budget SET spend_month = "
                           "(spend_month - interval '1 month')::date WHERE tenant_id = $1",
                           tenant)
        await conn.execute("UPDATE budget_reservations SET created_at = created_at - "
                           "interval '1 month', closed_at = closed_at - interval '1 month' "
                           "WHERE tenant_id = $1", tenant)
        await conn.execute("UPDATE runs SET available_at = available_at - interval '1 month' "
                           "WHERE tenant_id = $1 AND available_at IS NOT NULL", tenant)
