"""Applying every migration to an empty database gives the schema the code expects."""

from __future__ import annotations

import difflib
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tenantry.db.migrate import available, migrate, pending
from tenantry.errors import ConfigurationError
from tests.support.db import dsn_for
from tests.support.schema import REGENERATE, SCHEMA_SQL, migrated_schema

TENANT_TABLES = {"tenants", "api_keys", "agents", "agent_versions", "runs", "run_events"}


@pytest.fixture
async def empty_db(admin_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    name = f"tenantry_empty_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(admin_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    conn = await asyncpg.connect(dsn_for(admin_dsn, name))
    try:
        yield conn
    finally:
        await conn.close()
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


async def test_all_migrations_give_the_expected_schema(empty_db: asyncpg.Connection) -> None:
    applied = await migrate(empty_db)
    assert [m.version for m in applied] == [m.version for m in available()]
    assert await pending(empty_db) == []

    tables = {r["relname"]: r for r in await empty_db.fetch(
        "SELECT relname, relrowsecurity FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public' AND relkind IN ('r', 'p')"
    )}
    assert set(tables) >= TENANT_TABLES | {"schema_migrations"}
    for table in TENANT_TABLES:
        assert tables[table]["relrowsecurity"], f"{table} has no row-level security"
        pk = await empty_db.fetch(
            "SELECT a.attname FROM pg_index i "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = $1::regclass AND i.indisprimary "
            "ORDER BY array_position(i.indkey, a.attnum)", table,
        )
        assert pk[0]["attname"] == "tenant_id", f"{table}'s primary key must lead with tenant_id"

    events_pk = await empty_db.fetchval(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = 'run_events'::regclass AND contype = 'p'"
    )
    assert events_pk == "PRIMARY KEY (tenant_id, run_id, seq)"
    uniques = [r["def"] for r in await empty_db.fetch(
        "SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint "
        "WHERE conrelid = 'runs'::regclass AND contype = 'u'"
    )]
    assert "UNIQUE (tenant_id, idempotency_key)" in uniques
    role = await empty_db.fetchrow(
        "SELECT rolbypassrls, rolsuper, rolcanlogin FROM pg_roles WHERE rolname = 'tenantry_app'"
    )
    assert role is not None
    assert (role["rolbypassrls"], role["rolsuper"], role["rolcanlogin"]) == (False, False, False)
    hashes = await empty_db.fetchval(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = 'api_keys'::regclass AND attname = 'key_hash'"
    )
    assert hashes == "bytea"
    columns = {r["attname"] for r in await empty_db.fetch(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'api_keys'::regclass AND attnum > 0"
    )}
    assert not {"key", "api_key", "secret"} & columns, "API keys must be stored hashed only"


async def test_migrating_again_applies_nothing(empty_db: asyncpg.Connection) -> None:
    await migrate(empty_db)
    assert await migrate(empty_db) == []


async def test_an_edited_migration_is_refused(empty_db: asyncpg.Connection) -> None:
    await migrate(empty_db)
    await empty_db.execute("UPDATE schema_migrations SET sha256 = 'x' WHERE version = 1")
    with pytest.raises(ConfigurationError, match="changed after it was applied"):
        await migrate(empty_db)


async def test_the_schema_snapshot_is_what_the_migrations_produce(admin_dsn: str) -> None:
    produced = await migrated_schema(admin_dsn)
    snapshot = SCHEMA_SQL.read_text()
    diff = "".join(difflib.unified_diff(
        snapshot.splitlines(keepends=True), produced.splitlines(keepends=True),
        fromfile=str(SCHEMA_SQL.name), tofile="migrated database"))
    assert produced == snapshot, (
        f"{SCHEMA_SQL} is not what the migrations produce; regenerate it with "
        f"`{REGENERATE}` and review the diff:\n{diff}")
