"""Blobs leave through the outbox: after the pass and its drain a deleted run's blob
files are gone and the outbox is empty, while a live run's blobs stay; a delete the store
refuses stays queued with its error and goes at a later drain; with blobs_follow_runs off
nothing is queued and the files stay."""

from __future__ import annotations

from pathlib import Path

import asyncpg

from tenantry.blobs import DirectoryBlobStore
from tenantry.db import Database
from tenantry.retention import policy as policies
from tenantry.retention.cleaner import Cleaner, CleanupSettings
from tenantry.retention.policy import RetentionPolicy
from tests.support import run_states as states
from tests.support.blob_stores import FailingDeletes
from tests.support.retention import ended_runs, tenant_and_agent


def _files(store: DirectoryBlobStore, tenant: str) -> set[str]:
    return {p.name for p in (store.root / tenant).iterdir()}


async def test_a_deleted_runs_blobs_go_and_a_live_runs_stay(
    db: Database, admin_conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    store = DirectoryBlobStore(tmp_path)
    seeded = await tenant_and_agent(db, "acme")
    tenant = seeded.tenant.value
    dead_refs = [await store.put(seeded.tenant, f"old-{i}", b"o" * 9000) for i in range(3)]
    recent_ref = await store.put(seeded.tenant, "recent", b"r" * 9000)
    live_ref = await store.put(seeded.tenant, "live", b"l" * 9000)
    await ended_runs(admin_conn, seeded, 3, blob_refs=dead_refs)
    [recent] = await ended_runs(admin_conn, seeded, 1, ended_days_ago=3, blob_refs=[recent_ref])
    held = await states.running(db, seeded)
    await states.with_tool_output_blob(db, seeded, held, live_ref)
    await states.age(admin_conn, [held.run], days=400)

    [result] = await Cleaner(db, store, CleanupSettings(batch=2)).run_once([seeded.tenant])

    assert (result.runs, result.blobs_queued) == (3, 3)
    assert _files(store, tenant) == {recent_ref, live_ref}
    assert await admin_conn.fetchval("SELECT count(*) FROM blob_deletions") == 0
    for run in (recent, held.run):
        assert (await states.footprint(admin_conn, run))["run"] is not None


async def test_a_refused_blob_delete_stays_queued_and_a_later_drain_retries_it(
    db: Database, admin_conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    store = FailingDeletes(tmp_path)
    seeded = await tenant_and_agent(db, "acme")
    tenant = seeded.tenant.value
    ref = await store.put(seeded.tenant, "old", b"o" * 9000)
    [run] = await ended_runs(admin_conn, seeded, 1, blob_refs=[ref])
    # Retried at once (the default waits a minute before a claimed deletion is due again).
    cleaner = Cleaner(db, store, CleanupSettings(blob_retry_seconds=0))

    [result] = await cleaner.run_once([seeded.tenant])

    assert (result.runs, result.blobs_queued, store.attempts) == (1, 1, 1)
    assert (await states.footprint(admin_conn, run))["tombstones"] == 1
    row = await admin_conn.fetchrow("SELECT ref, run_id, attempts, last_error "
                                    "FROM blob_deletions WHERE tenant_id = $1", tenant)
    assert (row["ref"], row["run_id"], row["attempts"]) == (ref, run.uuid, 1)
    assert "OSError" in row["last_error"] and "refuses deletes" in row["last_error"]
    assert _files(store, tenant) == {ref}
    assert await cleaner.drain_blobs() == 0  # still refused: kept, counted again
    assert await admin_conn.fetchval("SELECT attempts FROM blob_deletions") == 2

    store.failing = False
    assert await cleaner.drain_blobs() == 1
    assert _files(store, tenant) == set()
    assert await admin_conn.fetchval("SELECT count(*) FROM blob_deletions") == 0
    assert await cleaner.drain_blobs() == 0  # idempotent: nothing left to do


async def test_with_blobs_not_following_runs_nothing_is_queued(
    db: Database, admin_conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    store = DirectoryBlobStore(tmp_path)
    seeded = await tenant_and_agent(db, "acme")
    tenant = seeded.tenant.value
    async with db.tenant_tx(seeded.tenant) as conn:
        await policies.write(conn, seeded.tenant, RetentionPolicy(blobs_follow_runs=False))
    refs = [await store.put(seeded.tenant, f"old-{i}", b"o" * 9000) for i in range(2)]
    runs = await ended_runs(admin_conn, seeded, 2, blob_refs=refs)

    [result] = await Cleaner(db, store).run_once([seeded.tenant])

    assert (result.runs, result.blobs_queued) == (2, 0)
    assert all([(await states.footprint(admin_conn, r))["tombstones"] == 1 for r in runs])
    assert await admin_conn.fetchval("SELECT count(*) FROM blob_deletions") == 0
    assert _files(store, tenant) == set(refs)
