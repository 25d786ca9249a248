"""The run engine end to end: real worker loop, real fake model over HTTP, real MCP server."""

from __future__ import annotations

import asyncio

import asyncpg

from tenantry.db import Database
from tests.support.api import Api
from tests.support.replay import check_and_record
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes


async def _tenant_with_tools(
    api: Api, fakes: Fakes, **spec: object
) -> tuple[str, dict[str, str], str]:
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    spec.setdefault("tools", ["effect", "echo", "fail", "slow", "add"])
    agent = await api.agent(h, **spec)
    return tenant, h, agent


async def test_run_with_tool_calls_finishes_with_keys_from_the_log(
    api: Api, fakes: Fakes, worker: object
) -> None:
    _, h, agent = await _tenant_with_tools(api, fakes)
    run_id = await api.start(h, agent, scripted(
        call("effect", note="{input}"), call("add", a=2, b=3),
        answer("Done: {tool_results}"), text="refund-7"))
    events = await api.events_until_end(h, run_id)
    assert [e["type"] for e in events] == [
        "RunCreated", "ModelReplied", "ToolCompleted", "ModelReplied", "ToolCompleted",
        "ModelReplied", "RunFinished"]
    first_tool = events[2]["data"]
    assert first_tool["key"] == f"{run_id}:2:0"  # {run_id}:{reply_seq}:{call_index}
    assert first_tool["tool"] == "effect" and first_tool["arguments"] == {"note": "refund-7"}
    assert first_tool["result"] == "applied refund-7"
    # The MCP server received the same key in _meta and in the Idempotency-Key header.
    record = next(c for c in fakes.mcp.calls if c.tool == "effect")
    assert record.meta_key == record.header_key == f"{run_id}:2:0"
    assert fakes.mcp.key_counts()[f"{run_id}:2:0"].effects == 1
    run = await api.run(h, run_id)
    assert run["status"] == "finished"
    assert run["answer"] == "Done: applied refund-7\n5"
    # Usage and cost on the run are the sums of what was recorded with each reply.
    replies = [e["data"] for e in events if e["type"] == "ModelReplied"]
    assert run["steps"] == 3
    assert run["usage"] == {
        "input_tokens": sum(r["usage"]["input_tokens"] for r in replies),
        "output_tokens": sum(r["usage"]["output_tokens"] for r in replies)}
    assert run["cost_micros"] == sum(r["cost_micros"] for r in replies) > 0


async def test_model_reply_is_saved_before_the_tool_runs(
    api: Api, fakes: Fakes, worker: object, admin_conn: asyncpg.Connection
) -> None:
    _, h, agent = await _tenant_with_tools(api, fakes)
    run_id = await api.start(h, agent, scripted(call("slow", seconds=1.0), answer("ok")))
    async with api.client.stream("GET", f"/v1/runs/{run_id}/events", headers=h) as r:
        async for line in r.aiter_lines():
            if line.startswith("event: ModelReplied"):
                break
    # While the tool is still running, the reply that asked for it is already in the log.
    types = [t["type"] for t in await admin_conn.fetch("SELECT type FROM run_events ORDER BY seq")]
    assert types == ["RunCreated", "ModelReplied"]
    await api.events_until_end(h, run_id)


async def test_malformed_calls_become_tool_errors_and_the_run_carries_on(
    api: Api, fakes: Fakes, worker: object
) -> None:
    _, h, agent = await _tenant_with_tools(api, fakes)
    script = scripted(
        {"tool_calls": [{"name": "", "arguments": {}}]},
        {"tool_calls": [{"name": "echo", "arguments": "{not json"}]},
        {"tool_calls": [{"name": "echo", "arguments": "[1, 2]"}]},
        call("not_a_tool", x=1), call("fail", message="boom"), answer("recovered"))
    run_id = await api.start(h, agent, script)
    events = await api.events_until_end(h, run_id)
    errors = [e["data"]["error"] for e in events if e["type"] == "ToolCompleted"]
    assert errors[0] == "the tool call has no tool name"
    assert "not valid JSON" in errors[1]
    assert errors[2] == "the arguments must be a JSON object"
    assert "not available to this agent" in errors[3]
    assert "boom" in errors[4]
    assert (await api.run(h, run_id))["answer"] == "recovered"
    assert [c.tool for c in fakes.mcp.calls] == ["fail"]  # nothing invalid reached a server


async def test_empty_reply_fails_the_run_not_ours(api: Api, fakes: Fakes, worker: object) -> None:
    _, h, agent = await _tenant_with_tools(api, fakes)
    run_id = await api.start(h, agent, scripted(answer("")))
    events = await api.events_until_end(h, run_id)
    assert events[-1]["type"] == "RunFailed"
    assert events[-1]["data"] == {"error": "the model returned an empty reply", "ours": False,
                                  "basis_seq": 2}
    run = await api.run(h, run_id)
    assert run["status"] == "failed"
    assert run["error"] == {"message": "the model returned an empty reply", "ours": False}


async def test_max_steps_stops_between_steps(api: Api, fakes: Fakes, worker: object) -> None:
    _, h, agent = await _tenant_with_tools(api, fakes, limits={"max_steps": 2})
    run_id = await api.start(h, agent, scripted(*[call("echo", text="again")] * 10))
    events = await api.events_until_end(h, run_id)
    assert [e["type"] for e in events] == [
        "RunCreated", "ModelReplied", "ToolCompleted", "ModelReplied", "ToolCompleted",
        "BudgetStopped"]
    assert events[-1]["data"] == {"limit": "max_steps", "used": 2, "max": 2, "basis_seq": 5}
    run = await api.run(h, run_id)
    assert run["status"] == "failed" and run["error"]["type"] == "budget_exhausted"


async def test_cost_and_token_limits(api: Api, fakes: Fakes, worker: object) -> None:
    _, h, agent = await _tenant_with_tools(api, fakes, limits={"max_cost_micros": 1})
    run_id = await api.start(h, agent, scripted(call("echo", text="x"), answer("never")))
    events = await api.events_until_end(h, run_id)
    assert events[-1]["type"] == "BudgetStopped"
    assert events[-1]["data"]["limit"] == "max_cost_micros"
    _, h2, agent2 = await _tenant_with_tools(api, fakes, limits={"max_tokens": 5})
    run_id = await api.start(h2, agent2, scripted(call("echo", text="x"), answer("never")))
    events = await api.events_until_end(h2, run_id)
    assert events[-1]["data"]["limit"] == "max_tokens"


async def test_cancel_lets_the_tool_call_in_flight_finish(
    api: Api, fakes: Fakes, worker: object, db: Database
) -> None:
    tenant, h, agent = await _tenant_with_tools(api, fakes)
    run_id = await api.start(h, agent, scripted(call("slow", seconds=1.0), answer("too late")))
    async with api.client.stream("GET", f"/v1/runs/{run_id}/events", headers=h) as r:
        async for line in r.aiter_lines():
            if line.startswith("event: ModelReplied"):
                break
    r = await api.client.post(f"/v1/runs/{run_id}/cancel", headers=h)
    assert r.json()["status"] == "running" and r.json()["cancel_requested"] is True
    events = await api.events_until_end(h, run_id)
    assert [e["type"] for e in events] == [
        "RunCreated", "ModelReplied", "CancelRequested", "ToolCompleted", "RunCancelled"]
    assert events[3]["data"]["result"].startswith("slept")
    assert (await api.run(h, run_id))["status"] == "cancelled"
    # The cancel arrived while the tool ran; replay still sees the same decisions.
    await check_and_record(db, tenant, run_id, "cancel-during-tool-call")


async def test_worker_holds_many_runs_at_once(api: Api, fakes: Fakes, worker: object) -> None:
    _, h, agent = await _tenant_with_tools(api, fakes)
    # No tool call answers until all 20 have arrived: the 20 runs are in flight in the one
    # worker at the same moment by arrangement, whatever the machine's pace.
    fakes.mcp.hold_slow_calls()
    runs = [await api.start(h, agent, scripted(call("slow", seconds=0.1), answer(f"r{i}")))
            for i in range(20)]

    async def all_in_flight() -> bool:
        return sum(c.tool == "slow" for c in fakes.mcp.calls) == 20

    await until(all_in_flight, "20 slow calls in flight at once", 120,
                lambda: f"{sum(c.tool == 'slow' for c in fakes.mcp.calls)} arrived")
    fakes.mcp.release_slow_calls()
    results = await asyncio.gather(*(api.events_until_end(h, r) for r in runs))
    assert all(events[-1]["type"] == "RunFinished" for events in results)


async def test_an_unavailable_model_parks_the_run_instead_of_failing_it(
    api: Api, fakes: Fakes, worker: object
) -> None:
    _, h, agent = await _tenant_with_tools(api, fakes)
    fakes.model.fail_next(3, status=503)  # every attempt of the first step fails
    run_id = await api.start(h, agent, scripted(answer("made it")))
    events = await api.events_until_end(h, run_id)
    assert [e["type"] for e in events] == ["RunCreated", "RunParked", "RunResumed",
                                           "ModelReplied", "RunFinished"]
    # The provider's answer (its status, its body) is in our log, not the tenant's events.
    reason = events[1]["data"]["reason"]
    assert reason.startswith("model unavailable: no account could serve scripted now (err_")
    assert "503" not in reason and events[1]["data"]["error_id"] in reason
    assert (await api.run(h, run_id))["answer"] == "made it"
