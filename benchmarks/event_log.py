"""event_log: the event log's layouts side by side — unpartitioned (the schema up to
migration 0032) and partitioned (0032: HASH (run_id), 32 partitions), with the alternatives
ADR 0026 weighed: HASH (run_id) into 8, and HASH (tenant_id) into 32.

Each layout gets its own fresh database on one server (``TENANTRY_DATABASE_URL``, else an
embedded Postgres): 0032 as shipped, or the schema of the release before 0032 (the original
migrations up to 0031, ``tests/support/history.py``) with the original 0032's text
rewritten at its two marked lines for an alternative. Each is seeded alike,
straight into Postgres as the retention tests seed (``tests/support/retention.py``):
``EVENT_LOG_RUNS`` (default 10,000) ended runs of ``EVENT_LOG_EVENTS`` (default 25) events,
over 32 tenants of which one (the whale) has half the runs; every 10th run has a 9 KiB
payload beside its log (run_event_payloads). Then, ``EVENT_LOG_ROUNDS`` (default 5) times,
the layouts taking turns within a round so a busy spell of the machine hits them all:

- ``append_per_s``: 20 tasks, each appending ``EVENT_LOG_APPENDS`` (default 100) events to
  its own run, one transaction each, through the engine's append (``runs.log.append``: the
  run row's counter, the insert, row-level security, the notify trigger) on the tenant
  pool's role; ``append_p50_ms`` / ``_p99_ms``: 300 such appends by one writer, one at a
  time (an append's own cost, commit included, without queueing);
- ``read_p50_ms`` / ``read_p99_ms``: 1,000 reads of a whole run's log, one at a time, by
  the API's read (``runs.log.read_now``: ``tenantry_run_events``, payloads joined);
- ``delete_run_p50_ms`` / ``_p99_ms``: 40 runs deleted one by one by retention
  (``Cleaner.delete_run``: tombstone, payloads, events, run row);
- ``vacuum_after_deletes_ms``: VACUUM of all of run_events after those deletions (the
  same dead rows on every layout); ``freeze_scan_one_table_ms``: VACUUM (FREEZE,
  DISABLE_PAGE_SKIPPING) — the full scan of an anti-wraparound visit — of the one table
  that held the last deleted run: a partition, or the whole unpartitioned log.

Per layout, medians over the rounds; sizes (``index_mib_whole``, ``index_mib_largest``: the
primary-key index of all run_events / of its largest partition; ``largest_share``: that
partition's share of the rows) once after seeding. ``upgrade_s``: the seeded unpartitioned
database upgraded at the end by this code — 0032, the later migrations, the routines
(``upgrade_events_per_s``).

Prints progress on stderr and one JSON line last on stdout:
``{"layouts": {name: {...}}, "events", "runs", "rounds", "upgrade_s", ...}``.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from _harness import Bench, console, env_positive, main, percentile, source_state
from tenantry.db import Database
from tenantry.db.migrate import migrate
from tenantry.db.schema_files import Migration, available
from tenantry.ids import RunId
from tenantry.retention.cleaner import Cleaner
from tenantry.runs import log
from tenantry.runs.events import ModelReplied

# The seeding helper is the retention tests' own.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.history import migrate_originals, original_migrations
from tests.support.retention import (
    Seeded,
    ended_runs,
    tenant_and_agent,
    tenant_and_agent_before_live_versions,
)

TENANTS = 32
WRITERS = 20
READS = 1000
SERIAL_APPENDS = 300
DELETES = 40
PAYLOAD_EVERY = 10
SEED_CHUNK = 1000

# 0032's marked lines, and what each alternative puts there.
KEY = "PARTITION BY HASH (run_id);  -- partition key"
COUNT = "parts CONSTANT integer := 32;  -- partition count"
LAYOUTS: dict[str, dict[str, str] | None] = {
    "unpartitioned": None,  # the schema up to 0031
    "hash_run_32": {},  # 0032 as shipped
    "hash_run_8": {COUNT: COUNT.replace("32", "8")},
    "hash_tenant_32": {KEY: KEY.replace("run_id", "tenant_id")},
}


def partitioning() -> Migration:
    """Migration 0032, found by name (a renumbering needs no edit here)."""
    return next(m for m in available() if m.name == "partitioned_event_log")


def original_partitioning() -> str:
    """0032 as the release that brought it applied it, triggers included: the text the
    alternatives rewrite, on a database of the release before (ADR 0037)."""
    version = partitioning().version
    return next(sql for v, _, sql in original_migrations(version) if v == version)


def _reply(n: int) -> ModelReplied:
    """A step's worth of log: a model reply of a few hundred bytes."""
    return ModelReplied(text=f"step {n}: " + "the answer is forty-two. " * 12, calls=[],
                        usage={"input_tokens": 800, "output_tokens": 40},
                        provider="scripted", account="scripted", model="scripted",
                        cost_micros=12, price_version="bench", latency_ms=1.0)


@dataclass(slots=True)
class Layout:
    name: str
    dsn: str
    db: Database
    tenants: list[Seeded]
    runs: list[tuple[Seeded, RunId]]  # ended, readable, deletable
    sizes: dict[str, Any] = field(default_factory=dict)
    rounds: list[dict[str, float]] = field(default_factory=list)


async def _make(bench: Bench, name: str, events: int, runs: int) -> Layout:
    rewrite = LAYOUTS[name]
    before = partitioning().version - 1
    made = await (bench.database() if name == "hash_run_32" else bench.another_database(
        prepare=lambda conn: migrate_originals(conn, upto=before)))
    if rewrite:
        sql = original_partitioning()
        for old, new in rewrite.items():
            if old not in sql:
                raise RuntimeError(f"0032 has no line {old!r} to rewrite")
            sql = sql.replace(old, new)
        conn = await asyncpg.connect(made.dsn)
        try:
            async with conn.transaction():
                await conn.execute(sql)
        finally:
            await conn.close()
    db = await Database.connect(made.dsn, min_size=WRITERS, max_size=WRITERS)
    if name == "hash_run_32":
        tenants = [await tenant_and_agent(db, f"t{i:02d}") for i in range(TENANTS)]
    else:  # the release before 0032's: agents had no live version yet (0036)
        admin = await asyncpg.connect(made.dsn)
        try:
            tenants = [await tenant_and_agent_before_live_versions(db, admin, f"t{i:02d}")
                       for i in range(TENANTS)]
        finally:
            await admin.close()
    # Half the runs are the whale's (tenant 0); the rest spread over the others.
    shares = [runs // 2] + [(runs - runs // 2) // (TENANTS - 1)] * (TENANTS - 1)
    started = time.perf_counter()
    conn = await asyncpg.connect(made.dsn)
    seeded: list[tuple[Seeded, RunId]] = []
    try:
        for tenant, count in zip(tenants, shares, strict=True):
            for done in range(0, count, SEED_CHUNK):
                ids = await ended_runs(conn, tenant, min(SEED_CHUNK, count - done),
                                       events=events, ended_days_ago=40)
                seeded.extend((tenant, run) for run in ids)
        await conn.execute(
            """
            INSERT INTO run_event_payloads (tenant_id, run_id, seq, data)
            SELECT e.tenant_id, e.run_id, 2, jsonb_build_object('text', repeat('x', 9000))
            FROM run_events e WHERE e.seq = 2 AND abs(hashtext(e.run_id::text)) % $1 = 0
            """, PAYLOAD_EVERY)
        await conn.execute("VACUUM (ANALYZE) runs, run_events, run_event_payloads")
        await conn.execute("CHECKPOINT")
        sizes = await _sizes(conn)
    finally:
        await conn.close()
    console.log(f"{name}: seeded {len(seeded)} runs ({len(seeded) * events} events) in "
                f"{time.perf_counter() - started:.1f} s; {sizes}")
    random.Random(name).shuffle(seeded)
    return Layout(name, made.dsn, db, tenants, seeded, sizes)


async def _sizes(conn: asyncpg.Connection) -> dict[str, Any]:
    rows = await conn.fetch(
        """
        SELECT e.part, e.n, pg_relation_size(i.indexrelid) AS index_bytes
        FROM (SELECT tableoid AS part, count(*) AS n FROM run_events GROUP BY 1) e
        JOIN pg_index i ON i.indrelid = e.part AND i.indisprimary
        """)
    total = sum(r["n"] for r in rows)
    largest = max(rows, key=lambda r: r["n"])
    mib = 1024 * 1024
    return {"partitions_used": len(rows),
            "index_mib_whole": round(sum(r["index_bytes"] for r in rows) / mib, 2),
            "index_mib_largest": round(largest["index_bytes"] / mib, 2),
            "largest_share": round(largest["n"] / total, 3)}


async def _appends(layout: Layout, per_writer: int) -> float:
    conn = await asyncpg.connect(layout.dsn)
    try:  # fresh runs to write to, each writer its own (as one worker's lease gives)
        targets = []
        for i in range(WRITERS):
            tenant = layout.tenants[i % 4]  # the whale and three others
            [run] = await ended_runs(conn, tenant, 1, events=1, ended_days_ago=0)
            targets.append((tenant, run))
    finally:
        await conn.close()

    async def writer(tenant: Seeded, run: RunId) -> None:
        for n in range(per_writer):
            async with layout.db.tenant_tx(tenant.tenant) as tx:
                await log.append(tx, tenant.tenant, run, _reply(n), epoch=None)

    started = time.perf_counter()
    await asyncio.gather(*(writer(t, r) for t, r in targets))
    return WRITERS * per_writer / (time.perf_counter() - started)


async def _serial_appends(layout: Layout) -> list[float]:
    """One writer, one append at a time: a single append's own cost, no queueing."""
    conn = await asyncpg.connect(layout.dsn)
    try:
        [run] = await ended_runs(conn, layout.tenants[1], 1, events=1, ended_days_ago=0)
    finally:
        await conn.close()
    took = []
    for n in range(SERIAL_APPENDS):
        started = time.perf_counter()
        async with layout.db.tenant_tx(layout.tenants[1].tenant) as tx:
            await log.append(tx, layout.tenants[1].tenant, run, _reply(n), epoch=None)
        took.append((time.perf_counter() - started) * 1000)
    return sorted(took)


async def _reads(layout: Layout, events: int) -> list[float]:
    took = []
    for tenant, run in random.Random(len(layout.rounds)).sample(
            layout.runs, min(READS, len(layout.runs))):
        started = time.perf_counter()
        got = await log.read_now(layout.db, tenant.tenant, run, limit=events)
        took.append((time.perf_counter() - started) * 1000)
        if len(got) != events:
            raise RuntimeError(f"{layout.name}: read {len(got)} events of {run}, not {events}")
    return sorted(took)


async def _deletes(layout: Layout) -> tuple[list[float], RunId]:
    cleaner = Cleaner(layout.db, None)
    took = []
    doomed = [layout.runs.pop() for _ in range(DELETES)]
    for tenant, run in doomed:
        started = time.perf_counter()
        if not await cleaner.delete_run(tenant.tenant, run):
            raise RuntimeError(f"{layout.name}: retention did not delete {run}")
        took.append((time.perf_counter() - started) * 1000)
    return sorted(took), doomed[-1][1]


async def _vacuums(layout: Layout, run: RunId) -> tuple[float, float]:
    """After a round's deletions: VACUUM of all of run_events (the same dead rows on every
    layout), then a full scan with freezing (what an anti-wraparound visit does) of the one
    table that held ``run``: a partition, or the whole unpartitioned log."""
    conn = await asyncpg.connect(layout.dsn)
    try:
        part = await _table_of(conn, run)
        started = time.perf_counter()
        await conn.execute("VACUUM run_events")
        everything = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        await conn.execute(f'VACUUM (FREEZE, DISABLE_PAGE_SKIPPING) "{part}"')
        one = (time.perf_counter() - started) * 1000
    finally:
        await conn.close()
    return everything, one


async def _table_of(conn: asyncpg.Connection, run: RunId) -> str:
    """The table that held ``run``'s events: run_events itself when unpartitioned, else the
    partition Postgres routes the run's rows to (asked by routing a probe row there, in a
    transaction rolled back, so it works for any partition key)."""
    relkind = await conn.fetchval(
        "SELECT relkind::text FROM pg_class WHERE relname = 'run_events'")
    if relkind != "p":
        return "run_events"
    tenant = await conn.fetchval("SELECT tenant_id FROM tombstones WHERE run_id = $1",
                                 run.uuid)
    tx = conn.transaction()
    await tx.start()
    try:
        # The superuser's probe: no foreign-key check, no trigger, nothing kept.
        await conn.execute("SET LOCAL session_replication_role = replica")
        part: str = await conn.fetchval(
            "INSERT INTO run_events (tenant_id, run_id, seq, type, data) "
            "VALUES ($1, $2, 1, 'probe', '{}') RETURNING tableoid::regclass::text",
            tenant, run.uuid)
    finally:
        await tx.rollback()
    return part


def _median(values: list[float], digits: int = 2) -> float:
    return round(statistics.median(values), digits)


async def _benchmark(bench: Bench) -> dict[str, Any]:
    runs = int(env_positive("EVENT_LOG_RUNS", 10000))
    events = int(env_positive("EVENT_LOG_EVENTS", 25))
    rounds = int(env_positive("EVENT_LOG_ROUNDS", 5))
    per_writer = int(env_positive("EVENT_LOG_APPENDS", 100))
    # 0032's database first: Bench.database() starts the server the others go on.
    order = ["hash_run_32", *(name for name in LAYOUTS if name != "hash_run_32")]
    made = {name: await _make(bench, name, events, runs) for name in order}
    layouts = [made[name] for name in LAYOUTS]
    try:
        for number in range(rounds):
            for layout in layouts:
                append = await _appends(layout, per_writer)
                serial = await _serial_appends(layout)
                reads = await _reads(layout, events)
                deletes, last = await _deletes(layout)
                everything, one = await _vacuums(layout, last)
                figures = {"append_per_s": append,
                           "append_p50_ms": percentile(serial, 0.5),
                           "append_p99_ms": percentile(serial, 0.99),
                           "read_p50_ms": percentile(reads, 0.5),
                           "read_p99_ms": percentile(reads, 0.99),
                           "delete_run_p50_ms": percentile(deletes, 0.5),
                           "delete_run_p99_ms": percentile(deletes, 0.99),
                           "vacuum_after_deletes_ms": everything,
                           "freeze_scan_one_table_ms": one}
                layout.rounds.append(figures)
                console.log(f"round {number + 1}/{rounds} {layout.name}: "
                            + ", ".join(f"{k} {v:.1f}" for k, v in figures.items()))
        result: dict[str, Any] = {"layouts": {}}
        for layout in layouts:
            keys = layout.rounds[0].keys()
            medians = {k: _median([r[k] for r in layout.rounds], 1 if k == "append_per_s"
                                  else 2) for k in keys}
            result["layouts"][layout.name] = {**medians, **layout.sizes}
        # The upgrade itself, on the seeded unpartitioned database (what it then holds).
        plain = layouts[0]
        conn = await asyncpg.connect(plain.dsn)
        try:
            held = await conn.fetchval("SELECT count(*) FROM run_events")
            started = time.perf_counter()
            applied = await migrate(conn)
            upgrade_s = time.perf_counter() - started
            if applied.migrations[0].version != partitioning().version:
                raise RuntimeError(f"expected the partitioning first, applied {applied}")
        finally:
            await conn.close()
        console.log(f"upgrade of {held} events: {upgrade_s:.2f} s")
    finally:
        for layout in layouts:
            await layout.db.close()
    seeded = sum(len(layout.runs) for layout in layouts[:1]) + DELETES * rounds
    return {**result, "runs": seeded, "events": seeded * events, "rounds": rounds,
            "appends_per_round": WRITERS * per_writer, "reads_per_round": READS,
            "deletes_per_round": DELETES, "upgrade_events": held,
            "upgrade_s": round(upgrade_s, 2),
            "upgrade_events_per_s": round(held / upgrade_s, 1), "source": source_state()}


if __name__ == "__main__":
    sys.exit(main("event_log", _benchmark))
