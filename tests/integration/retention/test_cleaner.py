"""The cleaner on real Postgres: what it deletes, what it leaves, what survives."""

from __future__ import annotations

import asyncpg

from tenantry.db import Database
from tenantry.retention import tombstones
from tenantry.retention.cleaner import Cleaner, CleanupSettings
from tests.support.retention import ended_runs, tenant_and_agent


async def test_runs_past_retention_leave_a_tombstone_and_their_usage_facts(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    seeded = await tenant_and_agent(db, "acme")
    old = await ended_runs(admin_conn, seeded, 7, ended_days_ago=40)
    recent = await ended_runs(admin_conn, seeded, 2, ended_days_ago=5)
    usage_before = await admin_conn.fetchval(
        "SELECT sum(cost_micros) FROM usage_facts WHERE tenant_id = $1", seeded.tenant.value)

    cleaner = Cleaner(db, None, settings=CleanupSettings(batch=3))
    [result] = await cleaner.run_once([seeded.tenant])

    assert (result.runs, result.events, result.batches) == (7, 70, 3)
    left = {r["run_id"] for r in await admin_conn.fetch(
        "SELECT run_id FROM runs WHERE tenant_id = $1", seeded.tenant.value)}
    assert left == {r.uuid for r in recent}
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM run_events WHERE run_id = ANY($1)", [r.uuid for r in old]) == 0
    for run in old:
        stone = await tombstones.get(db, seeded.tenant, run)
        assert (stone.status, stone.events, stone.cost_micros, stone.reason) == (
            "finished", 10, 1500, "retention")
    assert await admin_conn.fetchval(
        "SELECT sum(cost_micros) FROM usage_facts WHERE tenant_id = $1",
        seeded.tenant.value) == usage_before
