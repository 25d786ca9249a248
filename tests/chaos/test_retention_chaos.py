"""Cleaners killed at random during passes over 5,000 terminal runs, while new runs start
and end: every candidate ends deleted with exactly one tombstone, no live or recent run is
touched, no blob is orphaned (every deleted run's blob gone from the object store and the
registry after the last drain, the outbox empty, the kept runs' blobs still there and still
counted). And at the production lease (30 s): a killed cleaner's tenant is not taken over
before its lease expires, and the pass completes after it."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
from pathlib import Path

import asyncpg
import pytest

from tenantry.blobs import Blobs
from tenantry.db import Database
from tenantry.ids import RunId
from tenantry.retention.cleaner import Cleaner, CleanupSettings
from tests.support import run_states as states
from tests.support.blob_stores import directory_blobs, put, stored
from tests.support.retention import Seeded, ended_runs, tenant_and_agent
from tests.support.retention_process import CleanerProcess, cleaner_process
from tests.support.waiting import until

pytestmark = pytest.mark.chaos

#: 5,000 terminal runs and tasks past retention.
CANDIDATES = {"finished": 4000, "failed": 500, "cancelled": 300, "dead_lettered": 200}
WITH_BLOBS = 300  # of the finished ones, a blob each
BLOB_BYTES = 2000
KILLS = 6


async def _seed_candidates(admin_conn: asyncpg.Connection, seeded: Seeded,
                           blobs: Blobs) -> tuple[list[RunId], list[str]]:
    ids: list[RunId] = []
    refs: list[str] = []
    for status, count in CANDIDATES.items():
        runs = await ended_runs(admin_conn, seeded, count, status=status)
        if status == "finished":
            refs += [await put(blobs, seeded.tenant, run, f"old-{i}", b"o" * BLOB_BYTES)
                     for i, run in enumerate(runs[:WITH_BLOBS])]
        ids += runs
    return ids, refs


class Feeder:
    """New runs meanwhile: recent ended ones (some with blobs) and live queued ones."""

    def __init__(self, db: Database, conn: asyncpg.Connection, seeded: Seeded,
                 blobs: Blobs) -> None:
        self.db, self.conn, self.seeded, self.blobs = db, conn, seeded, blobs
        self.recent: list[RunId] = []
        self.live: list[RunId] = []
        self.refs: list[str] = []

    async def run(self, stop: asyncio.Event) -> None:
        n = 0
        while not stop.is_set():
            recent = await ended_runs(self.conn, self.seeded, 10, ended_days_ago=1)
            self.refs.append(await put(self.blobs, self.seeded.tenant, recent[0], f"new-{n}",
                                       b"n" * BLOB_BYTES))
            self.recent += recent
            self.live.append(await states.queued(self.db, self.seeded))
            n += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)


async def _drain(cleaner: CleanerProcess, seen: asyncio.Queue[str] | None = None) -> None:
    while text := await cleaner.line():  # keep its pipe flowing
        if seen is not None:
            seen.put_nowait(text)


async def _kill_both_mid_pass(pair: list[CleanerProcess], rng: random.Random) -> None:
    """Two cleaners race for the tenant; once one of them is seen deleting, both get
    SIGKILL 0.05-0.6 s later (wherever they are: in a batch, between batches, waiting for
    the lease, draining blobs)."""
    seen: asyncio.Queue[str] = asyncio.Queue()
    readers = [asyncio.create_task(_drain(c, seen)) for c in pair]
    try:
        while True:
            text = await asyncio.wait_for(seen.get(), 30)
            if text.startswith("batch ") and int(text.split()[1]) > 0:
                break
        await asyncio.sleep(rng.uniform(0.05, 0.6))
        for c in pair:
            with contextlib.suppress(ProcessLookupError):
                c.process.send_signal(signal.SIGKILL)
            await c.process.wait()
    finally:
        for r in readers:
            r.cancel()


async def _live_rows(admin_conn: asyncpg.Connection, runs: list[RunId]) -> list[object]:
    return [dict(r) for r in await admin_conn.fetch(
        "SELECT r.*, (SELECT count(*) FROM run_events e WHERE e.tenant_id = r.tenant_id "
        "AND e.run_id = r.run_id) AS n_events FROM runs r WHERE r.run_id = ANY($1) "
        "ORDER BY r.run_id", [r.uuid for r in runs])]


async def test_killed_cleaners_leave_every_candidate_deleted_exactly_once(
    db: Database, admin_conn: asyncpg.Connection, database_dsn: str, tmp_path: Path,
) -> None:
    rng = random.Random()
    blobs = directory_blobs(db, tmp_path / "blobs")
    seeded = await tenant_and_agent(db, "acme")
    tenant = seeded.tenant.value
    candidates, old_refs = await _seed_candidates(admin_conn, seeded, blobs)
    assert len(old_refs) == WITH_BLOBS
    feeder_conn = await asyncpg.connect(database_dsn)
    feeder = Feeder(db, feeder_conn, seeded, blobs)
    stop = asyncio.Event()
    feeding = asyncio.create_task(feeder.run(stop))
    # A blob deletion a killed cleaner had claimed comes back after --blob-retry.
    options = ("--lease", "1", "--batch", "25", "--passes", "0", "--blob-retry", "1",
               "--blobs", str(tmp_path / "blobs"))
    kills = mid_pass = 0
    try:
        while kills < KILLS:
            async with cleaner_process(database_dsn, tenant, *options) as one, \
                    cleaner_process(database_dsn, tenant, *options) as two:
                await _kill_both_mid_pass([one, two], rng)
            kills += 1
            if not await admin_conn.fetchval(
                    "SELECT count(*) FROM runs WHERE run_id = ANY($1)",
                    [r.uuid for r in candidates]):
                break
            mid_pass += 1  # killed with candidates left: the next round goes on from there
        stop.set()
        await feeding
        live_before = await _live_rows(admin_conn, feeder.live + feeder.recent)
        # The last cleaner, left alone: it waits out the dead ones' leases and finishes.
        async with cleaner_process(database_dsn, tenant, *options) as last:
            reader = asyncio.create_task(_drain(last))

            async def all_gone() -> bool:
                return not await admin_conn.fetchval(
                    "SELECT count(*) FROM runs WHERE run_id = ANY($1)",
                    [r.uuid for r in candidates])

            await until(all_gone, "every candidate deleted", 60)
            last.process.send_signal(signal.SIGKILL)
            await last.process.wait()
            reader.cancel()
    finally:
        stop.set()
        await feeding
        await feeder_conn.close()
    # What the killed ones queued or claimed and did not do, once it is due again.
    drainer = Cleaner(db, blobs, CleanupSettings(blob_retry_seconds=1))

    async def outbox_empty() -> bool:
        await drainer.drain_blobs()
        return not await admin_conn.fetchval("SELECT count(*) FROM blob_deletions")

    await until(outbox_empty, "the blob outbox drained", 10)

    assert mid_pass >= 1, "no cleaner was killed mid-pass"
    ids = [r.uuid for r in candidates]
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM tombstones WHERE run_id = ANY($1)", ids) == len(candidates)
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM tombstones WHERE tenant_id = $1", tenant) == len(candidates)
    assert await admin_conn.fetchval(
        "SELECT deleted_total FROM cleanup_leases WHERE tenant_id = $1", tenant) \
        == len(candidates)  # counted in each batch's transaction: each run exactly once
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM run_events WHERE run_id = ANY($1)", ids) == 0
    assert await _live_rows(admin_conn, feeder.live + feeder.recent) == live_before
    assert len(live_before) == len(feeder.live) + len(feeder.recent) > 0
    # The live counts and the ended totals are those of the runs left: each deleted run
    # left them once (a batch rolled back by a kill undid its own uncounting too).
    counts = {r["status"]: r["n"] for r in await admin_conn.fetch(
        "SELECT status, count(*) AS n FROM runs WHERE tenant_id = $1 GROUP BY status", tenant)}
    load = await admin_conn.fetchrow(
        "SELECT queued, running, waiting FROM tenant_load WHERE tenant_id = $1", tenant)
    assert dict(load) == {s: counts.get(s, 0) for s in ("queued", "running", "waiting")}
    totals = {r["status"]: r["runs"] for r in await admin_conn.fetch(
        "SELECT status, runs FROM run_status_totals WHERE tenant_id = $1", tenant)}
    assert totals == {s: counts.get(s, 0) for s in totals} and totals["finished"] > 0
    files = await stored(blobs.objects, tenant)
    assert files == set(feeder.refs)
    assert not files & set(old_refs)
    # The registry agrees: the kept runs' blobs only, and only their bytes counted.
    assert {r["ref"] for r in await admin_conn.fetch(
        "SELECT ref FROM blobs WHERE tenant_id = $1", tenant)} == set(feeder.refs)
    assert await blobs.usage(seeded.tenant) == BLOB_BYTES * len(feeder.refs)


async def test_at_the_production_lease_a_killed_cleaners_tenant_waits_for_its_expiry(
    db: Database, admin_conn: asyncpg.Connection, database_dsn: str,
) -> None:
    seeded = await tenant_and_agent(db, "acme")
    tenant = seeded.tenant.value
    candidates = await ended_runs(admin_conn, seeded, 500)
    default = CleanupSettings()
    async with cleaner_process(database_dsn, tenant, "--lease", str(default.lease_seconds),
                               "--batch", "50", "--stop-after-batch", "1") as first:
        await first.stopped()  # one batch done; the pass is under way
        first.process.send_signal(signal.SIGKILL)
        await first.process.wait()
    lease = await admin_conn.fetchrow(
        "SELECT epoch, expires_at, expires_at - now() AS left FROM cleanup_leases "
        "WHERE tenant_id = $1", tenant)
    assert lease["left"].total_seconds() > default.lease_seconds - 10
    second = Cleaner(db, None, default)
    assert await second.run_once([seeded.tenant]) == []  # held by the dead one: left alone
    left = await admin_conn.fetchval(
        "SELECT count(*) FROM runs WHERE tenant_id = $1", tenant)
    assert left == len(candidates) - 50

    async def expired() -> bool:
        return bool(await admin_conn.fetchval("SELECT $1 < now()", lease["expires_at"]))

    await until(expired, "the dead cleaner's lease expires", default.lease_seconds + 5)
    [result] = await second.run_once([seeded.tenant])
    assert (result.runs, result.lease_lost) == (len(candidates) - 50, False)
    assert await admin_conn.fetchval(
        "SELECT epoch FROM cleanup_leases WHERE tenant_id = $1", tenant) == lease["epoch"] + 1
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM tombstones WHERE tenant_id = $1", tenant) == len(candidates)
