"""A stale cleaner writes nothing: one paused (SIGSTOP, in a process of its own) past its
lease while another cleaner takes the tenant over and finishes, then resumed (SIGCONT),
stops at its next write and says lease_lost — no tombstone, no deletion, no traceback.
In the same process: a lease expired under a cleaner stops it at its next batch, and a
batch that outlives its lease rolls back whole."""

from __future__ import annotations

import signal

import asyncpg
import pytest

from tenantry.db import Database
from tenantry.retention.cleaner import LEASE_LOST, Cleaner, CleanupSettings
from tests.support.retention import ended_runs, tenant_and_agent
from tests.support.retention_process import HookedCleaner, cleaner_process
from tests.support.waiting import until


async def _written(admin_conn: asyncpg.Connection, tenant: str) -> tuple[int, int, int]:
    return (await admin_conn.fetchval("SELECT count(*) FROM tombstones WHERE tenant_id = $1",
                                      tenant),
            await admin_conn.fetchval("SELECT count(*) FROM runs WHERE tenant_id = $1", tenant),
            await admin_conn.fetchval("SELECT count(*) FROM run_events WHERE tenant_id = $1",
                                      tenant))


@pytest.mark.parametrize("pause", ["--stop-after-batch", "--stop-before-batch"])
async def test_a_cleaner_paused_past_its_lease_writes_nothing_when_it_resumes(
    pause: str, db: Database, admin_conn: asyncpg.Connection, database_dsn: str,
) -> None:
    seeded = await tenant_and_agent(db, "acme")
    tenant = seeded.tenant.value
    await ended_runs(admin_conn, seeded, 6)
    # Paused right after its 2nd batch committed (its next write: renewing the lease), or
    # right before it sends its 2nd batch (its next write: the batch, fenced in SQL).
    async with cleaner_process(database_dsn, tenant, "--lease", "2", "--batch", "1",
                               pause, "2") as stale:
        await stale.stopped()
        epoch = await admin_conn.fetchval(
            "SELECT epoch FROM cleanup_leases WHERE tenant_id = $1", tenant)

        async def lease_expired() -> bool:
            return bool(await admin_conn.fetchval(
                "SELECT expires_at < now() FROM cleanup_leases WHERE tenant_id = $1", tenant))

        await until(lease_expired, "the stopped cleaner's lease expires", 10)
        [other] = await Cleaner(db, None, CleanupSettings(batch=2)).run_once([seeded.tenant])
        assert not other.lease_lost and other.runs == 6 - (2 if "after" in pause else 1)
        assert await admin_conn.fetchval(
            "SELECT epoch FROM cleanup_leases WHERE tenant_id = $1", tenant) == epoch + 1
        # More old runs arrive: whatever the stale cleaner would delete now is there.
        await ended_runs(admin_conn, seeded, 3)
        before = await _written(admin_conn, tenant)
        lease_before = await admin_conn.fetchrow(
            "SELECT * FROM cleanup_leases WHERE tenant_id = $1", tenant)

        stale.process.send_signal(signal.SIGCONT)
        code, stderr = await stale.rest()

    assert code == 0 and "Traceback" not in stderr, stderr
    [result] = stale.results()
    assert result["lease_lost"] is True
    assert await _written(admin_conn, tenant) == before == (6, 3, 30)
    assert await admin_conn.fetchrow(
        "SELECT * FROM cleanup_leases WHERE tenant_id = $1", tenant) == lease_before


async def test_a_lease_expired_under_a_cleaner_stops_it_at_its_next_batch(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    seeded = await tenant_and_agent(db, "acme")
    tenant = seeded.tenant.value
    await ended_runs(admin_conn, seeded, 5)

    async def expire_before_the_third(n: int) -> None:
        if n == 3:
            await admin_conn.execute("UPDATE cleanup_leases SET expires_at = now() - "
                                     "interval '1 second' WHERE tenant_id = $1", tenant)

    cleaner = HookedCleaner(db, None, CleanupSettings(batch=1),
                            before_batch=expire_before_the_third)
    [result] = await cleaner.run_once([seeded.tenant])

    assert result.lease_lost is True
    assert (result.runs, result.batches, cleaner.sent) == (2, 2, 3)
    assert await _written(admin_conn, tenant) == (2, 3, 30)
    # The batch's own fence, called as the cleaner calls it: refused, nothing written.
    epoch = await admin_conn.fetchval(
        "SELECT epoch FROM cleanup_leases WHERE tenant_id = $1", tenant)
    async with db.unscoped() as conn:
        with pytest.raises(asyncpg.PostgresError) as refused:
            await conn.fetchrow(
                "SELECT * FROM tenantry_retention_batch($1, $2, $3, now(), 10, 'retention')",
                tenant, cleaner.owner, epoch)
    assert refused.value.sqlstate == LEASE_LOST
    assert await _written(admin_conn, tenant) == (2, 3, 30)


async def test_a_batch_that_outlives_its_lease_rolls_back_whole(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    seeded = await tenant_and_agent(db, "acme")
    tenant = seeded.tenant.value
    runs = await ended_runs(admin_conn, seeded, 4)
    # The lease runs out while the batch deletes its last run row (the clock passing it,
    # as a long batch would): the fence at the batch's end refuses to commit.
    await admin_conn.execute(f"""
        CREATE FUNCTION test_lease_runs_out() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF OLD.run_id = '{runs[3].uuid}' THEN
                UPDATE cleanup_leases SET expires_at = clock_timestamp() - interval '1 s'
                WHERE tenant_id = OLD.tenant_id;
            END IF;
            RETURN OLD;
        END $$;
        CREATE TRIGGER test_lease_runs_out BEFORE DELETE ON runs
            FOR EACH ROW EXECUTE FUNCTION test_lease_runs_out();
    """)
    cleaner = Cleaner(db, None)
    [result] = await cleaner.run_once([seeded.tenant])

    assert result.lease_lost is True and result.runs == 0
    assert await _written(admin_conn, tenant) == (0, 4, 40)
    assert await admin_conn.fetchval("SELECT count(*) FROM blob_deletions") == 0
    await admin_conn.execute("DROP TRIGGER test_lease_runs_out ON runs")
    # (The trigger's expiry rolled back with the batch: the lease row still names this
    # cleaner, which may take it again at once; another would wait for it to expire.)
    assert await Cleaner(db, None).run_once([seeded.tenant]) == []
    [again] = await cleaner.run_once([seeded.tenant])
    assert (again.runs, again.lease_lost) == (4, False)
    assert await _written(admin_conn, tenant) == (4, 0, 0)
