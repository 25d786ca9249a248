"""The event log partitioned inside a cell (migration 0032, ADR 0026): runs spread over the
partitions, a run's read touches one, an upgrade keeps every event, tenants stay walled off
even from a partition named directly, and retention still deletes run by run."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from tenantry.db import Database
from tenantry.db.migrate import migrate
from tenantry.db.schema_files import available
from tenantry.ids import RunId, TenantId
from tenantry.retention.cleaner import Cleaner
from tenantry.runs import log
from tenantry.runs.events import ModelReplied
from tests.support.db import login_dsn, scratch_database
from tests.support.history import migrate_originals
from tests.support.retention import (
    Seeded,
    ended_runs,
    tenant_and_agent,
    tenant_and_agent_before_live_versions,
)

PARTITIONS = 32
#: The migration that partitions the log, and the schema just before it (found by name, so
#: a renumbering on merge needs no edit here).
PARTITIONING = next(m.version for m in available() if m.name == "partitioned_event_log")
BEFORE = PARTITIONING - 1


def _big_reply(text: str) -> ModelReplied:
    """A model reply over the 8 KiB inline cap: its data goes to run_event_payloads."""
    return ModelReplied(text=text, calls=[], usage={"input_tokens": 1, "output_tokens": 1},
                        provider="scripted", account="scripted", model="scripted",
                        cost_micros=1, price_version="test", latency_ms=1.0)


async def _events_by_partition(conn: asyncpg.Connection, table: str) -> dict[str, int]:
    rows = await conn.fetch(
        f"SELECT tableoid::regclass::text AS part, count(*) AS n FROM {table} GROUP BY 1")
    return {r["part"]: r["n"] for r in rows}


def _scanned_relations(plan: Any) -> set[str]:
    """Every table an EXPLAIN (FORMAT JSON) plan reads."""
    found: set[str] = set()
    stack = [plan]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "Relation Name" in node:
                found.add(node["Relation Name"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


async def test_the_runs_of_a_tenant_spread_over_every_partition(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    seeded = await tenant_and_agent(db, "acme")
    runs = await ended_runs(admin_conn, seeded, 640, events=3, ended_days_ago=1)

    spread = await _events_by_partition(admin_conn, "run_events")
    assert len(spread) == PARTITIONS
    assert sum(spread.values()) == 640 * 3
    # 640 runs over 32 partitions: 20 each on average; a hash that clumped would show here.
    assert max(spread.values()) < 3 * 20 * 3
    # A run's events never straddle partitions: a run is read, vacuumed and deleted in one.
    assert await admin_conn.fetchval(
        "SELECT max(n) FROM (SELECT count(DISTINCT tableoid) AS n FROM run_events "
        "WHERE run_id = ANY($1) GROUP BY run_id) x", [r.uuid for r in runs]) == 1


async def test_a_runs_payloads_sit_in_the_partition_numbered_like_its_events(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    seeded = await tenant_and_agent(db, "acme")
    runs = await ended_runs(admin_conn, seeded, 40, events=2, ended_days_ago=1)
    await admin_conn.execute(
        "INSERT INTO run_event_payloads (tenant_id, run_id, seq, data) "
        "SELECT $1, r, 2, '{\"text\": \"long\"}' FROM unnest($2::uuid[]) AS r",
        seeded.tenant.value, [r.uuid for r in runs])
    pairs = await admin_conn.fetch(
        "SELECT DISTINCT e.tableoid::regclass::text AS events, p.tableoid::regclass::text AS "
        "payloads FROM run_events e JOIN run_event_payloads p USING (tenant_id, run_id, seq)")
    assert len(pairs) > 1
    for pair in pairs:
        assert pair["events"].rsplit("_", 1)[1] == pair["payloads"].rsplit("_", 1)[1], pair


async def test_reading_one_run_touches_one_partition(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    seeded = await tenant_and_agent(db, "acme")
    [run, *_] = await ended_runs(admin_conn, seeded, 64, events=3, ended_days_ago=1)
    await admin_conn.execute("ANALYZE run_events, run_event_payloads")
    read = log.Q.read_events  # the engine's own read of a run's log (log.read)

    # Planned with the values (what a one-off statement gets).
    [planned] = json.loads(await admin_conn.fetchval(
        f"EXPLAIN (FORMAT JSON) {read}", seeded.tenant.value, run.uuid, 0, 500))
    scanned = _scanned_relations(planned)
    assert len({s for s in scanned if s.startswith("run_events_p")}) == 1, scanned
    assert len({s for s in scanned if s.startswith("run_event_payloads_p")}) <= 1, scanned

    # A prepared statement's generic plan (what the pool's cached statements get): the
    # executor prunes by the parameter, so only one partition is opened.
    await admin_conn.execute(
        f"PREPARE one_run (text, uuid, integer, integer) AS {read}")
    await admin_conn.execute("SET plan_cache_mode = force_generic_plan")
    [executed] = json.loads(await admin_conn.fetchval(
        # ids made by the platform, not input: safe as literals in a utility statement
        f"EXPLAIN (ANALYZE, COSTS OFF, FORMAT JSON) "
        f"EXECUTE one_run ('{seeded.tenant.value}', '{run.uuid}', 0, 500)"))
    opened = _scanned_relations(executed["Plan"])
    events_opened = {s for s in opened if s.startswith("run_events_p")}
    assert len(events_opened) == 1, opened
    assert executed["Plan"]["Actual Rows"] == 3


@pytest.fixture
async def db_before(admin_dsn: str) -> AsyncIterator[str]:
    """A database as the release before the partitioning left it (the original migrations
    up to 0031, tests/support/history.py): what an installation upgrading has."""
    async with scratch_database(admin_dsn, "tenantry_before",
                                prepare=lambda conn: migrate_originals(conn, upto=BEFORE)) as dsn:
        yield dsn


LOG = ("SELECT tenant_id, run_id, seq, type, data::text, format, created_at FROM run_events "
       "ORDER BY tenant_id, run_id, seq")
PAYLOADS = ("SELECT tenant_id, run_id, seq, data::text FROM run_event_payloads "
            "ORDER BY tenant_id, run_id, seq")


async def test_upgrading_a_database_with_events_keeps_every_event_and_payload(
    db_before: str,
) -> None:
    admin = await asyncpg.connect(db_before)
    db = await Database.connect(login_dsn(db_before), min_size=1, max_size=3)
    try:
        assert await admin.fetchval(
            "SELECT relkind::text FROM pg_class WHERE relname = 'run_events'") == "r"
        acme = await tenant_and_agent_before_live_versions(db, admin, "acme")
        globex = await tenant_and_agent_before_live_versions(db, admin, "globex")
        # What the engine left behind: ended runs of both tenants, and a live run whose
        # long model reply went through the real append path into run_event_payloads.
        await ended_runs(admin, acme, 150, events=6, ended_days_ago=2)
        await ended_runs(admin, globex, 50, events=4, ended_days_ago=2)
        [live] = await ended_runs(admin, acme, 1, events=1, ended_days_ago=0,
                                  status="finished")
        long_text = "a long answer " * 1000
        async with db.tenant_tx(acme.tenant) as conn:
            big_seq = await log.append(conn, acme.tenant, live, _big_reply(long_text),
                                       epoch=None)
        before_log = [tuple(r) for r in await admin.fetch(LOG)]
        before_payloads = [tuple(r) for r in await admin.fetch(PAYLOADS)]
        assert len(before_log) == 150 * 6 + 50 * 4 + 2 and len(before_payloads) == 1

        applied = await migrate(admin)
        assert applied.migrations[0].version == PARTITIONING

        assert await admin.fetchval(
            "SELECT relkind::text FROM pg_class WHERE relname = 'run_events'") == "p"
        assert [tuple(r) for r in await admin.fetch(LOG)] == before_log
        assert [tuple(r) for r in await admin.fetch(PAYLOADS)] == before_payloads
        # The old tables are gone, not left beside the new ones.
        assert await admin.fetchval(
            "SELECT count(*) FROM pg_class WHERE relname LIKE '%unpartitioned%'") == 0

        # Through the tenant's own read the long reply comes back whole ...
        [*_, reply] = await log.read_now(db, acme.tenant, live)
        assert reply.seq == big_seq and reply.data["text"] == long_text
        # ... the log goes on from where it was, and someone listening hears of it ...
        heard: asyncio.Queue[str] = asyncio.Queue()
        listener = await asyncpg.connect(db_before)
        await listener.add_listener("tenantry_events",
                                    lambda *args: heard.put_nowait(args[3]))
        try:
            async with db.tenant_tx(acme.tenant) as conn:
                seq = await log.append(conn, acme.tenant, live, _big_reply("more " * 3000),
                                       epoch=None)
            assert seq == big_seq + 1
            note = await asyncio.wait_for(heard.get(), 30)
            assert note == f"{acme.tenant.value} {live.uuid} {seq}"
        finally:
            await listener.close()
        # ... and a slot already taken is still refused (invariant 2).
        with pytest.raises(asyncpg.UniqueViolationError):
            await admin.execute(
                "INSERT INTO run_events (tenant_id, run_id, seq, type, data) "
                "VALUES ($1, $2, $3, 'RunFinished', '{}')", acme.tenant.value, live.uuid, seq)
    finally:
        await db.close()
        await admin.close()


async def _two_tenants_with_events(
    db: Database, admin_conn: asyncpg.Connection,
) -> tuple[Seeded, Seeded]:
    acme = await tenant_and_agent(db, "acme")
    globex = await tenant_and_agent(db, "globex")
    for seeded in (acme, globex):
        runs = await ended_runs(admin_conn, seeded, 96, events=2, ended_days_ago=1)
        await admin_conn.execute(
            "INSERT INTO run_event_payloads (tenant_id, run_id, seq, data) "
            "SELECT $1, r, 2, '{\"text\": \"secret\"}' FROM unnest($2::uuid[]) AS r",
            seeded.tenant.value, [r.uuid for r in runs])
    return acme, globex


async def test_a_tenant_reads_only_its_own_events_through_the_parent(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    acme, _ = await _two_tenants_with_events(db, admin_conn)
    async with db.tenant_tx(acme.tenant) as conn:
        # No tenant filter at all: row-level security on the parent filters.
        seen = {r["tenant_id"] for r in await conn.fetch("SELECT tenant_id FROM run_events")}
        payloads = {r["tenant_id"]
                    for r in await conn.fetch("SELECT tenant_id FROM run_event_payloads")}
        assert await conn.fetchval("SELECT count(*) FROM run_events") == 96 * 2
    assert seen == payloads == {acme.tenant.value}


async def test_a_tenant_role_cannot_name_a_partition(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    acme, globex = await _two_tenants_with_events(db, admin_conn)
    for table in ("run_events", "run_event_payloads"):
        for n in range(PARTITIONS):
            async with db.tenant_tx(acme.tenant) as conn:
                with pytest.raises(asyncpg.InsufficientPrivilegeError,
                                   match="permission denied"):
                    await conn.fetch(f"SELECT * FROM {table}_p{n:02d}")
            async with db.tenant_tx(acme.tenant) as conn:
                with pytest.raises(asyncpg.InsufficientPrivilegeError,
                                   match="permission denied"):
                    await conn.execute(
                        f"INSERT INTO {table}_p{n:02d} (tenant_id, run_id, seq, data) "
                        "VALUES ($1, gen_random_uuid(), 1, '{}')", globex.tenant.value)


async def test_a_partition_granted_by_mistake_still_shows_only_the_tenants_rows(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    """The second wall: an operator who grants the application role a partition (by hand,
    or a future migration that forgets) still exposes no other tenant's rows."""
    acme, _ = await _two_tenants_with_events(db, admin_conn)
    both = await admin_conn.fetch(
        "SELECT tableoid::regclass::text AS part FROM run_events GROUP BY 1 "
        "HAVING count(DISTINCT tenant_id) = 2")
    assert both, "no partition holds both tenants' events"
    for row in both:
        part = row["part"]
        payload_part = part.replace("run_events", "run_event_payloads")
        await admin_conn.execute(f"GRANT SELECT ON {part}, {payload_part} TO tenantry_app")
        async with db.tenant_tx(acme.tenant) as conn:
            seen = {r["tenant_id"] for r in await conn.fetch(f"SELECT tenant_id FROM {part}")}
            seen |= {r["tenant_id"]
                     for r in await conn.fetch(f"SELECT tenant_id FROM {payload_part}")}
        assert seen == {acme.tenant.value}, part
        async with db.unscoped() as conn:  # no tenant set: nothing at all
            assert await conn.fetchval(f"SELECT count(*) FROM {part}") == 0


async def test_retention_deletes_one_run_and_leaves_its_partition_neighbours(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    seeded = await tenant_and_agent(db, "acme")
    runs = await ended_runs(admin_conn, seeded, 100, events=5, ended_days_ago=40)
    await admin_conn.execute(
        "INSERT INTO run_event_payloads (tenant_id, run_id, seq, data) "
        "SELECT $1, r, 3, '{\"text\": \"long\"}' FROM unnest($2::uuid[]) AS r",
        seeded.tenant.value, [r.uuid for r in runs])
    # Two runs in one partition: deleting one must not take the partition's other rows.
    rows = await admin_conn.fetch(
        "SELECT tableoid::regclass::text AS part, array_agg(DISTINCT run_id) AS runs "
        "FROM run_events GROUP BY 1 HAVING count(DISTINCT run_id) >= 2 LIMIT 1")
    doomed, neighbour = rows[0]["runs"][:2]

    assert await Cleaner(db, None).delete_run(seeded.tenant, RunId(doomed))

    remaining = await admin_conn.fetch(
        "SELECT run_id, count(*) AS n FROM run_events GROUP BY run_id")
    counts = {r["run_id"]: r["n"] for r in remaining}
    assert doomed not in counts
    assert counts[neighbour] == 5
    assert len(counts) == 99 and set(counts.values()) == {5}
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM run_event_payloads WHERE run_id = $1", doomed) == 0
    assert await admin_conn.fetchval("SELECT count(*) FROM run_event_payloads") == 99
    # Outside retention, the log stays immutable in every partition (the trigger cloned
    # onto each one).
    with pytest.raises(asyncpg.RestrictViolationError, match="immutable"):
        await admin_conn.execute("DELETE FROM run_events WHERE run_id = $1", neighbour)
    with pytest.raises(asyncpg.RestrictViolationError, match="immutable"):
        await admin_conn.execute(
            f"UPDATE {rows[0]['part']} SET data = '{{}}' WHERE run_id = $1", neighbour)


async def test_the_application_role_has_privileges_on_the_parents_only(
    admin_conn: asyncpg.Connection,
) -> None:
    rows = await admin_conn.fetch(
        "SELECT c.relname, has_table_privilege('tenantry_app', c.oid, 'SELECT') AS can_read, "
        "c.relrowsecurity AS rls, "
        "EXISTS (SELECT 1 FROM pg_policies p WHERE p.tablename = c.relname) AS policy "
        "FROM pg_class c WHERE c.relname ~ '^run_event(s|_payloads)(_p[0-9]+)?$' "
        "AND c.relkind IN ('r', 'p')")
    found = {r["relname"]: (r["can_read"], r["rls"], r["policy"]) for r in rows}
    assert found.pop("run_events") == (True, True, True)
    assert found.pop("run_event_payloads") == (True, True, True)
    assert len(found) == 2 * PARTITIONS
    assert set(found.values()) == {(False, True, True)}


async def test_a_tenant_id_not_a_run_decides_nothing_about_partitions(
    db: Database,
) -> None:
    """Reading a run of another tenant through the engine's own read answers nothing, as
    before the log was partitioned (invariant 4)."""
    acme = await tenant_and_agent(db, "acme")
    globex = await tenant_and_agent(db, "globex")
    async with db.tenant_tx(acme.tenant) as conn:
        run = RunId.new()
        await conn.execute(
            "INSERT INTO runs (tenant_id, run_id, agent_id, agent_version, input, "
            "request_sha256, last_seq) VALUES ($1, $2, $3, 1, '{}', '\\x00', 0)",
            acme.tenant.value, run.uuid, acme.agent.uuid)
        await log.append(conn, acme.tenant, run, _big_reply("x" * 9000), epoch=None)
    assert len(await log.read_now(db, acme.tenant, run)) == 1
    assert await log.read_now(db, TenantId(globex.tenant.value), run) == []


async def test_a_payload_without_its_event_is_refused(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    """The payload → event foreign key holds partition to partition (ADR 0026)."""
    seeded = await tenant_and_agent(db, "acme")
    [run] = await ended_runs(admin_conn, seeded, 1, events=2, ended_days_ago=1)
    with pytest.raises(asyncpg.ForeignKeyViolationError):
        await admin_conn.execute(
            "INSERT INTO run_event_payloads (tenant_id, run_id, seq, data) "
            "VALUES ($1, $2, 3, '{}')", seeded.tenant.value, run.uuid)
    await admin_conn.execute(
        "INSERT INTO run_event_payloads (tenant_id, run_id, seq, data) VALUES ($1, $2, 2, '{}')",
        seeded.tenant.value, run.uuid)
    # Nor can an event lose its payload's anchor, even in retention's own mode.
    async with admin_conn.transaction():
        await admin_conn.execute("SET LOCAL tenantry.retention = 'on'")
        with pytest.raises(asyncpg.ForeignKeyViolationError):
            await admin_conn.execute(
                "DELETE FROM run_events WHERE run_id = $1 AND seq = 2", run.uuid)
