"""Hosts of a cell share only Postgres and the object store (issue 40): `tenantry api` and
two `tenantry worker` processes, each with a data directory of its own (as on separate
machines), on one real S3 engine.

A run writes a file in its sandbox and waits for an approval (its files saved to the
bucket as it parks); the worker that ran it is SIGKILLed; the run is approved and resumes
on the other worker, which restores the files from the bucket and reads them back; there
it also takes a browser screenshot and gets a tool output over 8 KiB. The API — a third
host — serves the screenshot, the output and the saved files from the bucket. Sandboxes on
bwrap (the browser allowed there, as on a development machine): the boundary does not
change where blobs live, and this costs seconds instead of minutes under emulation."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import httpx2
import pytest

from tenantry.testing.fake_model import FakeModelServer
from tenantry.testing.mcp_server import EffectsMcpServer
from tests.support.api import TEST_MASTER_KEY, Api
from tests.support.api_process import api_process
from tests.support.harness import WorkerFleet
from tests.support.object_store import SeaweedFS
from tests.support.outside_host import outside_host
from tests.support.scripts import answer, call, scripted

pytestmark = pytest.mark.chaos

NOTE = "written on the first host"
BIG = "0123456789abcdef" * 1024  # 16 KiB: past the 8 KiB cap, kept in the bucket
PNG = b"\x89PNG\r\n\x1a\n"


def _data(event: dict[str, Any]) -> dict[str, Any]:
    return cast("dict[str, Any]", event["data"])


async def _pending_approval(api: Api, h: dict[str, str]) -> dict[str, Any]:
    async with asyncio.timeout(120):
        while True:  # the run parks itself once its files are saved
            page = (await api.client.get("/v1/approvals", params={"status": "pending"},
                                         headers=h)).json()
            if page["data"]:
                return cast("dict[str, Any]", page["data"][0])
            await asyncio.sleep(0.2)


async def test_a_run_moves_hosts_with_its_files_and_the_api_serves_its_blobs(
    database_dsn: str, model: FakeModelServer, mcp: EffectsMcpServer, s3_server: SeaweedFS,
    s3_bucket: str, tmp_path: Path,
) -> None:
    key = TEST_MASTER_KEY.encoded()
    store = s3_server.env(s3_bucket)
    async with outside_host() as outside, api_process(
        database_dsn, tmp_path / "api", master_key=key, env=store,
    ) as served, WorkerFleet(
        dsn=database_dsn, model_url=model.base_url, log_dir=tmp_path / "workers", size=0,
        concurrency=4, lease_seconds=None, pool_max=None, master_key=key,
    ) as fleet, httpx2.AsyncClient(base_url=served.base_url, timeout=60) as client:
        fleet.env.update(store, TENANTRY_SANDBOX_BACKEND="bwrap",
                         TENANTRY_SANDBOX_MIN_BOUNDARY="bwrap",
                         TENANTRY_BROWSER_DEV_BACKENDS="1")
        api = Api(served.base_url, client, served.operator)
        tenant, h = await api.tenant("Two hosts")
        await api.tool_server(tenant, mcp.url)
        agent = await api.agent(
            h, tools=["write_file", "read_file", "echo", "browser_open", "browser_screenshot"],
            needs_approval=["echo"], sandbox={"egress": [outside.egress]})
        first = await fleet.spawn({"TENANTRY_DATA_DIR": str(tmp_path / "host-a")})
        await fleet.wait_ready(first)
        run_id = await api.start(h, agent, scripted(
            call("write_file", path="notes.txt", content=NOTE),
            call("echo", text=BIG),  # waits for an approval: the run parks, files saved
            call("read_file", path="notes.txt"),
            call("browser_open", url=f"{outside.url}/"),
            call("browser_screenshot"),
            answer("done")))
        approval = await _pending_approval(api, h)
        assert (await api.run(h, run_id))["status"] == "waiting"
        [saved] = (await client.get(f"/v1/runs/{run_id}/blobs", headers=h)).json()["data"]
        assert saved["kind"] == "sandbox_files"

        await fleet.kill(first)  # its disk, its paused sandbox: gone with the host
        second = await fleet.spawn({"TENANTRY_DATA_DIR": str(tmp_path / "host-b")})
        await fleet.wait_ready(second)
        decided = await client.post(f"/v1/approvals/{approval['approval_id']}",
                                    json={"decision": "approve"}, headers=h)
        assert decided.status_code == 200, decided.text
        events = await api.events_until_end(h, run_id, within=300)
        assert events[-1]["type"] == "RunFinished", (events[-1], second.tail())

        completed = {_data(e)["tool"]: _data(e) for e in events
                     if e["type"] == "ToolCompleted"}
        # The files came back from the bucket on the second host.
        assert completed["read_file"].get("result") == NOTE, completed["read_file"]
        assert completed["read_file"]["sandbox"]["restored_from"] == saved["ref"]
        assert not (tmp_path / "host-b" / "blobs").exists()  # nothing on its own disk
        # The output over 8 KiB and the screenshot, served by the API from the bucket.
        output = await client.get(
            f"/v1/runs/{run_id}/blobs/{completed['echo']['output_ref']}", headers=h)
        assert output.status_code == 200 and output.text == BIG
        [shot_ref] = completed["browser_screenshot"]["blob_refs"]
        shot = await client.get(f"/v1/runs/{run_id}/blobs/{shot_ref}", headers=h)
        assert shot.status_code == 200 and shot.content.startswith(PNG)
        assert shot.headers["content-type"] == "image/png"
        assert not fleet.unexpected_exits(), fleet.tails()
