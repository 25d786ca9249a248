"""A sandbox save past the tenant's blob quota, in real runs on every
backend: the hoarding tenant's run fails as its own failure (``ours: false``) with the
reason, nothing of it stored or counted, while another tenant's run parks, saves and
finishes with its files."""

from __future__ import annotations

import json
from pathlib import Path

from tenantry.blobs import BlobKind
from tenantry.db import Database
from tenantry.ids import RunId, TenantId
from tenantry.sandbox.manager import SandboxManager
from tenantry.sandbox.pool import PooledDriver
from tests.support.api import Api
from tests.support.blob_stores import directory_blobs, stored
from tests.support.sandbox import TEST_LIMITS
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

QUOTA = 128 << 10
# Random bytes: no compression of the save brings them under the quota.
BIG_FILE = ("import os; os.makedirs('data', exist_ok=True); "
            "open('data/big.bin', 'wb').write(os.urandom(512 << 10)); print('written')")
SUM_CODE = "print(sum(map(int, open('data/numbers.txt').read().split())))"


async def test_a_save_past_the_quota_fails_that_run_and_another_tenant_saves(
    api: Api, fakes: Fakes, database_dsn: str, db: Database, driver: PooledDriver,
    tmp_path: Path,
) -> None:
    blobs = directory_blobs(db, tmp_path / "blobs", quota_bytes=QUOTA)
    manager = SandboxManager(driver, blobs, limits=TEST_LIMITS[driver.backend],
                             hibernate_after=0)  # every park hibernates: files must be saved
    hostile_id, hostile = await api.tenant("Hoarder")
    other_id, other = await api.tenant("Bystander")
    tools = {"tools": ["write_file", "run_python"], "needs_approval": ["run_python"]}
    hostile_agent = await api.agent(hostile, tools=["run_python", "list_files"],
                                    needs_approval=["list_files"])
    other_agent = await api.agent(other, **tools)
    try:
        async with running_worker(database_dsn, fakes.model.base_url, sandboxes=manager):
            hoarding = await api.start(hostile, hostile_agent, scripted(
                call("run_python", code=BIG_FILE), call("list_files"), answer("done")))
            hoarded = await api.events_until_end(hostile, hoarding, within=180)
            bystander = await api.start(other, other_agent, scripted(
                call("write_file", path="data/numbers.txt", content="4 5 6"),
                call("run_python", code=SUM_CODE), answer("{last_tool_result}")))

            async def saved_and_waiting() -> bool:
                return manager.hibernated == 1 and any(
                    ref.startswith("sandbox-") for ref in await stored(blobs.objects, other_id))

            await until(saved_and_waiting, "the bystander's run saved and hibernated", 180)
            # Its save is a row of its run, counted against its own quota.
            [save] = await blobs.of_run(TenantId(other_id), RunId.parse(bystander))
            assert save.kind is BlobKind.SANDBOX_FILES and save.ref.startswith("sandbox-")
            assert await blobs.usage(TenantId(other_id)) == save.bytes <= QUOTA
            pending = (await api.client.get("/v1/approvals", params={"status": "pending"},
                                            headers=other)).json()["data"]
            r = await api.client.post(f"/v1/approvals/{pending[0]['approval_id']}",
                                      json={"decision": "approve"}, headers=other)
            assert r.status_code == 200, r.text
            await api.events_until_end(other, bystander, within=180)
    finally:
        await manager.destroy_all()
    failed = hoarded[-1]
    assert failed["type"] == "RunFailed", hoarded
    data = failed["data"]
    assert isinstance(data, dict) and data["ours"] is False, data
    assert data["error"].startswith("the run's sandbox files could not be saved while it "
                                    "waits: blob store quota reached: "), data
    assert "of 0.1 MiB used" in data["error"], data
    # Nothing of it stored, nor counted.
    assert await stored(blobs.objects, hostile_id) == set()
    assert not (tmp_path / "blobs" / hostile_id).exists()  # not even a temporary file
    assert await blobs.of_run(TenantId(hostile_id), RunId.parse(hoarding)) == []
    assert await blobs.usage(TenantId(hostile_id)) == 0
    run = await api.run(other, bystander)
    assert run["status"] == "finished", run
    assert json.loads(str(run["answer"]))["stdout"] == "15\n"  # restored from its save
