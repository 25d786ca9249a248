"""A batch is one transaction: killed between its statements — by a failing trigger, or by
cancelling its backend while a lock holds it mid-way — nothing is half-deleted: the runs,
every event, payload row, approval and reservation are still there, with no tombstone and
no queued blob deletion, every blob still stored and in the registry. The next pass deletes
them all."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from tenantry.blobs import Blobs
from tenantry.db import Database
from tenantry.ids import RunId
from tenantry.retention.cleaner import Cleaner
from tests.support import run_states as states
from tests.support.blob_stores import directory_blobs, put, stored
from tests.support.retention import Seeded, ended_runs, tenant_and_agent
from tests.support.waiting import until


async def _old_runs_with_everything(db: Database, admin_conn: asyncpg.Connection,
                                    blobs: Blobs) -> tuple[Seeded, list[RunId]]:
    seeded = await tenant_and_agent(db, "acme")
    runs = await ended_runs(admin_conn, seeded, 4)
    for i, run in enumerate(runs):
        await put(blobs, seeded.tenant, run, f"out-{i}", b"x" * 100)
    await states.with_dependents(admin_conn, seeded, runs)
    return seeded, runs


async def _footprints(admin_conn: asyncpg.Connection,
                      runs: list[RunId]) -> dict[RunId, dict[str, object]]:
    return {run: await states.footprint(admin_conn, run) for run in runs}


async def _nothing_half_deleted(admin_conn: asyncpg.Connection, runs: list[RunId],
                                before: dict[RunId, dict[str, object]], blobs: Blobs,
                                seeded: Seeded) -> None:
    assert await _footprints(admin_conn, runs) == before
    assert len(await stored(blobs.objects, seeded.tenant)) == 4
    assert await admin_conn.fetchval("SELECT count(*) FROM blobs WHERE run_id = ANY($1)",
                                     [r.uuid for r in runs]) == 4
    assert await blobs.usage(seeded.tenant) == 400
    for f in before.values():
        assert f["run"] is not None and len(f["events"]) == 10  # type: ignore[arg-type]
        assert (f["payloads"], len(f["approvals"]), f["reservations"]) == (1, 1, 1)  # type: ignore[arg-type]
    assert await admin_conn.fetchval("SELECT count(*) FROM tombstones") == 0
    assert await admin_conn.fetchval("SELECT count(*) FROM blob_deletions") == 0


async def _next_pass_deletes_all(db: Database, admin_conn: asyncpg.Connection,
                                 cleaner: Cleaner, seeded: Seeded, runs: list[RunId],
                                 blobs: Blobs) -> None:
    [result] = await cleaner.run_once([seeded.tenant])
    assert (result.runs, result.events, result.blobs_queued) == (4, 40, 4)
    for run in runs:
        gone = await states.footprint(admin_conn, run)
        assert gone == {"run": None, "events": [], "payloads": 0, "approvals": [],
                        "reservations": 0, "tombstones": 1, "blob_deletions": 0}
    assert await stored(blobs.objects, seeded.tenant) == set()
    assert await admin_conn.fetchval("SELECT count(*) FROM blobs") == 0
    assert await blobs.usage(seeded.tenant) == 0


async def test_a_trigger_failing_at_the_batch_last_statement_leaves_everything(
    db: Database, admin_conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    blobs = directory_blobs(db, tmp_path)
    seeded, runs = await _old_runs_with_everything(db, admin_conn, blobs)
    before = await _footprints(admin_conn, runs)
    # The run rows go last: by then the tombstones, the outbox rows and every dependent
    # delete of the batch have been written — and must all roll back.
    await admin_conn.execute(f"""
        CREATE FUNCTION test_refuse_one_run() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF OLD.run_id = '{runs[2].uuid}' THEN
                RAISE EXCEPTION 'test: this run may not be deleted';
            END IF;
            RETURN OLD;
        END $$;
        CREATE TRIGGER test_refuse_one_run BEFORE DELETE ON runs
            FOR EACH ROW EXECUTE FUNCTION test_refuse_one_run();
    """)
    cleaner = Cleaner(db, blobs)

    with pytest.raises(asyncpg.RaiseError, match="may not be deleted"):
        await cleaner.run_once([seeded.tenant])

    await _nothing_half_deleted(admin_conn, runs, before, blobs, seeded)
    await admin_conn.execute("DROP TRIGGER test_refuse_one_run ON runs")
    await _next_pass_deletes_all(db, admin_conn, cleaner, seeded, runs, blobs)


async def test_a_batch_cancelled_while_a_lock_holds_it_mid_way_leaves_everything(
    db: Database, admin_conn: asyncpg.Connection, database_dsn: str, tmp_path: Path,
) -> None:
    blobs = directory_blobs(db, tmp_path)
    seeded, runs = await _old_runs_with_everything(db, admin_conn, blobs)
    before = await _footprints(admin_conn, runs)
    cleaner = Cleaner(db, blobs)
    # Another transaction holds one approval row: the batch has inserted its tombstones
    # and outbox rows and deleted payloads and events when its DELETE of approvals waits.
    locker = await asyncpg.connect(database_dsn)
    try:
        tx = locker.transaction()
        await tx.start()
        await locker.execute("SELECT 1 FROM approvals WHERE run_id = $1 FOR UPDATE",
                             runs[1].uuid)
        passing = asyncio.create_task(cleaner.run_once([seeded.tenant]))

        async def waiting_on_the_lock() -> bool:
            return bool(await admin_conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' "
                "AND query LIKE '%tenantry_retention_batch%'"))

        await until(waiting_on_the_lock, "the batch waits on the approval's row lock", 10)
        cancelled = await admin_conn.fetchval(
            "SELECT bool_and(pg_cancel_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock' "
            "AND query LIKE '%tenantry_retention_batch%'")
        assert cancelled
        with pytest.raises(asyncpg.QueryCanceledError):
            await passing
        await tx.rollback()
    finally:
        await locker.close()

    await _nothing_half_deleted(admin_conn, runs, before, blobs, seeded)
    await _next_pass_deletes_all(db, admin_conn, cleaner, seeded, runs, blobs)
