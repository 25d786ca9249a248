"""Built-in tools that reach outside, with a worker SIGKILLed mid-request: invariant
3's rule — exactly once where the effect takes the key, at most once otherwise —
for code with an allowed egress host and for a browser submitting a form.

The host outside is a real one as far as the platform can tell (tests.support.outside_host:
a public address in a network namespace, reached through the sandbox's relay and the
worker's egress proxy, vetted like any host). Its server holds the first refund request
until the test has killed the worker that sent it, so every kill lands mid-request by
arrangement. Workers run at the production lease; sandboxes on bwrap (the browser allowed
there for the test, as on a development machine): the boundary does not change the rule,
and each of these runs costs a second instead of a minute under emulation."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from tenantry.testing.fake_model import FakeModelServer
from tests.support.api import TEST_MASTER_KEY, Api
from tests.support.harness import WorkerFleet
from tests.support.outside_host import OutsideHost, outside_host, refunds
from tests.support.scripts import answer, call, scripted

pytestmark = pytest.mark.chaos

#: Code that asks the outside host for a refund; with ``{key}`` it passes the call's key on.
POST = """
import os, urllib.request
request = urllib.request.Request("{url}/refund", data=b"order=o-7", method="POST"{key})
print(urllib.request.urlopen(request, timeout=120).read().decode())
"""
PASS_KEY = ', headers={"Idempotency-Key": os.environ["TENANTRY_IDEMPOTENCY_KEY"]}'


async def _kill_mid_request(api: Api, headers: dict[str, str], agent: str, steps: Any,
                            outside: OutsideHost, model: FakeModelServer, dsn: str,
                            log_dir: Path) -> list[dict[str, Any]]:
    """Run the script on worker A, SIGKILL A once its request reached the outside host, let
    worker B finish the run; the run's events."""
    async with WorkerFleet(dsn=dsn, model_url=model.base_url, log_dir=log_dir, size=0,
                           concurrency=4, lease_seconds=None,
                           master_key=TEST_MASTER_KEY.encoded()) as fleet:
        fleet.env.update(TENANTRY_SANDBOX_BACKEND="bwrap", TENANTRY_SANDBOX_MIN_BOUNDARY="bwrap",
                         TENANTRY_BROWSER_DEV_BACKENDS="1")
        a = await fleet.spawn()
        await fleet.wait_ready(a)
        run_id = await api.start(headers, agent, steps)
        await outside.requests(1)  # A's request is at the outside host, held there
        await fleet.kill(a)  # SIGKILL: no ToolCompleted, no release
        await outside.release()
        b = await fleet.spawn()
        events = await api.events_until_end(headers, run_id, within=180)
        assert not fleet.unexpected_exits(), fleet.tails()
        assert (await api.run(headers, run_id))["status"] == "finished", b.tail()
    return events


def _the_call(events: list[dict[str, Any]], tool: str) -> tuple[dict[str, Any], dict[str, Any]]:
    started = [cast("dict[str, Any]", e["data"]) for e in events if e["type"] == "ToolStarted"
               and cast("dict[str, Any]", e["data"])["tool"] == tool]
    completed = [cast("dict[str, Any]", e["data"]) for e in events
                 if e["type"] == "ToolCompleted"
                 and cast("dict[str, Any]", e["data"])["tool"] == tool]
    assert len(started) == 1 and len(completed) == 1, events
    return started[0], completed[0]


async def test_code_with_egress_killed_mid_post_is_never_repeated(
    api: Api, database_dsn: str, model: FakeModelServer, tmp_path: Path,
) -> None:
    async with outside_host(hold=True) as outside:
        _, h = await api.tenant("Refunds")
        agent = await api.agent(h, tools=["run_python"], sandbox={"egress": [outside.egress]})
        events = await _kill_mid_request(
            api, h, agent, scripted(call("run_python", code=POST.format(url=outside.url,
                                                                         key="")),
                                    answer("{last_tool_result}")),
            outside, model, database_dsn, tmp_path / "workers")
        lines = list(outside.lines)
    started, completed = _the_call(events, "run_python")
    assert started.get("fresh_sandbox") is None  # announced as never to be made again
    assert completed["outcome"] == "unknown" and completed["key"] == started["key"]
    assert refunds(lines) == 1 and await outside.requests(1) == ["-"]
    # The model was told to check before trying again.
    assert "UNKNOWN OUTCOME" in model.requests[-1].json()["messages"][-1]["content"]


async def test_code_that_passes_its_key_on_is_made_again_and_acts_once(
    api: Api, database_dsn: str, model: FakeModelServer, tmp_path: Path,
) -> None:
    async with outside_host(hold=True) as outside:
        _, h = await api.tenant("Refunds")
        agent = await api.agent(h, tools=["run_python"], sandbox={
            "egress": [outside.egress], "code_honours_keys": True})
        events = await _kill_mid_request(
            api, h, agent, scripted(call("run_python", code=POST.format(url=outside.url,
                                                                         key=PASS_KEY)),
                                    answer("{last_tool_result}")),
            outside, model, database_dsn, tmp_path / "workers")
        keys = await outside.requests(2)
    started, completed = _the_call(events, "run_python")
    assert started["fresh_sandbox"] is True
    assert completed.get("outcome") is None and "refunded" in completed["result"]
    # The outside host saw the call's key twice, and refunded once.
    assert keys == [started["key"], started["key"]]


async def test_a_browser_form_submitted_when_the_worker_dies_is_never_submitted_again(
    api: Api, database_dsn: str, model: FakeModelServer, tmp_path: Path,
) -> None:
    async with outside_host(hold=True) as outside:
        _, h = await api.tenant("Refunds")
        agent = await api.agent(h, tools=["browser_open", "browser_click"],
                                sandbox={"egress": [outside.egress]})
        events = await _kill_mid_request(
            api, h, agent, scripted(call("browser_open", url=f"{outside.url}/"),
                                    call("browser_click", text="Refund"),
                                    answer("{last_tool_result}")),
            outside, model, database_dsn, tmp_path / "workers")
        lines = list(outside.lines)
    started, completed = _the_call(events, "browser_click")
    assert completed["outcome"] == "unknown" and completed["key"] == started["key"]
    assert refunds(lines) == 1  # the form was submitted once, ever
    assert "UNKNOWN OUTCOME" in model.requests[-1].json()["messages"][-1]["content"]
