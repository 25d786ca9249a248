"""Paused ("kept") sandboxes of parked runs are bounded: one tenant
parking more runs than its cap has its own oldest sandboxes hibernated, another tenant's
kept sandbox stays, and every run still resumes with its files — on every backend."""

from __future__ import annotations

import json
from pathlib import Path

from tenantry.db import Database
from tenantry.sandbox.manager import SandboxManager
from tenantry.sandbox.pool import PooledDriver
from tests.support.api import Api
from tests.support.blob_stores import directory_blobs
from tests.support.sandbox import TEST_LIMITS
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

SUM_CODE = "print(sum(map(int, open('data/numbers.txt').read().split())))"


async def start_and_park(api: Api, h: dict[str, str], agent: str, numbers: str,
                         manager: SandboxManager, *, kept: int | None = None,
                         hibernated: int | None = None) -> str:
    """A run that writes ``numbers`` to a file and parks for the approval of the code that
    sums them; returns once the worker gave its sandbox back (kept, or hibernated)."""
    run_id = await api.start(h, agent, scripted(
        call("write_file", path="data/numbers.txt", content=numbers),
        call("run_python", code=SUM_CODE),
        answer("{last_tool_result}")))

    async def parked() -> bool:
        return (kept is None or manager.kept == kept) and \
            (hibernated is None or manager.hibernated == hibernated)

    await until(parked, f"run {run_id} parked (kept={kept}, hibernated={hibernated})", 180,
                details=lambda: f"kept={manager.kept} hibernated={manager.hibernated}")
    return run_id


async def approve_all(api: Api, h: dict[str, str], expected: int) -> None:
    pending = (await api.client.get("/v1/approvals", params={"status": "pending"},
                                    headers=h)).json()["data"]
    assert len(pending) == expected, pending
    for approval in pending:
        r = await api.client.post(f"/v1/approvals/{approval['approval_id']}",
                                  json={"decision": "approve"}, headers=h)
        assert r.status_code == 200, r.text


def sandboxes_used(events: list[dict[str, object]]) -> tuple[dict[str, object], ...]:
    completed = [e["data"] for e in events if e["type"] == "ToolCompleted"]
    assert [c["tool"] for c in completed] == ["write_file", "run_python"]  # type: ignore[index]
    return tuple(c["sandbox"] for c in completed)  # type: ignore[index]


async def test_a_tenant_parking_past_its_cap_hibernates_its_own_oldest_only(
    api: Api, fakes: Fakes, database_dsn: str, db: Database, driver: PooledDriver,
    tmp_path: Path,
) -> None:
    manager = SandboxManager(driver, directory_blobs(db, tmp_path / "blobs"),
                             limits=TEST_LIMITS[driver.backend], hibernate_after=300,
                             kept_max=32, kept_per_tenant=2)
    _, other = await api.tenant("Bystander")
    _, hostile = await api.tenant("Hoarder")
    tools = {"tools": ["write_file", "run_python"], "needs_approval": ["run_python"]}
    other_agent = await api.agent(other, **tools)
    hostile_agent = await api.agent(hostile, **tools)
    try:
        async with running_worker(database_dsn, fakes.model.base_url, sandboxes=manager):
            bystander = await start_and_park(api, other, other_agent, "100 200", manager,
                                             kept=1)
            hoarded = [await start_and_park(api, hostile, hostile_agent, "1 2", manager,
                                            kept=2),
                       await start_and_park(api, hostile, hostile_agent, "3 4", manager,
                                            kept=3)]
            # A third parked run of the hoarder: over its cap of 2, its oldest goes.
            hoarded.append(await start_and_park(api, hostile, hostile_agent, "5 6", manager,
                                                hibernated=1))
            assert manager.kept == 3 and manager.hibernated == 1
            await approve_all(api, hostile, 3)
            await approve_all(api, other, 1)
            ended = {run: await api.events_until_end(h, run, within=180)
                     for run, h in [(bystander, other), *((r, hostile) for r in hoarded)]}
    finally:
        await manager.destroy_all()
    sums = {bystander: "300\n", hoarded[0]: "3\n", hoarded[1]: "7\n", hoarded[2]: "11\n"}
    for run, h in [(bystander, other), *((r, hostile) for r in hoarded)]:
        got = await api.run(h, run)
        assert got["status"] == "finished", got
        assert json.loads(str(got["answer"]))["stdout"] == sums[run]  # its files came back
    # The hoarder's oldest resumed in a fresh sandbox from its saved files; the others
    # (its two newest and the bystander's) came back to the very sandbox they paused in.
    wrote, ran = sandboxes_used(ended[hoarded[0]])
    assert ran["id"] != wrote["id"] and ran["restored_from"], (wrote, ran)
    for run in (bystander, hoarded[1], hoarded[2]):
        wrote, ran = sandboxes_used(ended[run])
        assert ran["id"] == wrote["id"] and "restored_from" not in ran, (run, wrote, ran)


async def test_past_the_workers_cap_the_tenant_holding_the_most_pays(
    api: Api, fakes: Fakes, database_dsn: str, db: Database, driver: PooledDriver,
    tmp_path: Path,
) -> None:
    # Both tenants under their own cap (8); the worker holds 3 at most. The bystander
    # parked first, yet the hoarder (holding more) loses its oldest.
    manager = SandboxManager(driver, directory_blobs(db, tmp_path / "blobs"),
                             limits=TEST_LIMITS[driver.backend], hibernate_after=300,
                             kept_max=3, kept_per_tenant=8)
    _, other = await api.tenant("Bystander")
    _, hostile = await api.tenant("Hoarder")
    tools = {"tools": ["write_file", "run_python"], "needs_approval": ["run_python"]}
    other_agent = await api.agent(other, **tools)
    hostile_agent = await api.agent(hostile, **tools)
    try:
        async with running_worker(database_dsn, fakes.model.base_url, sandboxes=manager):
            bystander = await start_and_park(api, other, other_agent, "10 20", manager,
                                             kept=1)
            first = await start_and_park(api, hostile, hostile_agent, "1 1", manager, kept=2)
            await start_and_park(api, hostile, hostile_agent, "2 2", manager, kept=3)
            await start_and_park(api, hostile, hostile_agent, "3 3", manager, hibernated=1)
            await approve_all(api, other, 1)
            bystanders = await api.events_until_end(other, bystander, within=180)
            await approve_all(api, hostile, 3)
            firsts = await api.events_until_end(hostile, first, within=180)
    finally:
        await manager.destroy_all()
    wrote, ran = sandboxes_used(bystanders)
    assert ran["id"] == wrote["id"] and "restored_from" not in ran
    wrote, ran = sandboxes_used(firsts)
    assert ran["id"] != wrote["id"] and ran["restored_from"]
    assert json.loads(str((await api.run(hostile, first))["answer"]))["stdout"] == "2\n"
