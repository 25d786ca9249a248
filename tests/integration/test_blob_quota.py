"""A tenant's bytes in the blob store have a quota, counted in the registry: a tenant
writing past it is refused — nothing written, a typed error saying how full it is — while
another tenant's writes still succeed; the same blob written again is counted once, and
deleting blobs gives the room back. A tool output past the quota still reaches the model,
capped, only without its full copy by reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tenantry.blobs import BlobQuotaExceeded, Blobs, DirectoryObjects
from tenantry.db import Database
from tenantry.ids import RunId, TenantId
from tenantry.tools.gateway import ToolGateway
from tenantry.tools.mcp_client import McpToolClient
from tests.support.api import Api
from tests.support.blob_stores import directory_blobs, put, stored
from tests.support.object_store_fixtures import StoreUnderTest
from tests.support.scripts import answer, call, scripted
from tests.support.worker import Fakes, running_worker

QUOTA = 10_000


def tenant() -> TenantId:
    return TenantId.new()


async def test_a_tenant_writing_past_its_quota_is_refused_and_another_still_writes(
    db: Database, blob_store: StoreUnderTest,
) -> None:
    blobs = Blobs(db, blob_store.objects, quota_bytes=QUOTA)
    hoarder, bystander = tenant(), tenant()
    run = RunId.new()
    kept = [await put(blobs, hoarder, run, f"fill-{i}", bytes([i]) * 3000) for i in range(3)]
    with pytest.raises(BlobQuotaExceeded) as refused:
        await put(blobs, hoarder, run, "one-more", b"x" * 3000)
    assert "quota reached" in refused.value.detail and "nothing was written" in \
        refused.value.detail
    assert refused.value.extra == {"used_bytes": 9000, "quota_bytes": QUOTA,
                                   "needed_bytes": 3000}
    # The refused write left nothing: no object, not even a temporary file, and no row.
    assert await stored(blobs.objects, hoarder) == set(kept)
    if isinstance(blob_store.objects, DirectoryObjects):
        folder = blob_store.objects.root / hoarder.value
        assert sorted(p.name for p in folder.iterdir()) == sorted(kept)
    assert sorted(r.ref for r in await blobs.of_run(hoarder, run)) == sorted(kept)
    assert await blobs.usage(hoarder) == 9000
    # Another tenant's quota is its own.
    ref = await put(blobs, bystander, RunId.new(), "report", b"y" * 9000)
    assert await blobs.get(bystander, ref) == b"y" * 9000
    assert await blobs.usage(bystander) == 9000
    # The same blob written again is counted once; deleting one gives its bytes back.
    assert await put(blobs, hoarder, run, "fill-0", bytes([0]) * 3000) == kept[0]
    assert await blobs.usage(hoarder) == 9000
    await blobs.delete(hoarder, kept[0])
    assert await blobs.usage(hoarder) == 6000
    assert await stored(blobs.objects, hoarder) == set(kept[1:])
    await put(blobs, hoarder, run, "one-more", b"x" * 3000)
    assert await blobs.usage(hoarder) == 9000


async def test_no_quota_means_none(db: Database, blob_store: StoreUnderTest) -> None:
    blobs = Blobs(db, blob_store.objects)
    hoarder = tenant()
    ref = await put(blobs, hoarder, RunId.new(), "big", b"z" * (QUOTA * 3))
    assert await stored(blobs.objects, hoarder) == {ref}
    assert await blobs.usage(hoarder) == QUOTA * 3


async def test_tool_output_past_the_quota_is_still_shown_capped_without_a_ref(
    api: Api, fakes: Fakes, database_dsn: str, db: Database, tmp_path: Path,
) -> None:
    tenant_id, h = await api.tenant()
    await api.tool_server(tenant_id, fakes.mcp.url)
    agent = await api.agent(h, tools=["echo"])
    big = "0123456789" * 3000
    blobs = directory_blobs(db, tmp_path / "blobs", quota_bytes=QUOTA)

    class WithBlobs(ToolGateway):
        def __init__(self, db: Database, mcp: McpToolClient, **kwargs: Any) -> None:
            super().__init__(db, mcp, blobs=blobs, **kwargs)

    async with running_worker(database_dsn, fakes.model.base_url, gateway=WithBlobs):
        run_id = await api.start(h, agent, scripted(call("echo", text=big), answer("ok")))
        events = await api.events_until_end(h, run_id)
    assert (await api.run(h, run_id))["status"] == "finished"
    tool = next(e["data"] for e in events if e["type"] == "ToolCompleted")
    assert tool["truncated"] is True and tool["output_bytes"] == len(big)
    assert tool.get("output_ref") is None
    # Nothing past the quota stored, nor counted.
    assert await stored(blobs.objects, tenant_id) == set()
    assert await blobs.usage(TenantId(tenant_id)) == 0
