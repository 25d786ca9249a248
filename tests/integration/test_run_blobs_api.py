"""A tenant reads its runs' blobs through the API: a tool output over the event cap is
listed with its size and read back whole; another tenant, another run, a ref that could
escape its folder, are refused (404, 400) with problem+json and nothing read; and when the
run is deleted its blob leaves the object store and the tenant's counted bytes fall by
exactly its size."""

from __future__ import annotations

import pytest

from tenantry.blobs import Blobs
from tenantry.client import AsyncClient, NotFound
from tenantry.db import Database
from tenantry.ids import TenantId
from tests.support.api import serving_api
from tests.support.blob_stores import stored
from tests.support.object_store_fixtures import StoreUnderTest
from tests.support.scripts import answer, call, scripted
from tests.support.worker import Fakes, running_worker

BIG = "0123456789" * 3000  # 30,000 bytes: past the 8 KiB cap, kept in the blob store


async def test_a_tenant_lists_and_reads_its_runs_blobs_and_they_leave_with_the_run(
    database_dsn: str, db: Database, fakes: Fakes, blob_store: StoreUnderTest,
) -> None:
    objects = blob_store.objects  # the worker's, and the API's (its settings open the same)
    async with serving_api(database_dsn, **blob_store.settings) as api, running_worker(
            database_dsn, fakes.model.base_url, objects=objects):
        tenant, h = await api.tenant()
        _, other_h = await api.tenant("Other")
        await api.tool_server(tenant, fakes.mcp.url)
        agent = await api.agent(h, tools=["echo"])
        run_id = await api.start(h, agent, scripted(call("echo", text=BIG), answer("read")))
        events = await api.events_until_end(h, run_id)
        done = next(e for e in events if e["type"] == "ToolCompleted")
        ref = done["data"]["output_ref"]
        usage = Blobs(db, objects)

        listed = await api.client.get(f"/v1/runs/{run_id}/blobs", headers=h)
        assert listed.status_code == 200
        [blob] = listed.json()["data"]
        assert (blob["ref"], blob["kind"], blob["bytes"]) == (ref, "tool_output", len(BIG))
        read = await api.client.get(blob["url"], headers=h)
        assert read.status_code == 200 and read.text == BIG
        assert read.headers["content-type"] == "text/plain; charset=utf-8"
        assert read.headers["content-disposition"].startswith("attachment;")
        assert await usage.usage(TenantId(tenant)) == len(BIG)
        # The SDK reads the same.
        key = h["Authorization"].removeprefix("Bearer ")
        async with AsyncClient(api.base_url, key) as client:
            [sdk_blob] = await client.runs.blobs(run_id)
            assert (sdk_blob.ref, sdk_blob.kind, sdk_blob.bytes) == (ref, "tool_output", len(BIG))
            assert await client.runs.read_blob(run_id, ref) == BIG.encode()
            with pytest.raises(NotFound):
                await client.runs.read_blob(run_id, "nothing.0123")

        # Another tenant: neither the run nor the ref exist for it.
        for path in (f"/v1/runs/{run_id}/blobs", f"/v1/runs/{run_id}/blobs/{ref}"):
            refused = await api.client.get(path, headers=other_h)
            assert refused.status_code == 404, path
            assert refused.headers["content-type"] == "application/problem+json"
        other_agent = await api.agent(other_h, tools=[])
        own_run = await api.start(other_h, other_agent, scripted(answer("hi")))
        await api.events_until_end(other_h, own_run)
        assert (await api.client.get(f"/v1/runs/{own_run}/blobs/{ref}",
                                     headers=other_h)).status_code == 404
        # Refs that could not be one: 400, before anything is looked up.
        for bad in ("%2E%2E", "..%2Fx", "%2Fetc%2Fpasswd", "a%2Fb", ".hidden", "x%00y"):
            answer_ = await api.client.get(f"/v1/runs/{run_id}/blobs/{bad}", headers=h)
            assert answer_.status_code == 400, bad
            assert answer_.json()["type"] == "bad_blob_ref"
        unknown = await api.client.get(f"/v1/runs/{run_id}/blobs/nothing.0123", headers=h)
        assert unknown.status_code == 404 and unknown.json()["type"] == "blob_not_found"
        assert await stored(objects, tenant) == {ref}

        deleted = await api.client.delete(f"/v1/runs/{run_id}", headers=h)
        assert deleted.status_code == 204
        assert await stored(objects, tenant) == set()
        assert await usage.usage(TenantId(tenant)) == 0
        assert (await api.client.get(f"/v1/runs/{run_id}/blobs", headers=h)).status_code == 404
