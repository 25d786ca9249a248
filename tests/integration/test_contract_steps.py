"""Expand, then contract (docs/reference/architecture.md, "Changing the schema"): a release's
migrations keep what the previous release uses, so its processes go on working on the new
schema; the removal waits in a contract step, refused while a process of an older release
is connected and applied by `tenantry migrate --contract` once none is. A schema change is
refused while a release the new schema does not serve is connected.

The schema here is a synthetic one of two releases: 0.1 reads ``items.old_label`` through
``tenantry_label(integer)``; 0.2 adds ``new_label`` and ``tenantry_label_v2`` (an added
parameter: a new name), and its contract step drops the old column and function."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from tenantry.db.contraction import contract
from tenantry.db.migrate import migrate, schema_release
from tenantry.db.release import Release
from tenantry.db.schema_files import Schema
from tenantry.db.status import read_status
from tenantry.errors import ConfigurationError
from tests.support.db import scratch_database

OLD_FUNCTION = ("CREATE OR REPLACE FUNCTION tenantry_label(p_id integer) RETURNS text\n"
                "LANGUAGE sql STABLE AS $$ SELECT old_label FROM items WHERE id = p_id $$;\n")


def release_01(root: Path) -> Schema:
    for part in ("migrations", "routines", "contract"):
        (root / part).mkdir()
    (root / "migrations" / "0001_items.sql").write_text(
        "CREATE TABLE items (id integer PRIMARY KEY, old_label text NOT NULL);\n")
    (root / "routines" / "label.sql").write_text(OLD_FUNCTION)
    return Schema(root / "migrations", "test_migrations", 0x7E_4A_47_98,
                  routines=root / "routines", routine_table="test_routines",
                  release_table="test_releases", contract=root / "contract",
                  contract_table="test_contract_steps")


def release_02(root: Path) -> None:
    """Expand: a column with a default, a new function beside the old one (whose file goes:
    0.2 never calls it); contract: the old column and function."""
    (root / "migrations" / "0002_new_label.sql").write_text(
        "ALTER TABLE items ADD COLUMN new_label text NOT NULL DEFAULT '';\n"
        "UPDATE items SET new_label = old_label;\n")
    (root / "routines" / "label_v2.sql").write_text(
        "CREATE OR REPLACE FUNCTION tenantry_label_v2(p_id integer, p_default text)\n"
        "RETURNS text LANGUAGE sql STABLE AS $$\n"
        "    SELECT coalesce((SELECT new_label FROM items WHERE id = p_id), p_default) $$;\n")
    (root / "routines" / "label.sql").unlink()
    (root / "contract" / "0001_old_label.sql").write_text(
        "-- 0.1 read items.old_label through tenantry_label; 0.2 reads neither.\n"
        "-- retires: label\n"
        "DROP FUNCTION IF EXISTS tenantry_label(integer);\n"
        "ALTER TABLE items DROP COLUMN old_label;\n")


@pytest.fixture
async def dsn(admin_dsn: str) -> AsyncIterator[str]:
    async with scratch_database(admin_dsn, "tenantry_contract") as name:
        yield name


@pytest.fixture
async def conn(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(dsn)
    yield connection
    await connection.close()


async def a_process_of(dsn: str, release: str) -> asyncpg.Connection:
    """A connection naming ``release`` as every Tenantry process's connections do."""
    return await asyncpg.connect(
        dsn, server_settings={"application_name": f"tenantry/{release}"})


async def leave(conn: asyncpg.Connection, process: asyncpg.Connection) -> None:
    """``process`` ends as when its process stops; returns once the server lists it no
    more."""
    assert await conn.fetchval("SELECT pg_terminate_backend($1, 10000)",
                               process.get_server_pid())
    process.terminate()


async def state(conn: asyncpg.Connection) -> dict[str, object]:
    """What a refused step must leave as it was."""
    return {
        "columns": [r[0] for r in await conn.fetch(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'items'::regclass "
            "AND attnum > 0 AND NOT attisdropped ORDER BY attnum")],
        "functions": sorted(r[0] for r in await conn.fetch(
            "SELECT oid::regprocedure::text FROM pg_proc WHERE proname LIKE 'tenantry_label%'")),
        "migrations": [r[0] for r in await conn.fetch(
            "SELECT version FROM test_migrations ORDER BY 1")],
        "routines": sorted(r[0] for r in await conn.fetch("SELECT name FROM test_routines")),
        "contract": [r[0] for r in await conn.fetch("SELECT version FROM test_contract_steps")],
        "releases": sorted(r[0] for r in await conn.fetch("SELECT release FROM test_releases")),
    }


async def test_a_contract_step_waits_until_no_older_release_is_connected(
    dsn: str, conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    schema = release_01(tmp_path)
    await migrate(conn, schema=schema, release="0.1.0")
    await conn.execute("INSERT INTO items (id, old_label) VALUES (1, 'one')")
    old = await a_process_of(dsn, "0.1.0")
    assert await old.fetchval("SELECT tenantry_label(1)") == "one"

    release_02(tmp_path)
    applied = await migrate(conn, schema=schema, release="0.2.0")

    # The expand: 0.1's call goes on working on 0.2's schema; 0.2's works too.
    assert [m.label for m in applied.migrations] == ["0002_new_label"]
    assert [r.name for r in applied.routines] == ["label_v2"]
    assert [s.label for s in applied.contract_due] == ["0001_old_label"]
    assert await old.fetchval("SELECT tenantry_label(1)") == "one"
    assert await conn.fetchval("SELECT tenantry_label_v2(1, 'none')") == "one"
    status = await read_status(conn, schema, "0.2.0")
    assert status.lines()[-1] == (
        "contract: 1 step(s) due (0001_old_label); not yet: 0.1.0 (1 connection(s)) "
        "connected, and the steps remove what releases before 0.2 use")

    before = await state(conn)
    with pytest.raises(ConfigurationError) as refused:
        await contract(conn, schema=schema, release="0.2.0")
    assert refused.value.detail == (
        "contract step(s) 0001_old_label not applied: 0.1.0 (1 connection(s)) connected, "
        "and the steps remove what releases before 0.2 use; stop those processes, then run "
        "'tenantry migrate --contract' again")
    assert await state(conn) == before
    assert await old.fetchval("SELECT tenantry_label(1)") == "one"

    await leave(conn, old)
    status = await read_status(conn, schema, "0.2.0")
    assert status.lines()[-1] == (
        "contract: 1 step(s) due (0001_old_label); safe now: run 'tenantry migrate --contract'")
    contracted = await contract(conn, schema=schema, release="0.2.0")

    assert [s.label for s in contracted] == ["0001_old_label"]
    after = await state(conn)
    assert after == {**before, "columns": ["id", "new_label"],
                     "functions": ["tenantry_label_v2(integer,text)"],
                     "routines": ["label_v2"], "contract": [1]}
    assert await conn.fetchval("SELECT tenantry_label_v2(1, 'none')") == "one"
    # From now on a process of 0.1 refuses to start on it (bootstrap/database.py).
    assert await schema_release(conn, schema) == (Release.parse("0.2.0"),
                                                  Release.parse("0.2.0"))
    assert (await read_status(conn, schema, "0.2.0")).lines()[1] == (
        "schema: release 0.2.0's (the newest release that migrated it); contracted by "
        "0.2.0: serves no release before 0.2")
    assert await contract(conn, schema=schema, release="0.2.0") == []
    again = await migrate(conn, schema=schema, release="0.2.0")
    assert (again.migrations, again.routines, again.contract_due) == ([], [], [])
    assert (await read_status(conn, schema, "0.2.0")).lines()[-1] == "contract: no step due"


async def test_a_new_database_gets_its_contract_steps_at_once(
    dsn: str, conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    """No process of an older release can be using a database migrated from empty."""
    schema = release_01(tmp_path)
    release_02(tmp_path)
    old = await a_process_of(dsn, "0.1.0")  # connected, but there was nothing to use
    try:
        applied = await migrate(conn, schema=schema, release="0.2.0")
    finally:
        await old.close()
    assert [s.label for s in applied.contract] == ["0001_old_label"]
    assert applied.contract_due == []
    assert (await state(conn))["columns"] == ["id", "new_label"]


async def test_a_contract_step_waits_for_the_migrations_of_its_release(
    conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    schema = release_01(tmp_path)
    await migrate(conn, schema=schema, release="0.1.0")
    release_02(tmp_path)
    before = await state(conn)
    with pytest.raises(ConfigurationError) as refused:
        await contract(conn, schema=schema, release="0.2.0")
    assert refused.value.detail == (
        "contract step(s) 0001_old_label not applied: the schema is not release 0.2.0's "
        "yet (1 migration(s) or routine(s) pending); run 'tenantry migrate' first")
    assert await state(conn) == before


async def test_migrating_is_refused_while_a_release_the_new_schema_does_not_serve_is_connected(
    dsn: str, conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    """0.3's schema serves 0.2 and 0.3: with a 0.1 process connected nothing is applied. A
    session that names no release (psql, a monitor) does not hold it back."""
    schema = release_01(tmp_path)
    await migrate(conn, schema=schema, release="0.1.0")
    release_02(tmp_path)
    old = await a_process_of(dsn, "0.1.0")
    bystander = await asyncpg.connect(dsn)
    try:
        before = await state(conn)
        with pytest.raises(ConfigurationError) as refused:
            await migrate(conn, schema=schema, release="0.3.0")
        assert refused.value.detail == (
            "not migrated: 0.1.0 (1 connection(s)) connected, and release 0.3.0's schema "
            "serves releases 0.2 and 0.3 only; stop or upgrade those processes first "
            "('tenantry migrate --status' lists what is connected)")
        assert await state(conn) == before
        status = await read_status(conn, schema, "0.3.0")
        assert status.lines()[2:] == [
            "connected: 0.1.0 (1 connection(s)); 1 other connection(s) naming no Tenantry "
            "release",
            "pending: 1 migration(s) (0002_new_label), 1 routine(s) (label_v2)",
            "migrate: NOT safe: 0.1.0 (1 connection(s)) connected, and release 0.3.0's "
            "schema serves releases 0.2 and 0.3 only; stop or upgrade those processes first",
            "contract: 1 step(s) due (0001_old_label), after 'tenantry migrate'"]
        # 0.2's schema serves 0.1: the same change is applied by 0.2's migrate.
        applied = await migrate(conn, schema=schema, release="0.2.0")
        assert [m.label for m in applied.migrations] == ["0002_new_label"]
    finally:
        await old.close()
        await bystander.close()


async def test_an_edited_contract_step_is_refused(
    conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    schema = release_01(tmp_path)
    release_02(tmp_path)
    await migrate(conn, schema=schema, release="0.2.0")  # new: its step applied at once
    step = tmp_path / "contract" / "0001_old_label.sql"
    step.write_text(step.read_text() + "-- and something else\n")
    for attempt in (migrate, contract):
        with pytest.raises(ConfigurationError) as refused:
            await attempt(conn, schema=schema, release="0.2.0")
        assert refused.value.detail == (
            "contract step 0001_old_label changed after it was applied; add a new step "
            "instead of editing an old one")
