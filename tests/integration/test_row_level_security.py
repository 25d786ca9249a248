"""Row-level security is the second wall: a query that forgot its tenant filter still sees
only the current tenant, and a connection with no tenant set sees nothing."""

from __future__ import annotations

import asyncpg
import pytest

from tenantry.agents import service as agents
from tenantry.agents.spec import AgentSpec
from tenantry.db import Database
from tenantry.ids import TenantId
from tenantry.tenants import service as tenants

SPEC = AgentSpec(model="scripted", system_prompt="hi")


async def _two_tenants(db: Database) -> tuple[TenantId, TenantId]:
    a = (await tenants.create_tenant(db, "A")).tenant_id
    b = (await tenants.create_tenant(db, "B")).tenant_id
    await agents.create_agent(db, a, "a1", SPEC)
    await agents.create_agent(db, a, "a2", SPEC)
    await agents.create_agent(db, b, "b1", SPEC)
    return a, b


async def test_query_without_where_sees_only_the_current_tenant(db: Database) -> None:
    a, b = await _two_tenants(db)
    async with db.tenant_tx(a) as conn:
        names = {r["name"] for r in await conn.fetch("SELECT name FROM agents")}
        tenant_rows = await conn.fetch("SELECT tenant_id FROM tenants")
    assert names == {"a1", "a2"}
    assert [r["tenant_id"] for r in tenant_rows] == [a.value]
    async with db.tenant_tx(b) as conn:
        assert {r["name"] for r in await conn.fetch("SELECT name FROM agents")} == {"b1"}


async def test_no_tenant_set_sees_nothing(db: Database) -> None:
    await _two_tenants(db)
    async with db.unscoped() as conn:
        for table in ("tenants", "api_keys", "agents", "agent_versions", "runs", "run_events"):
            assert await conn.fetchval(f"SELECT count(*) FROM {table}") == 0, table


async def test_cannot_write_rows_for_another_tenant(db: Database) -> None:
    a, b = await _two_tenants(db)
    async with db.tenant_tx(a) as conn:
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="row-level security"):
            await conn.execute(
                "INSERT INTO agents (tenant_id, agent_id, name, latest_version) "
                "VALUES ($1, gen_random_uuid(), 'sneaky', 1)", b.value,
            )


async def test_application_role_cannot_bypass_rls(db: Database) -> None:
    async with db.unscoped() as conn:
        assert await conn.fetchval("SELECT current_user") == "tenantry_app"
        assert await conn.fetchval(
            "SELECT rolbypassrls FROM pg_roles WHERE rolname = current_user"
        ) is False


async def test_agent_versions_cannot_be_changed(
    db: Database, admin_conn: asyncpg.Connection
) -> None:
    a, _ = await _two_tenants(db)
    async with db.tenant_tx(a) as conn:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("UPDATE agent_versions SET spec = '{}'")
    # Even the owner (a superuser here) is stopped by the trigger.
    with pytest.raises(asyncpg.RestrictViolationError, match="immutable"):
        await admin_conn.execute("UPDATE agent_versions SET spec = '{}'")
    with pytest.raises(asyncpg.RestrictViolationError, match="immutable"):
        await admin_conn.execute("DELETE FROM agent_versions")


async def test_every_table_with_a_tenant_column_has_row_level_security(
    admin_conn: asyncpg.Connection,
) -> None:
    """A table added later cannot forget the second wall: every table with a tenant_id has
    RLS enabled and a policy on it (two listed, deliberate exceptions)."""
    rows = await admin_conn.fetch("""
        SELECT c.relname, c.relrowsecurity,
               EXISTS (SELECT 1 FROM pg_policies p
                       WHERE p.schemaname = 'public' AND p.tablename = c.relname) AS policy
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id'
                               AND NOT a.attisdropped
        WHERE c.relkind IN ('r', 'p')""")
    tables = {r["relname"]: (r["relrowsecurity"], r["policy"]) for r in rows}
    assert {"runs", "run_events", "usage_facts", "sandbox_usage_facts"} <= set(tables)
    unprotected = sorted(name for name, (rls, policy) in tables.items()
                         if not (rls and policy))
    # The one known exception (ADR 0003): model accounts are the operator's routing table,
    # read whole by every worker's gateway; a tenant's own (BYOK) rows are chosen by the
    # routing code for that tenant only and their keys stay sealed under the master key.
    # And frozen_tenants (migration 0031, ADR 0029): no tenant's data, only which tenants
    # are being moved to another cell, read when a key is authenticated — before the
    # request has a tenant to scope by.
    assert unprotected == ["frozen_tenants", "model_accounts"]
