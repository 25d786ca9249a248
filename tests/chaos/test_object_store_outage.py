"""The object store goes down mid-run and comes back: runs whose large tool outputs must be
kept wait for it (the step is never lost, and no event names a blob that was not written),
the API answers a read with 503 and Retry-After meanwhile and stays up, and once the store
is back every run finishes with every blob it names readable.

Arranged, not hoped for: the store is stopped first, the runs are started after, and the
store is started again only once the worker has logged that a write is waiting for it. The
worker runs at the production lease and the production patience of its blob writes."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tenantry.blobs.s3 import S3Objects
from tests.support.api import serving_api
from tests.support.blob_stores import stored
from tests.support.object_store import SeaweedFS
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

pytestmark = pytest.mark.chaos

BIG = "0123456789abcdef" * 1024  # 16 KiB: past the 8 KiB cap, kept in the blob store
RUNS = 6
WAITING = "blob store unavailable; the %s waits for it: %s"


def _refs(events: list[dict[str, Any]]) -> list[str]:
    return [e["data"]["output_ref"] for e in events
            if e["type"] == "ToolCompleted" and "output_ref" in e["data"]]


async def test_runs_wait_out_an_object_store_outage_and_lose_nothing(
    database_dsn: str, fakes: Fakes, s3_server: SeaweedFS, s3_bucket: str,
    s3_objects: S3Objects, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="tenantry.blobs.store")
    async with serving_api(database_dsn, **s3_server.settings(s3_bucket)) as api, \
            running_worker(database_dsn, fakes.model.base_url, objects=s3_objects):
        tenant, h = await api.tenant()
        await api.tool_server(tenant, fakes.mcp.url)
        agent = await api.agent(h, tools=["echo"])
        script = scripted(call("echo", text=BIG), call("echo", text=BIG + "!"),
                          answer("kept"))
        before = await api.start(h, agent, script)
        [kept] = _refs(await api.events_until_end(h, before))[:1]

        await s3_server.stop()
        runs = [await api.start(h, agent, script) for _ in range(RUNS)]
        async def write_waits() -> bool:
            return any(r.msg == WAITING for r in caplog.records)

        # A write is waiting for the store: the outage is mid-step.
        await until(write_waits, "a blob write waiting for the store", 60)
        refused = await api.client.get(f"/v1/runs/{before}/blobs/{kept}", headers=h)
        assert refused.status_code == 503, refused.text
        assert refused.json()["type"] == "blob_store_unavailable"
        assert int(refused.headers["retry-after"]) > 0
        assert s3_server.endpoint.split("//")[1] not in refused.text  # no internal address
        assert (await api.client.get("/healthz")).status_code == 200
        for run in runs:  # waiting, not failed
            assert (await api.run(h, run))["status"] in ("queued", "running")

        await s3_server.start()
        for run in runs:
            events = await api.events_until_end(h, run, within=180)
            assert events[-1]["type"] == "RunFinished", events[-1]
            refs = _refs(events)
            assert len(refs) == 2
            for ref in refs:  # every blob an event names is there, whole
                read = await api.client.get(f"/v1/runs/{run}/blobs/{ref}", headers=h)
                assert read.status_code == 200 and read.text in (BIG, BIG + "!")
        assert (await api.client.get(f"/v1/runs/{before}/blobs/{kept}", headers=h)).text == BIG
        assert len(await stored(s3_objects, tenant)) == 2 * (RUNS + 1)
