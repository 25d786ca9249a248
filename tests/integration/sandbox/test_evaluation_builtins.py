"""Built-in tools in an evaluation's runs (ADR 0034), with a real bwrap sandbox and
a real browser that reaches the test's web (`tests/support/pages.py`) only through the
egress proxy. A `recorded` evaluation reaches nothing: code and the browser are answered by
the case's recordings, the stub, or "no recording" — no sandbox is made and the page server
sees nothing. A `live` one makes a built-in call for real only where it can reach nothing
outside (no egress host, no browser); otherwise it is answered as a recorded one is."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tenantry.db import Database
from tenantry.sandbox import probe as sandbox_probe
from tenantry.sandbox.manager import SandboxManager
from tenantry.sandbox.pool import PooledDriver
from tenantry.sandbox.types import Limits
from tenantry.tools.builtin import BrowserPolicy
from tests.support.api import Api, serving_api
from tests.support.blob_stores import directory_blobs
from tests.support.evaluations import evaluation_done
from tests.support.pages import HOST, PageWorld, page_world
from tests.support.sandbox import require, sandbox_settings
from tests.support.scripts import answer, call, scripted
from tests.support.worker import Fakes, running_worker

pytestmark = pytest.mark.timeout(600)

LIMITS = Limits(memory_mib=1536, pids=256, timeout_s=60)
#: bwrap shares the host's kernel: its browser is for tests and development only.
POLICY = BrowserPolicy(page_timeout_s=60.0, max_pages=20, allow_dev_backends=True)
PAGE = f"http://{HOST}/"


@pytest.fixture
def world() -> Iterator[PageWorld]:
    with page_world() as pages:
        yield pages


@pytest.fixture
async def bwrap(world: PageWorld, tmp_path: Path) -> AsyncIterator[PooledDriver]:
    """bwrap sandboxes (with the browser) whose egress reaches the test's web."""
    require("bwrap")
    driver = PooledDriver(
        sandbox_probe.build_backend("bwrap", sandbox_settings(tmp_path, "bwrap"),
                                    variant="browser"),
        pool_size=0, limits=LIMITS, egress=world.proxy())
    try:
        yield driver
    finally:
        await driver.close()


@pytest.fixture
async def sandboxes(bwrap: PooledDriver, db: Database, tmp_path: Path
                    ) -> AsyncIterator[SandboxManager]:
    """A worker's sandbox manager over them."""
    manager = SandboxManager(bwrap, directory_blobs(db, tmp_path / "blobs"), limits=LIMITS,
                             hibernate_after=0, browser_driver=bwrap, browser_limits=LIMITS)
    try:
        yield manager
    finally:
        await manager.destroy_all()


async def _evaluate(api: Api, h: dict[str, str], agent: str, tool_results: str,
                    case: dict[str, Any], stubs: dict[str, str]) -> dict[str, Any]:
    """One case on both sides (the same version, its own model in place: a candidate),
    the finished report's case."""
    r = await api.client.post(f"/v1/agents/{agent}/test-sets", headers=h, json={
        "name": tool_results, "tool_results": tool_results, "cases": [case],
        "stubs": stubs})
    assert r.status_code == 201, r.text
    r = await api.client.post(f"/v1/agents/{agent}/evaluations", headers=h, json={
        "test_set_id": r.json()["test_set_id"], "candidate": {"model": "scripted"}})
    assert r.status_code == 201, r.text
    report = await evaluation_done(api, h, agent, r.json()["evaluation_id"], within=300)
    only: dict[str, Any] = report["cases"][0]
    return only


async def _completed(api: Api, h: dict[str, str], run: str) -> list[dict[str, Any]]:
    events = await api.events_until_end(h, run)
    return [e["data"] for e in events if e["type"] == "ToolCompleted"]  # type: ignore[misc]


async def test_built_in_tools_reach_nothing_in_an_evaluation_unless_live_and_contained(
    fakes: Fakes, database_dsn: str, bwrap: PooledDriver, sandboxes: SandboxManager,
    world: PageWorld,
) -> None:
    def made() -> int:  # sandboxes made so far: each one is claimed from the pool
        return bwrap.pool.stats.claims

    async with serving_api(database_dsn) as api, running_worker(
            database_dsn, fakes.model.base_url, sandboxes=sandboxes, browser=POLICY):
        _, h = await api.tenant()
        reaching = await api.agent(h, name="reaching", tools=["run_python", "browser_open",
                                                              "browser_click"],
                                   sandbox={"egress": [HOST]})
        world.paths.clear()
        before = made()

        # Recorded: the recording, the stub, "no recording" — for the browser and for code
        # that could reach the host alike. No sandbox, no page fetched.
        outside = scripted(call("browser_open", url=PAGE),
                           call("run_python", code=f"import urllib.request as u; "
                                                   f"print(u.urlopen('{PAGE}').read())"),
                           call("browser_click", text="Next page"),
                           answer("{tool_results}"))
        case = {"input": outside, "checks": {"tools_called": ["browser_open"]},
                "recorded": [{"tool": "browser_open", "arguments": {"url": PAGE},
                              "result": "the recorded page"}]}
        for mode in ("recorded", "live"):  # live: the agent reaches a host, and browses
            only = await _evaluate(api, h, reaching, mode, case,
                                   {"run_python": "the stubbed output"})
            for side in ("baseline", "candidate"):
                assert only[side]["status"] == "finished", only[side]
                assert [c["outcome"] for c in only[side]["tool_calls"]] == [
                    "recorded", "stub", "no_recording"], (mode, only[side]["tool_calls"])
                assert "the recorded page" in only[side]["answer"]
                assert "the stubbed output" in only[side]["answer"]
                calls = await _completed(api, h, only[side]["run_id"])
                assert not any(c.get("sandbox") for c in calls), calls
        assert world.paths == []
        assert made() == before

        # Live, an agent whose sandbox reaches nothing (no host, no browser): its code runs
        # for real, in a sandbox of its own per run.
        contained = await api.agent(h, name="contained", tools=["run_python"])
        only = await _evaluate(api, h, contained, "live", {
            "input": scripted(call("run_python", code="print(6 * 7)"),
                              answer("{last_tool_result}")),
            "checks": {"answer_contains": ["42"]}}, {})
        for side in ("baseline", "candidate"):
            assert only[side]["passed"] is True, only[side]
            assert [c["outcome"] for c in only[side]["tool_calls"]] == [None]
            [done] = await _completed(api, h, only[side]["run_id"])
            assert json.loads(done["result"])["stdout"].strip() == "42"
            assert done["sandbox"]["backend"] == "bwrap"
        assert made() == before + 2
    assert world.paths == []
