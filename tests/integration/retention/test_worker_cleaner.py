"""``tenantry worker`` (run_worker, as the command runs it) cleans on its own: runs past
their tenant's retention leave with a tombstone each, their blobs with them, and the
cleaner stops with the worker, leaving no task behind."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg

from tenantry.bootstrap.worker import run_worker
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.retention import policy as policies
from tenantry.retention.policy import RetentionPolicy
from tenantry.runs.inprocess import LocalWorkers
from tests.support.blob_stores import directory_blobs, put, stored
from tests.support.db import login_dsn
from tests.support.retention import ended_runs, tenant_and_agent
from tests.support.waiting import until

CLEANER = "retention-cleaner"


def _settings(data_dir: Path, **env: str) -> Settings:
    return Settings.from_env({"TENANTRY_DATA_DIR": str(data_dir),
                              "TENANTRY_SANDBOX_BACKEND": "none",
                              "TENANTRY_RETENTION_EVERY_SECONDS": "1", **env})


def _cleaners() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == CLEANER and not t.done()]


async def _serving(local: LocalWorkers, worker: asyncio.Task[None]) -> None:
    await until(lambda: _ready(local, worker), "the worker to serve", 30)


async def _ready(local: LocalWorkers, worker: asyncio.Task[None]) -> bool:
    if worker.done():
        worker.result()  # a worker that could not start says why
    return bool(local.engines)


async def test_a_worker_deletes_runs_past_retention_with_tombstones_and_blobs(
    db: Database, admin_conn: asyncpg.Connection, database_dsn: str, tmp_path: Path,
) -> None:
    # Default policy (30 days): 40-day-old runs go, 5-day-old ones stay. Policy 0: every
    # run that has ended goes at the next pass.
    kept = await tenant_and_agent(db, "keeps 30 days")
    zero = await tenant_and_agent(db, "keeps nothing")
    async with db.tenant_tx(zero.tenant) as conn:
        await policies.write(conn, zero.tenant, RetentionPolicy(runs_days=0))
    settings = _settings(tmp_path)
    # The store the worker opens: <data dir>/blobs, with the registry in the same database.
    blobs = directory_blobs(db, settings.data_dir / "blobs")
    old = await ended_runs(admin_conn, kept, 5, ended_days_ago=40)
    ref = await put(blobs, kept.tenant, old[0], "tool-output", b"x" * 10_000)
    assert await stored(blobs.objects, kept.tenant) == {ref}
    recent = await ended_runs(admin_conn, kept, 2, ended_days_ago=5)
    today = await ended_runs(admin_conn, zero, 3, ended_days_ago=0, status="failed")
    gone = [r.uuid for r in old + today]

    async def cleaned() -> bool:
        left = await admin_conn.fetchval(
            "SELECT count(*) FROM runs WHERE run_id = ANY($1)", gone)
        outbox = await admin_conn.fetchval("SELECT count(*) FROM blob_deletions")
        return left == 0 and outbox == 0

    stop, local = asyncio.Event(), LocalWorkers()
    worker = asyncio.create_task(run_worker(settings, login_dsn(database_dsn), stop, local))
    try:
        await _serving(local, worker)
        assert len(_cleaners()) == 1
        await until(cleaned, "the worker's cleaner to delete the aged runs", 30)
    finally:
        stop.set()
        await worker  # returns: no traceback on the way out
    assert _cleaners() == []

    stones = {r["run_id"]: (r["status"], r["events"], r["reason"]) for r in await admin_conn.fetch(
        "SELECT run_id, status, events, reason FROM tombstones")}
    assert stones == {**{r.uuid: ("finished", 10, "retention") for r in old},
                      **{r.uuid: ("failed", 10, "retention") for r in today}}
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM run_events WHERE run_id = ANY($1)", gone) == 0
    left = {r["run_id"] for r in await admin_conn.fetch("SELECT run_id FROM runs")}
    assert left == {r.uuid for r in recent}
    # The blob went through the outbox, from the engine's own blob store, and its bytes
    # with it.
    assert await stored(blobs.objects, kept.tenant) == set()
    assert await admin_conn.fetchval("SELECT count(*) FROM blobs") == 0
    assert await blobs.usage(kept.tenant) == 0


async def test_retention_off_runs_no_cleaner_in_the_worker(
    db: Database, admin_conn: asyncpg.Connection, database_dsn: str, tmp_path: Path,
) -> None:
    seeded = await tenant_and_agent(db, "acme")
    await ended_runs(admin_conn, seeded, 2, ended_days_ago=40)
    stop, local = asyncio.Event(), LocalWorkers()
    settings = _settings(tmp_path, TENANTRY_RETENTION="off")
    worker = asyncio.create_task(run_worker(settings, login_dsn(database_dsn), stop, local))
    try:
        await _serving(local, worker)
        assert _cleaners() == []
    finally:
        stop.set()
        await worker
    assert await admin_conn.fetchval("SELECT count(*) FROM runs") == 2
    assert await admin_conn.fetchval("SELECT count(*) FROM cleanup_leases") == 0


async def test_a_stopping_worker_ends_its_pass_between_batches(
    db: Database, admin_conn: asyncpg.Connection, database_dsn: str, tmp_path: Path,
) -> None:
    # Stopped while its cleaner works through a backlog in batches of 50: the worker
    # returns, and every run is either untouched or gone with its tombstone.
    seeded = await tenant_and_agent(db, "acme")
    await ended_runs(admin_conn, seeded, 2000, ended_days_ago=40)
    stop, local = asyncio.Event(), LocalWorkers()
    settings = _settings(tmp_path, TENANTRY_RETENTION_BATCH="50")
    worker = asyncio.create_task(run_worker(settings, login_dsn(database_dsn), stop, local))

    async def started() -> bool:
        return bool(await admin_conn.fetchval("SELECT count(*) FROM tombstones"))

    try:
        await _serving(local, worker)
        await until(started, "the cleaner's first batch", 30)
    finally:
        stop.set()
        await worker
    assert _cleaners() == []
    runs, stones, events = await admin_conn.fetchrow(
        "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM tombstones),"
        " (SELECT count(*) FROM run_events)")
    assert runs + stones == 2000 and events == 10 * runs
    assert stones % 50 == 0  # whole batches only
    # The lease was handed back: the next cleaner need not wait for it to expire.
    assert await admin_conn.fetchval("SELECT owner FROM cleanup_leases") is None
