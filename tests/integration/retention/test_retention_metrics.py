"""/metrics shows retention by tenant class, never by tenant id: candidates
waiting, the cleanup lag, tombstones, blob deletions pending, runs deleted ever and by the
last pass — read from the database, so they follow the cleaner's work wherever it ran."""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg

from tenantry.agents import service as agents
from tenantry.agents.spec import AgentSpec
from tenantry.blobs import BlobKind
from tenantry.db import Database
from tenantry.retention import policy as policies
from tenantry.retention.cleaner import Cleaner, CleanupSettings
from tenantry.retention.policy import RetentionPolicy
from tenantry.tenants import service as tenants
from tests.support.api import Api
from tests.support.blob_stores import directory_blobs
from tests.support.retention import Seeded, ended_runs

_SAMPLE = re.compile(r'^(tenantry_[a-z_]+)\{tenant_class="([a-z]+)"\} (\S+)$')
_ENDED = re.compile(r'^tenantry_runs\{tenant_class="([a-z]+)",status="finished"\} (\S+)$')
DAY = 86400.0


async def _tenant(db: Database, name: str, plan: str) -> Seeded:
    tenant = (await tenants.create_tenant(db, name, plan=plan)).tenant.tenant_id
    agent = (await agents.create_agent(db, tenant, "a", AgentSpec("scripted", ""))).agent_id
    return Seeded(tenant, agent)


async def _scrape(api: Api) -> tuple[str, dict[tuple[str, str], float]]:
    r = await api.client.get("/metrics", headers=api.operator)
    assert r.status_code == 200, r.text
    found = {}
    for line in r.text.splitlines():
        match = _SAMPLE.match(line)
        if match and ("retention" in match[1] or match[1] in (
                "tenantry_tombstones", "tenantry_blob_deletions_pending", "tenantry_blob_bytes")):
            found[(match[1], match[2])] = float(match[3])
        ended = _ENDED.match(line)
        if ended:  # runs by status: a deleted run is no longer a finished one
            found[("finished", ended[1])] = float(ended[2])
    return r.text, found


async def test_retention_gauges_by_tenant_class_follow_the_cleaner(
    api: Api, db: Database, admin_conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    gold = await _tenant(db, "Gold", "gold")  # the default policy: 30 days
    gold_zero = await _tenant(db, "Gold, keeps nothing", "gold")
    free = await _tenant(db, "Free", "free")
    async with db.tenant_tx(gold_zero.tenant) as conn:
        await policies.write(conn, gold_zero.tenant, RetentionPolicy(runs_days=0))
    await ended_runs(admin_conn, gold, 4, ended_days_ago=40)
    await ended_runs(admin_conn, gold, 2, ended_days_ago=5)
    await ended_runs(admin_conn, gold_zero, 3, ended_days_ago=2)
    [free_run] = await ended_runs(admin_conn, free, 1, ended_days_ago=40,
                                  blob_refs=["out.0123"])
    # A blob of its run in the registry: counted in the bytes gauge until it is deleted.
    await directory_blobs(db, tmp_path).put(free.tenant, free_run, BlobKind.TOOL_OUTPUT,
                                            "out", b"x" * 5000)

    text, before = await _scrape(api)
    assert (before[("finished", "gold")], before[("finished", "free")]) == (9, 1)
    assert before[("tenantry_retention_candidates", "gold")] == 7
    assert before[("tenantry_retention_candidates", "free")] == 1
    # The oldest gold candidate ended 40 days ago, 10 past its cutoff.
    assert 10 * DAY <= before[("tenantry_retention_lag_seconds", "gold")] < 10 * DAY + 600
    assert 10 * DAY <= before[("tenantry_retention_lag_seconds", "free")] < 10 * DAY + 600
    assert (before[("tenantry_blob_bytes", "gold")],
            before[("tenantry_blob_bytes", "free")]) == (0, 5000)
    for name in ("tenantry_tombstones", "tenantry_blob_deletions_pending",
                 "tenantry_retention_runs_deleted_total",
                 "tenantry_retention_last_pass_runs_deleted"):
        assert before[(name, "gold")] == before[(name, "free")] == 0
    assert "# TYPE tenantry_retention_runs_deleted_total counter" in text

    # No blob store: the deletion stays queued in the outbox, and is shown so.
    cleaner = Cleaner(db, None, settings=CleanupSettings(batch=2))
    await cleaner.run_once([gold.tenant, gold_zero.tenant, free.tenant])
    text, after = await _scrape(api)
    assert after == {
        ("finished", "gold"): 2, ("finished", "free"): 0,
        **{(name, cls): 0.0 for name in ("tenantry_retention_candidates",
                                         "tenantry_retention_lag_seconds")
           for cls in ("gold", "free")},
        ("tenantry_tombstones", "gold"): 7, ("tenantry_tombstones", "free"): 1,
        ("tenantry_blob_deletions_pending", "gold"): 0,
        ("tenantry_blob_deletions_pending", "free"): 2,
        # Queued, not yet deleted: still held.
        ("tenantry_blob_bytes", "gold"): 0, ("tenantry_blob_bytes", "free"): 5000,
        ("tenantry_retention_runs_deleted_total", "gold"): 7,
        ("tenantry_retention_runs_deleted_total", "free"): 1,
        ("tenantry_retention_last_pass_runs_deleted", "gold"): 7,
        ("tenantry_retention_last_pass_runs_deleted", "free"): 1,
    }

    # Tombstones leave by their own policy: the gauge drops, the counter of deletions
    # does not, and the next pass deleted nothing.
    async with db.tenant_tx(gold_zero.tenant) as conn:
        await policies.write(conn, gold_zero.tenant,
                             RetentionPolicy(runs_days=0, tombstones_days=0))
    await cleaner.run_once([gold.tenant, gold_zero.tenant])
    text, later = await _scrape(api)
    assert later[("tenantry_tombstones", "gold")] == 4
    assert later[("tenantry_retention_runs_deleted_total", "gold")] == 7
    assert later[("tenantry_retention_last_pass_runs_deleted", "gold")] == 0
    assert await admin_conn.fetchval("SELECT count(*) FROM tombstones") == 5

    for seeded in (gold, gold_zero, free):
        assert seeded.tenant.value not in text
