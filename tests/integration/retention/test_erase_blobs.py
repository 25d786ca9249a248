"""A tenant's erase takes its blobs with its runs, from whichever store the cell uses: the
job counts them as queued, the bucket (or folder) holds none of the tenant's objects once
it is done, the registry none of its rows and its counted bytes are zero — and another
tenant's blobs, rows and bytes are untouched."""

from __future__ import annotations

import asyncpg

from tenantry.blobs import BlobKind, Blobs
from tenantry.db import Database
from tenantry.ids import AgentId, TenantId
from tenantry.retention import erase
from tenantry.retention.cleaner import Cleaner
from tests.support.api import Api
from tests.support.blob_stores import put, stored
from tests.support.object_store_fixtures import StoreUnderTest
from tests.support.retention import Seeded, ended_runs


async def test_an_erased_tenants_blobs_leave_the_store_and_its_bytes_fall_to_zero(
    api: Api, db: Database, admin_conn: asyncpg.Connection, blob_store: StoreUnderTest,
) -> None:
    blobs = Blobs(db, blob_store.objects)
    leaving, h = await api.tenant("Leaving")
    staying, keep_h = await api.tenant("Staying")
    gone = Seeded(TenantId.parse(leaving), AgentId.parse(await api.agent(h)))
    kept = Seeded(TenantId.parse(staying), AgentId.parse(await api.agent(keep_h)))
    runs = await ended_runs(admin_conn, gone, 2, ended_days_ago=1)  # within retention
    [other] = await ended_runs(admin_conn, kept, 1, ended_days_ago=1)
    refs = [await put(blobs, gone.tenant, runs[0], "out", b"a" * 9000),
            await put(blobs, gone.tenant, runs[0], f"screenshot-{runs[0]}", b"p" * 2000,
                      kind=BlobKind.SCREENSHOT),
            await put(blobs, gone.tenant, runs[1], f"sandbox-{runs[1]}", b"t" * 5000,
                      kind=BlobKind.SANDBOX_FILES)]
    theirs = await put(blobs, kept.tenant, other, "out", b"b" * 7000)
    assert await blobs.usage(gone.tenant) == 16000

    r = await api.client.post(f"/admin/v1/tenants/{leaving}/erase", headers=api.operator)
    assert r.status_code == 202, r.text
    done = await erase.run_until_done(Cleaner(db, blobs), gone.tenant, r.json()["job_id"],
                                      poll_seconds=0.05)

    assert (done.status, done.runs_deleted, done.blobs_queued) == ("done", 2, len(refs))
    assert await stored(blob_store.objects, leaving) == set()
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM blobs WHERE tenant_id = $1", leaving) == 0
    assert await blobs.usage(gone.tenant) == 0
    assert await admin_conn.fetchval("SELECT count(*) FROM blob_deletions") == 0
    # The other tenant's blob, row and bytes are where they were.
    assert await stored(blob_store.objects, staying) == {theirs}
    assert await blobs.usage(kept.tenant) == 7000
    assert await blobs.get(kept.tenant, theirs) == b"b" * 7000
