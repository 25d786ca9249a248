"""Blobs leave through the outbox: after the pass and its drain a deleted run's blobs are
gone from the object store and the registry, its tenant's counted bytes fall by theirs and
the outbox is empty, while a live or recent run's blobs stay; a blob from before the
registry, named only by its run's events (one of them an event over 8 KiB, spilled to
run_event_payloads: issue 40), goes too; a delete the store refuses stays queued with its
error and goes at a later drain; with blobs_follow_runs off nothing is queued and the blobs
stay."""

from __future__ import annotations

import json
from pathlib import Path

import asyncpg

from tenantry.blobs import BlobKind, Blobs
from tenantry.db import Database
from tenantry.ids import RunId
from tenantry.retention import policy as policies
from tenantry.retention.cleaner import Cleaner, CleanupSettings
from tenantry.retention.policy import RetentionPolicy
from tests.support import run_states as states
from tests.support.blob_stores import FailingDeletes, put, stored
from tests.support.object_store_fixtures import StoreUnderTest
from tests.support.retention import ended_runs, named_by_event, tenant_and_agent


async def _registry(admin_conn: asyncpg.Connection, runs: list[RunId]) -> set[str]:
    """The refs the registry holds for ``runs``, read as the superuser."""
    return {r["ref"] for r in await admin_conn.fetch(
        "SELECT ref FROM blobs WHERE run_id = ANY($1)", [r.uuid for r in runs])}


async def test_a_deleted_runs_blobs_go_and_a_live_runs_stay(
    db: Database, admin_conn: asyncpg.Connection, blob_store: StoreUnderTest,
) -> None:
    blobs = Blobs(db, blob_store.objects)
    seeded = await tenant_and_agent(db, "acme")
    dead = await ended_runs(admin_conn, seeded, 3)
    dead_refs = [await put(blobs, seeded.tenant, run, f"old-{i}", b"o" * 9000)
                 for i, run in enumerate(dead)]
    [recent] = await ended_runs(admin_conn, seeded, 1, ended_days_ago=3)
    recent_ref = await put(blobs, seeded.tenant, recent, "recent", b"r" * 9000)
    held = await states.running(db, seeded)
    live_ref = await put(blobs, seeded.tenant, held.run, "live", b"l" * 9000)
    await states.with_tool_output_blob(db, seeded, held, live_ref)
    await states.age(admin_conn, [held.run], days=400)
    assert await stored(blobs.objects, seeded.tenant) == {*dead_refs, recent_ref, live_ref}

    [result] = await Cleaner(db, blobs, CleanupSettings(batch=2)).run_once([seeded.tenant])

    assert (result.runs, result.blobs_queued) == (3, 3)
    assert await stored(blobs.objects, seeded.tenant) == {recent_ref, live_ref}
    assert await _registry(admin_conn, [*dead, recent, held.run]) == {recent_ref, live_ref}
    assert await admin_conn.fetchval("SELECT count(*) FROM blob_deletions") == 0
    for run in (recent, held.run):
        assert (await states.footprint(admin_conn, run))["run"] is not None


async def test_a_pass_gives_the_deleted_runs_bytes_back(
    db: Database, admin_conn: asyncpg.Connection, blob_store: StoreUnderTest,
) -> None:
    blobs = Blobs(db, blob_store.objects)
    seeded = await tenant_and_agent(db, "acme")
    one, two = await ended_runs(admin_conn, seeded, 2)
    [recent] = await ended_runs(admin_conn, seeded, 1, ended_days_ago=3)
    output = await put(blobs, seeded.tenant, one, "out-1", b"a" * 9000)
    shot = await put(blobs, seeded.tenant, one, f"screenshot-{one}", b"s" * 1234,
                     kind=BlobKind.SCREENSHOT)
    saved = await put(blobs, seeded.tenant, two, f"sandbox-{two}", b"t" * 5000,
                      kind=BlobKind.SANDBOX_FILES)
    kept = await put(blobs, seeded.tenant, recent, "out-recent", b"k" * 7000)
    # A blob of today is also named by its run's event (as the gateway writes it): one
    # deletion, not two.
    await named_by_event(db, seeded.tenant, one, output)
    before = await blobs.usage(seeded.tenant)
    assert before == 9000 + 1234 + 5000 + 7000
    assert {r.ref for r in await blobs.of_run(seeded.tenant, one)} == {output, shot}
    assert [r.ref for r in await blobs.of_run(seeded.tenant, two)] == [saved]

    [result] = await Cleaner(db, blobs).run_once([seeded.tenant])

    assert (result.runs, result.blobs_queued) == (2, 3)
    assert await blobs.usage(seeded.tenant) == before - (9000 + 1234 + 5000) == 7000
    assert await blobs.of_run(seeded.tenant, one) == []
    assert await blobs.of_run(seeded.tenant, two) == []
    assert await _registry(admin_conn, [one, two, recent]) == {kept}
    assert await stored(blobs.objects, seeded.tenant) == {kept}
    assert await admin_conn.fetchval("SELECT count(*) FROM blob_deletions") == 0


async def test_blobs_from_before_the_registry_go_by_their_events_even_spilled_ones(
    db: Database, admin_conn: asyncpg.Connection, blob_store: StoreUnderTest,
) -> None:
    # Issue 40: a deleted run's 9,000-byte output stayed, its ToolCompleted (over 8 KiB)
    # being in run_event_payloads, where the deletion never looked.
    objects = blob_store.objects
    blobs = Blobs(db, objects)
    seeded = await tenant_and_agent(db, "acme")
    tenant = seeded.tenant.value
    inline, spilled, shot, recent_ref = ("out-inline.0123456789abcdef",
                                         "out-spilled.0123456789abcdef",
                                         "screenshot-old.0123456789abcdef",
                                         "out-recent.0123456789abcdef")
    for ref in (inline, spilled, shot, recent_ref):  # written straight, no registry row
        await objects.put(f"{tenant}/{ref}", b"o" * 9000)
    [named] = await ended_runs(admin_conn, seeded, 1, blob_refs=[inline])
    [big] = await ended_runs(admin_conn, seeded, 1)
    seq = await named_by_event(db, seeded.tenant, big, spilled, result_chars=9000,
                               blob_refs=[shot])
    [recent] = await ended_runs(admin_conn, seeded, 1, ended_days_ago=3,
                                blob_refs=[recent_ref])
    # The big event's fields are where issue 40 found them: beside the log row, not in it.
    row = await admin_conn.fetchval(
        "SELECT data FROM run_events WHERE run_id = $1 AND seq = $2", big.uuid, seq)
    assert set(json.loads(row)) == {"$payload"}
    payload = json.loads(await admin_conn.fetchval(
        "SELECT data FROM run_event_payloads WHERE run_id = $1 AND seq = $2", big.uuid, seq))
    assert (payload["output_ref"], payload["blob_refs"]) == (spilled, [shot])
    assert await _registry(admin_conn, [named, big, recent]) == set()

    [result] = await Cleaner(db, blobs).run_once([seeded.tenant])

    assert (result.runs, result.blobs_queued) == (2, 3)
    assert await stored(objects, tenant) == {recent_ref}
    assert await admin_conn.fetchval("SELECT count(*) FROM blob_deletions") == 0
    assert await blobs.usage(seeded.tenant) == 0  # never counted: nothing to give back
    assert (await states.footprint(admin_conn, recent))["run"] is not None


async def test_a_refused_blob_delete_stays_queued_and_a_later_drain_retries_it(
    db: Database, admin_conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    objects = FailingDeletes(tmp_path)
    blobs = Blobs(db, objects)
    seeded = await tenant_and_agent(db, "acme")
    tenant = seeded.tenant.value
    [run] = await ended_runs(admin_conn, seeded, 1)
    ref = await put(blobs, seeded.tenant, run, "old", b"o" * 9000)
    # Retried at once (the default waits a minute before a claimed deletion is due again).
    cleaner = Cleaner(db, blobs, CleanupSettings(blob_retry_seconds=0))

    [result] = await cleaner.run_once([seeded.tenant])

    assert (result.runs, result.blobs_queued, objects.attempts) == (1, 1, 1)
    assert (await states.footprint(admin_conn, run))["tombstones"] == 1
    row = await admin_conn.fetchrow("SELECT ref, run_id, attempts, last_error "
                                    "FROM blob_deletions WHERE tenant_id = $1", tenant)
    assert (row["ref"], row["run_id"], row["attempts"]) == (ref, run.uuid, 1)
    assert "BlobStoreUnavailable" in row["last_error"]
    assert "refuses deletes" in row["last_error"]
    assert await stored(objects, tenant) == {ref}
    # The object is still there: so is its row, and its bytes are still counted.
    assert await _registry(admin_conn, [run]) == {ref}
    assert await blobs.usage(seeded.tenant) == 9000
    assert await cleaner.drain_blobs() == 0  # still refused: kept, counted again
    assert await admin_conn.fetchval("SELECT attempts FROM blob_deletions") == 2
    # Each refusal is a failure /metrics counts (tenantry_blob_store_errors_total).
    assert blobs.failures == {"delete": 2}

    objects.failing = False
    assert await cleaner.drain_blobs() == 1
    assert await stored(objects, tenant) == set()
    assert await _registry(admin_conn, [run]) == set()
    assert await blobs.usage(seeded.tenant) == 0
    assert await admin_conn.fetchval("SELECT count(*) FROM blob_deletions") == 0
    assert await cleaner.drain_blobs() == 0  # idempotent: nothing left to do


async def test_with_blobs_not_following_runs_nothing_is_queued(
    db: Database, admin_conn: asyncpg.Connection, blob_store: StoreUnderTest,
) -> None:
    blobs = Blobs(db, blob_store.objects)
    seeded = await tenant_and_agent(db, "acme")
    async with db.tenant_tx(seeded.tenant) as conn:
        await policies.write(conn, seeded.tenant, RetentionPolicy(blobs_follow_runs=False))
    runs = await ended_runs(admin_conn, seeded, 2)
    refs = [await put(blobs, seeded.tenant, run, f"old-{i}", b"o" * 9000)
            for i, run in enumerate(runs)]

    [result] = await Cleaner(db, blobs).run_once([seeded.tenant])

    assert (result.runs, result.blobs_queued) == (2, 0)
    assert all([(await states.footprint(admin_conn, r))["tombstones"] == 1 for r in runs])
    assert await admin_conn.fetchval("SELECT count(*) FROM blob_deletions") == 0
    assert await stored(blobs.objects, seeded.tenant) == set(refs)
    # Kept, so still the tenant's: its rows and counted bytes stay with them.
    assert await _registry(admin_conn, runs) == set(refs)
    assert await blobs.usage(seeded.tenant) == 2 * 9000
