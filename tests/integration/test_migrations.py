"""Applying every migration and routine to an empty database gives the schema the code
expects; a database of an earlier release upgrades to exactly that schema; routines are
applied again when they change or their objects go, and only then (ADR 0037)."""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import logging
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path

import asyncpg
import pytest

from tenantry import __version__
from tenantry.bootstrap import StartupFailed
from tenantry.bootstrap.database import require_current_schema
from tenantry.db.contraction import contract
from tenantry.db.migrate import migrate, missing_routines, pending
from tenantry.db.schema_files import CELL, Schema, available, contract_steps, routines
from tenantry.errors import ConfigurationError
from tests.support.db import dsn_for, scratch_database
from tests.support.harness import tenantry_command
from tests.support.history import ORIGINALS, migrate_originals, original_migrations
from tests.support.schema import REGENERATE, SCHEMA_SQL, dump_schema, migrated_schema
from tests.support.waiting import until

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
    assert [m.version for m in applied.migrations] == [m.version for m in available()]
    # Every routine once; the row-level security policies' function before the migrations.
    assert sorted(r.name for r in applied.routines) == sorted(r.name for r in routines())
    assert applied.routines[0].name == "current_tenant"
    assert await pending(empty_db) == []
    assert await missing_routines(empty_db) == []

    tables = {r["relname"]: r for r in await empty_db.fetch(
        "SELECT relname, relrowsecurity FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public' AND relkind IN ('r', 'p')"
    )}
    assert set(tables) >= TENANT_TABLES | {"schema_migrations", "schema_routines"}
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
    again = await migrate(empty_db)
    assert (again.migrations, again.routines) == ([], [])


async def test_an_edited_migration_is_refused(empty_db: asyncpg.Connection) -> None:
    await migrate(empty_db)
    await empty_db.execute("UPDATE schema_migrations SET sha256 = 'x' WHERE version = 1")
    with pytest.raises(ConfigurationError, match="changed after it was applied"):
        await migrate(empty_db)


_NEWER = "database is of a newer release than this code (" + __version__ + "): "
_RUN_NEWEST = "; run the newest release's 'tenantry migrate'"


# What a newer release leaves that this code can tell: a migration, a routine (its record:
# a new function of the next release, tenantry_x_v2, has no file here) or the release
# that migrated it, recorded.
@pytest.mark.parametrize(("newer", "says"), [
    ("INSERT INTO schema_migrations (version, name, sha256) "
     "VALUES (9999, 'from_the_future', 'x')",
     "it has migration(s) 9999 this code does not know"),
    ("INSERT INTO schema_routines (name, sha256) VALUES ('claim_runs_v9', 'x')",
     "it has routine(s) claim_runs_v9 this code does not know"),
    ("INSERT INTO schema_releases (release) VALUES ('99.0.0')",
     "release 99.0.0 migrated it"),
])
async def test_a_database_newer_than_the_code_is_refused_before_anything_is_applied(
    admin_conn: asyncpg.Connection, newer: str, says: str,
) -> None:
    """An older release's migrate (or `up`) pointed at a newer database changes nothing,
    not even the routines it would otherwise put back (the early one included)."""
    await admin_conn.execute(newer)
    await admin_conn.execute("UPDATE schema_routines SET sha256 = 'newer' "
                             "WHERE name IN ('current_tenant', 'claim_runs')")
    before = await _records(admin_conn)
    releases = await admin_conn.fetch("SELECT * FROM schema_releases ORDER BY release")
    with pytest.raises(ConfigurationError) as refused:
        await migrate(admin_conn)
    assert refused.value.detail == _NEWER + says + _RUN_NEWEST
    assert await _records(admin_conn) == before
    assert await admin_conn.fetch("SELECT * FROM schema_releases ORDER BY release") == releases


async def test_the_schema_snapshot_is_what_the_migrations_produce(admin_dsn: str) -> None:
    produced = await migrated_schema(admin_dsn)
    snapshot = SCHEMA_SQL.read_text()
    diff = "".join(difflib.unified_diff(
        snapshot.splitlines(keepends=True), produced.splitlines(keepends=True),
        fromfile=str(SCHEMA_SQL.name), tofile="migrated database"))
    assert produced == snapshot, (
        f"{SCHEMA_SQL} is not what the migrations produce; regenerate it with "
        f"`{REGENERATE}` and review the diff:\n{diff}")


# -- a database of an earlier release ------------------------------------------------------

@pytest.fixture(scope="module")
async def fresh_schema(admin_dsn: str, template_db: str) -> str:
    """The session's template (a fresh database, migrated by this code), dumped with its
    owners and grants: who may call a function is part of the schema."""
    return await dump_schema(dsn_for(admin_dsn, template_db), privileges=True)


# The original migrations of ORIGINALS (tests/support/history.py): before routines were
# source files, each migration defined its functions and triggers whole. None: all of them,
# what every installation of the last such release holds. The others are releases whose
# routines later migrations changed in ways CREATE OR REPLACE alone cannot undo: 6, the
# first claim's signatures and an older result type of the usage report (dropped by later
# migrations); 14, console functions the tenant role could call (revoked in 0015 and 0019);
# 30, the step's commit with two OUT columns (0031 has three); 33, the parent's wake as an
# AFTER trigger (0034 makes it BEFORE).
@pytest.mark.parametrize("upto", [None, 6, 14, 30, 33])
async def test_a_database_of_an_earlier_release_upgrades_to_the_same_schema(
    admin_dsn: str, template_db: str, fresh_schema: str, upto: int | None,
) -> None:
    async with scratch_database(admin_dsn, "tenantry_release",
                                prepare=lambda c: migrate_originals(c, upto)) as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            last = upto or len(original_migrations())
            left = [m.version for m in available() if m.version > last]
            assert [m.version for m in await pending(conn)] == left

            applied = await migrate(conn)
            # The end state of an upgrade: once the older release has gone, its contract
            # steps (a fresh database has them at once).
            contracted = await contract(conn)

            assert [m.version for m in applied.migrations] == left
            assert [s.version for s in contracted] == [s.version for s in contract_steps()]
            names = [r.name for r in applied.routines]
            assert sorted(names) == sorted(r.name for r in routines())  # each once
            recorded = {r["name"]: r["sha256"]
                        for r in await conn.fetch("SELECT name, sha256 FROM schema_routines")}
            assert recorded == {r.name: r.sha256 for r in routines()}
            upgraded = await dump_schema(dsn, privileges=True)
            assert upgraded == fresh_schema, "".join(difflib.unified_diff(
                fresh_schema.splitlines(keepends=True), upgraded.splitlines(keepends=True),
                fromfile="fresh database", tofile="upgraded database"))
            # The migrations are recorded as a fresh cell records them: a tenant may move
            # between an upgraded cell and a new one (cells/copy.py compares the two).
            fresh = await asyncpg.connect(dsn_for(admin_dsn, template_db))
            try:
                listed = "SELECT version, sha256 FROM schema_migrations ORDER BY version"
                assert [tuple(r) for r in await conn.fetch(listed)] == [
                    tuple(r) for r in await fresh.fetch(listed)]
            finally:
                await fresh.close()
            again = await migrate(conn)
            assert (again.migrations, again.routines) == ([], [])
        finally:
            await conn.close()


def test_the_original_migrations_are_the_ones_databases_recorded() -> None:
    """rewritten.txt holds the sha256 of each original file, as the migrator of its time
    recorded it; a wrong line would refuse an existing database ("changed after it was
    applied")."""
    listed = {}
    text = (resources.files("tenantry.db.migrations") / "rewritten.txt").read_text()
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            version, sha = line.split()
            listed[int(version)] = sha
    originals = {v: hashlib.sha256(sql.encode()).hexdigest()
                 for v, _, sql in original_migrations()}
    current = {m.version: m.sha256 for m in available()}
    assert listed == {v: sha for v, sha in originals.items() if current[v] != sha}
    assert ORIGINALS in text


# -- routines applied again, and only then -------------------------------------------------

def _copy_of_cell(root: Path) -> Schema:
    """The cell's migrations and routines as files of this test's own, to edit."""
    for part in ("migrations", "routines"):
        shutil.copytree(Path(str(resources.files(f"tenantry.db.{part}"))), root / part)
    return Schema(root / "migrations", CELL.record_table, CELL.lock_key,
                  routines=root / "routines")


async def _records(conn: asyncpg.Connection) -> dict[str, tuple[str, object]]:
    return {r["name"]: (r["sha256"], r["applied_at"])
            for r in await conn.fetch("SELECT name, sha256, applied_at FROM schema_routines")}


async def test_a_changed_routine_is_applied_again_and_recorded(
    admin_conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    schema = _copy_of_cell(tmp_path)
    before = await _records(admin_conn)
    source = tmp_path / "routines" / "queue_depth.sql"
    source.write_text(source.read_text().replace(
        "SELECT coalesce(sum(queued), 0)::bigint FROM public.tenant_load",
        "SELECT coalesce(sum(queued), 0)::bigint + 1000 FROM public.tenant_load"))

    applied = await migrate(admin_conn, schema=schema)

    assert ([m.version for m in applied.migrations], [r.name for r in applied.routines]) == (
        [], ["queue_depth"])
    assert await admin_conn.fetchval("SELECT tenantry_queue_depth()") == 1000
    # Its grants come with it: the tenant role and the console's may call it.
    for role in ("tenantry_app", "tenantry_console"):
        assert await admin_conn.fetchval(
            "SELECT has_function_privilege($1, 'tenantry_queue_depth()', 'EXECUTE')", role)
    after = await _records(admin_conn)
    assert after["queue_depth"][0] == hashlib.sha256(source.read_text().encode()).hexdigest()
    assert after["queue_depth"][1] != before["queue_depth"][1]
    # Every other routine is left alone, its record untouched.
    del before["queue_depth"], after["queue_depth"]
    assert after == before


async def test_a_routine_whose_function_or_trigger_is_gone_is_applied_again(
    admin_conn: asyncpg.Connection,
) -> None:
    await admin_conn.execute("DROP FUNCTION tenantry_console_spend_capped(text[])")
    await admin_conn.execute("DROP TRIGGER run_events_notify ON run_events")
    assert {r.name for r in await missing_routines(admin_conn)} == {
        "console_spend_capped", "notify_event"}

    applied = await migrate(admin_conn)

    assert sorted(r.name for r in applied.routines) == ["console_spend_capped", "notify_event"]
    assert await missing_routines(admin_conn) == []
    # Back as the file says: the console's alone, and a notification per appended event.
    assert [await admin_conn.fetchval(
        "SELECT has_function_privilege($1, 'tenantry_console_spend_capped(text[])', "
        "'EXECUTE')", role) for role in ("tenantry_console", "tenantry_app")] == [True, False]
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM pg_trigger WHERE tgname = 'run_events_notify'") == 33


async def test_the_migrator_gives_way_to_a_live_transaction_holding_a_lock_it_needs(
    admin_conn: asyncpg.Connection, database_dsn: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """Online (a rolling upgrade), a routine's trigger needs a table a live transaction
    writes: the migrator waits at most its lock timeout, rolls back and tries again, so the
    live transaction is never the one a deadlock ends; once it commits, the routine goes in.
    (CI's rolling upgrade met a deadlock here: refuse_frozen.sql's triggers lock tables in
    the file's order, which live transactions do not follow.)"""
    await admin_conn.execute("DROP TRIGGER app_sessions_refuse_frozen ON app_sessions")
    caplog.set_level(logging.INFO, logger="tenantry.db.migrate")
    live = await asyncpg.connect(database_dsn)
    try:
        writing = live.transaction()
        await writing.start()
        await live.execute("LOCK TABLE app_sessions IN ROW EXCLUSIVE MODE")  # as an INSERT
        migrating = asyncio.create_task(migrate(admin_conn))

        async def gave_way() -> bool:
            return any("gave way" in r.getMessage() for r in caplog.records)

        await until(gave_way, "the migrator gave way to the live transaction", 30)
        assert not migrating.done()
        # The live transaction goes on, takes another lock the routine's file wants, and
        # commits: it was never made to wait for the migrator long, nor ended by a deadlock.
        await live.execute("LOCK TABLE tenant_users IN ROW EXCLUSIVE MODE")
        await writing.commit()
        applied = await migrating
    finally:
        await live.close()
    assert [r.name for r in applied.routines] == ["refuse_frozen"]
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM pg_trigger WHERE tgname = 'app_sessions_refuse_frozen'") == 1


async def test_every_function_view_and_trigger_of_the_schema_is_a_routine(
    admin_conn: asyncpg.Connection,
) -> None:
    """Both ways: a routine file whose object a migration removed must go too (else it
    comes back at the next migrate), and a function, view or trigger made outside the
    routines has no source a reviewer reads — but for what a contract step leaves of a
    routine it retires, in its own file (0001: what an older release's call is answered
    with)."""
    in_schema = {(r["kind"], r["name"]) for r in await admin_conn.fetch(
        """
        SELECT 'function' AS kind, p.proname::text AS name FROM pg_proc p
        WHERE p.pronamespace = 'public'::regnamespace
          AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                          AND d.objid = p.oid AND d.deptype = 'e')
        UNION ALL
        SELECT 'view', c.relname::text FROM pg_class c
        WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('v', 'm')
        UNION ALL
        SELECT 'trigger', c.relname || '.' || t.tgname FROM pg_trigger t
        JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relnamespace = 'public'::regnamespace AND NOT t.tgisinternal
          AND t.tgparentid = 0
        """)}
    in_files = {o for r in routines() for o in r.objects}
    left_by_steps = {("function", f"tenantry_{name}") for step in contract_steps()
                     for name in step.retires
                     if f"CREATE OR REPLACE FUNCTION tenantry_{name}(" in step.sql}
    assert left_by_steps == {("function", "tenantry_register_worker")}
    assert in_schema - in_files - left_by_steps == set(), \
        "made outside src/tenantry/db/routines/"
    assert in_files - in_schema == set(), "routine files whose objects the schema lacks"
    assert len({r.name for r in routines()}) == len(routines())


async def test_a_view_a_migration_drops_comes_back(
    empty_db: asyncpg.Connection, tmp_path: Path,
) -> None:
    """A migration may drop a view to change a column it reads; the view's routine, whose
    file did not change, is applied again because its view is missing."""
    (tmp_path / "migrations").mkdir()
    (tmp_path / "routines").mkdir()
    (tmp_path / "migrations" / "0001_items.sql").write_text(
        "CREATE TABLE items (id integer PRIMARY KEY, label varchar(10) NOT NULL);\n"
        "INSERT INTO items VALUES (1, 'short');\n")
    (tmp_path / "routines" / "label_of.sql").write_text(
        "CREATE OR REPLACE FUNCTION tenantry_label_of(p text) RETURNS text\n"
        "LANGUAGE sql IMMUTABLE AS $$ SELECT upper(p) $$;\n")
    # A view reads its function at creation: it says so.
    (tmp_path / "routines" / "item_labels.sql").write_text(
        "-- requires: label_of\n"
        "CREATE OR REPLACE VIEW item_labels AS\n"
        "    SELECT id, tenantry_label_of(label::text) AS label, label AS raw FROM items;\n")
    schema = Schema(tmp_path / "migrations", "test_migrations", 0x7E_4A_47_99,
                    routines=tmp_path / "routines", routine_table="test_routines")
    first = await migrate(empty_db, schema=schema)
    assert [r.name for r in first.routines] == ["label_of", "item_labels"]

    (tmp_path / "migrations" / "0002_longer_labels.sql").write_text(
        "DROP VIEW item_labels;\n"
        "ALTER TABLE items ALTER COLUMN label TYPE varchar(500);\n"
        "INSERT INTO items VALUES (2, repeat('x', 400));\n")
    second = await migrate(empty_db, schema=schema)

    assert [m.version for m in second.migrations] == [2]
    assert [r.name for r in second.routines] == ["item_labels"]
    assert [tuple(r) for r in await empty_db.fetch(
        "SELECT id, label, length(raw) FROM item_labels ORDER BY id")] == [
        (1, "SHORT", 5), (2, "X" * 400, 400)]
    assert await empty_db.fetchval(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = 'item_labels'::regclass AND attname = 'raw'") == (
        "character varying(500)")


async def test_a_routine_that_fails_applies_nothing_and_says_which(
    admin_conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    schema = _copy_of_cell(tmp_path)
    before = await _records(admin_conn)
    for name, text in (("queue_depth", "SELECT 1::bigint"), ("scheduler_gauges", None)):
        source = tmp_path / "routines" / f"{name}.sql"
        if text is None:  # breaks it: a column the function's result does not have
            source.write_text(source.read_text().replace("RETURNS TABLE (tenant_class text,",
                                                          "RETURNS TABLE (tenant_class int,"))
        else:
            source.write_text(source.read_text().replace(
                "SELECT coalesce(sum(queued), 0)::bigint FROM public.tenant_load", text))

    with pytest.raises(ConfigurationError, match=r"routine scheduler_gauges\.sql could not"):
        await migrate(admin_conn, schema=schema)

    assert await _records(admin_conn) == before
    assert await admin_conn.fetchval("SELECT tenantry_queue_depth()") == 0


# -- what the operator sees ----------------------------------------------------------------

def _tenantry_migrate(dsn: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENANTRY_")}
    env.update(TENANTRY_DATA_DIR=str(data_dir), TENANTRY_DATABASE_URL=dsn)
    return subprocess.run([*tenantry_command(), "migrate"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)


async def test_tenantry_migrate_shows_each_migration_and_routine_it_applies(
    admin_dsn: str, tmp_path: Path,
) -> None:
    async with scratch_database(admin_dsn, "tenantry_cli") as dsn:
        first = await asyncio.to_thread(_tenantry_migrate, dsn, tmp_path)
        assert first.returncode == 0, first.stderr
        # A new database gets its contract steps at once (nothing older can be using it).
        assert first.stdout.strip().splitlines() == [
            f"applied {len(available())} migration(s) and {len(routines())} routine(s); "
            "schema is current",
            f"applied {len(contract_steps())} contract step(s) (a new database)"]
        # One line each (rich prints the time only when it changes), early routine first.
        shown = [m[0] for m in re.findall(r"\b((migration|routine|contract step) \w+)",
                                          first.stderr)]
        assert shown == (["routine current_tenant"]
                         + [f"migration {m.version:04d}_{m.name}" for m in available()]
                         + [f"routine {r.name}" for r in routines() if not r.early]
                         + [f"contract step {s.label}" for s in contract_steps()])

        again = await asyncio.to_thread(_tenantry_migrate, dsn, tmp_path)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == (
            "applied 0 migration(s) and 0 routine(s); schema is current")


async def test_a_process_refuses_a_database_that_lacks_a_routine(
    database_dsn: str, admin_conn: asyncpg.Connection,
) -> None:
    await require_current_schema(database_dsn)  # as migrated: serves
    await admin_conn.execute("DROP TRIGGER runs_wake_parent ON runs")
    with pytest.raises(StartupFailed) as refused:
        await require_current_schema(database_dsn)
    assert refused.value.detail == (
        "1 routine(s) missing (wake_parent); run 'tenantry migrate'")
