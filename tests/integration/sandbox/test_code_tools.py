"""The built-in code and file tools in real agent runs, on every backend: files persist
between steps of a run, a long wait hibernates the sandbox (files to the blob store, VM
destroyed), and the run resumes in a fresh sandbox with its files back."""

from __future__ import annotations

import json
from pathlib import Path

import asyncpg

from tenantry.blobs import BlobKind, Blobs
from tenantry.db import Database
from tenantry.ids import RunId, TenantId
from tenantry.sandbox.manager import SandboxManager
from tenantry.sandbox.pool import PooledDriver
from tenantry.telemetry.worker import WorkerMetrics
from tests.support.api import Api
from tests.support.blob_stores import directory_blobs, stored
from tests.support.sandbox import TEST_LIMITS
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

SUM_CODE = "print(sum(map(int, open('data/numbers.txt').read().split())))"


def boxes(driver: PooledDriver, blobs: Blobs) -> SandboxManager:
    return SandboxManager(driver, blobs, limits=TEST_LIMITS[driver.backend], hibernate_after=0)


async def _forgotten(blobs: Blobs, tenant: str, run_id: str) -> bool:
    """The run's blobs are out of the registry and its tenant counts no bytes."""
    return (await blobs.of_run(TenantId(tenant), RunId.parse(run_id)) == []
            and await blobs.usage(TenantId(tenant)) == 0)


async def test_an_agent_writes_a_file_runs_python_on_it_and_answers(
    api: Api, fakes: Fakes, database_dsn: str, db: Database, driver: PooledDriver,
    tmp_path: Path,
) -> None:
    manager = boxes(driver, directory_blobs(db, tmp_path / "blobs"))
    _, h = await api.tenant()
    agent = await api.agent(h, tools=["write_file", "run_python", "list_files"])
    metrics = WorkerMetrics()
    async with running_worker(database_dsn, fakes.model.base_url, sandboxes=manager,
                              metrics=metrics):
        run_id = await api.start(h, agent, scripted(
            call("write_file", path="data/numbers.txt", content="3 4 5"),
            call("run_python", code=SUM_CODE),
            answer("{last_tool_result}")))
        events = await api.events_until_end(h, run_id, within=180)

        async def destroyed() -> bool:
            return manager.live == 0

        await until(destroyed, "the ended run's sandbox destroyed", 30)
        scraped = metrics.render()  # what /metrics shows for this worker, by backend
    backend = f'backend="{driver.backend}"'
    assert f"tenantry_sandbox_pool_target{{{backend}}} 1" in scraped
    assert f"tenantry_sandboxes_live{{{backend}}} 0" in scraped
    claims = [line for line in scraped.splitlines()
              if line.startswith("tenantry_sandbox_claim_seconds_count") and backend in line]
    assert claims and sum(float(line.rsplit(" ", 1)[1]) for line in claims) == 1
    run = await api.run(h, run_id)
    assert run["status"] == "finished", run
    assert json.loads(str(run["answer"]))["stdout"] == "12\n"
    completed = [e["data"] for e in events if e["type"] == "ToolCompleted"]
    assert [c["tool"] for c in completed] == ["write_file", "run_python"]
    # Both steps ran in the same sandbox, on the configured backend, reported per call.
    assert {c["sandbox"]["id"] for c in completed} == {completed[0]["sandbox"]["id"]}
    assert completed[0]["sandbox"]["backend"] == driver.backend
    assert "ready_ms" in completed[0]["sandbox"] and "ready_ms" not in completed[1]["sandbox"]
    # The sandbox time is in the billing record, per call, with the results it produced.
    billed = (await api.client.get("/v1/usage", headers=h)).json()["total"]
    assert billed["sandbox_ms"] == sum(round(c["sandbox"]["exec_ms"]) for c in completed) > 0


async def test_a_long_wait_hibernates_and_the_run_gets_its_files_back(
    api: Api, fakes: Fakes, database_dsn: str, db: Database, driver: PooledDriver,
    tmp_path: Path, admin_conn: asyncpg.Connection,
) -> None:
    blobs = directory_blobs(db, tmp_path / "blobs")
    manager = boxes(driver, blobs)
    tenant, h = await api.tenant()
    agent = await api.agent(h, tools=["write_file", "run_python"],
                            needs_approval=["run_python"])
    async with running_worker(database_dsn, fakes.model.base_url, sandboxes=manager):
        run_id = await api.start(h, agent, scripted(
            call("write_file", path="data/numbers.txt", content="10 20 30"),
            call("run_python", code=SUM_CODE),
            answer("{last_tool_result}")))

        async def hibernated() -> bool:
            return manager.hibernated == 1 and manager.live == 0

        await until(hibernated, "the parked run's sandbox hibernated", 120)
        saved = await admin_conn.fetchval(
            "SELECT data->>'ref' FROM run_events WHERE type = 'SandboxSaved'")
        assert saved and saved in await stored(blobs.objects, tenant)
        # A row of its run, counted to its tenant, until the run ends.
        row = await blobs.record(TenantId(tenant), RunId.parse(run_id), saved)
        assert row.kind is BlobKind.SANDBOX_FILES
        assert await blobs.usage(TenantId(tenant)) == row.bytes > 0
        pending = (await api.client.get("/v1/approvals", params={"status": "pending"},
                                        headers=h)).json()["data"]
        r = await api.client.post(f"/v1/approvals/{pending[0]['approval_id']}",
                                  json={"decision": "approve"}, headers=h)
        assert r.status_code == 200
        events = await api.events_until_end(h, run_id, within=180)

        async def cleaned_up() -> bool:
            return manager.live == 0 and saved not in await stored(blobs.objects, tenant)

        # The run ended: its sandbox and saved files go (just after the end is logged),
        # and their row and bytes with them.
        await until(cleaned_up, "the ended run's sandbox and saved files removed", 30)
        await until(lambda: _forgotten(blobs, tenant, run_id), "the saved files forgotten", 10)
    run = await api.run(h, run_id)
    assert json.loads(str(run["answer"]))["stdout"] == "60\n"
    completed = [e["data"] for e in events if e["type"] == "ToolCompleted"]
    before, after = completed[0]["sandbox"], completed[1]["sandbox"]
    assert after["id"] != before["id"] and after["restored_from"] == saved


async def test_a_run_that_parks_twice_without_running_code_keeps_its_sandbox_and_files(
    api: Api, fakes: Fakes, database_dsn: str, db: Database, driver: PooledDriver,
    tmp_path: Path,
) -> None:
    # The sandbox is paused when the run waits for an approval, and stays paused while the
    # run comes back (denied: no code runs) and parks again because its model is down.
    # That second park has nothing new to save — and a paused guest cannot answer a save.
    manager = SandboxManager(driver, directory_blobs(db, tmp_path / "blobs"),
                             limits=TEST_LIMITS[driver.backend], hibernate_after=300)
    _, h = await api.tenant()
    agent = await api.agent(h, tools=["write_file", "list_files", "run_python"],
                            needs_approval=["list_files"])
    try:
        async with running_worker(database_dsn, fakes.model.base_url, sandboxes=manager):
            run_id = await api.start(h, agent, scripted(
                call("write_file", path="data/numbers.txt", content="1 2 3"),
                call("list_files"),
                call("run_python", code=SUM_CODE),
                answer("{last_tool_result}")))
            pending: list[dict[str, str]] = []

            async def approval_pending() -> bool:
                nonlocal pending
                pending = (await api.client.get("/v1/approvals", params={"status": "pending"},
                                                headers=h)).json()["data"]
                return bool(pending)

            await until(approval_pending, "the run waiting for its approval", 120)
            fakes.model.set_mode("down")
            r = await api.client.post(f"/v1/approvals/{pending[0]['approval_id']}",
                                      json={"decision": "deny"}, headers=h)
            assert r.status_code == 200, r.text

            async def parked_for_the_model() -> bool:
                r = await api.client.get(f"/v1/runs/{run_id}/events", headers={
                    **h, "Accept": "application/json"})
                body = r.json()
                return body["run_ended"] or any(
                    e["type"] == "RunParked" for e in body["events"])

            await until(parked_for_the_model, "the run parked for its model", 60)
            fakes.model.set_mode("ok")
            events = await api.events_until_end(h, run_id, within=120)
    finally:
        await manager.destroy_all()
    run = await api.run(h, run_id)
    assert run["status"] == "finished", run
    assert json.loads(str(run["answer"]))["stdout"] == "6\n"
    types = [e["type"] for e in events]
    assert "RunParked" in types and types.count("SandboxSaved") == 1, types
    completed = [e["data"] for e in events if e["type"] == "ToolCompleted"]
    written, ran = completed[0], completed[2]
    assert [c["tool"] for c in completed] == ["write_file", "list_files", "run_python"]
    # The paused sandbox was kept and resumed: the same one, nothing restored.
    assert ran["sandbox"]["id"] == written["sandbox"]["id"]
    assert "restored_from" not in ran["sandbox"]
