"""Long runs (ADR 0031) end to end — real worker, fake model over HTTP, real MCP server:
summarization keeps every prompt near its threshold, bills its calls and replays exactly;
repeat detection tells a looping model once, then stops the run, in the log, the run's
error, its trace and the worker's metrics."""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson

from tenantry.db import Database
from tenantry.ids import RunId, TenantId
from tenantry.models.scripted import Script, Step, prompt_tokens
from tenantry.models.summaries import SUMMARY_REQUEST
from tenantry.runs import conversation
from tenantry.runs.replay import export_run, replay
from tenantry.telemetry.worker import WorkerMetrics
from tests.support.api import Api
from tests.support.replay import check_and_record
from tests.support.scripts import call, scripted
from tests.support.worker import Fakes, running_worker

AFTER_TOKENS = 600


def _long_script(steps: int) -> Script:
    return Script.of(*(Step.call("echo", text=f"step {i}") for i in range(steps)),
                     Step.answer("finished after {last_tool_result}"))


async def _summarizing_agent(api: Api, fakes: Fakes, script: str, steps: int, keep: int = 2,
                             after_tokens: int = AFTER_TOKENS) -> tuple[str, dict[str, str], str]:
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    fakes.model.scripts[script] = _long_script(steps)
    agent = await api.agent(h, model=f"scripted/{script}", tools=["echo"],
                            limits={"max_steps": steps + 10},
                            summarize={"after_tokens": after_tokens, "keep_last_steps": keep})
    return tenant, h, agent


def _sent(fakes: Fakes) -> list[list[dict[str, Any]]]:
    """The messages of every chat request the fake model received, in order."""
    return [r.json()["messages"] for r in fakes.model.requests
            if r.path.endswith("/chat/completions")]


async def test_a_200_step_run_keeps_its_prompts_under_the_threshold_and_bills_summaries(
    api: Api, fakes: Fakes, worker: object, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    tenant, h, agent = await _summarizing_agent(api, fakes, "long", 200)
    run_id = await api.start(h, agent, "count to 200")
    events = await api.events_until_end(h, run_id, within=240)
    assert events[-1]["type"] == "RunFinished"
    assert events[-1]["data"]["answer"] == "finished after step 199"
    replies = [e["data"] for e in events if e["type"] == "ModelReplied"]
    summaries = [e["data"] for e in events if e["type"] == "Summarized"]
    assert len(replies) == 201 and len(summaries) >= 10

    sent = _sent(fakes)
    assert len(sent) == len(replies) + len(summaries)
    asking = [m for m in sent if m[-1] == {"role": "user", "content": SUMMARY_REQUEST}]
    prompts = [m for m in sent if m not in asking]
    assert len(asking) == len(summaries) and len(prompts) == len(replies)
    # One step: the largest reply with its tool result, as any prompt carried it.
    step = max(conversation.estimate_tokens(m[i:i + 2]) for m in prompts
               for i in range(len(m) - 1) if m[i]["role"] == "assistant")
    request = conversation.estimate_tokens([asking[0][-1]])
    # Every prompt of the run leaves room for the summary request under the threshold; a
    # summarizing prompt (the steps being folded, without the kept ones, plus the request)
    # stays under the threshold plus one step.
    assert max(conversation.estimate_tokens(m) for m in prompts) <= AFTER_TOKENS - request
    assert max(conversation.estimate_tokens(m) for m in asking) <= AFTER_TOKENS + step
    # The provider's own count (ceil(chars / 4)) agrees: never above ours.
    assert max(prompt_tokens(m) for m in sent) <= AFTER_TOKENS + step
    # Without summaries the last prompt would have held all 200 steps: ~10x the threshold.
    assert step * 200 > 9 * AFTER_TOKENS

    # The summary calls are billed: a usage fact each, in the run's usage and cost.
    facts = await admin_conn.fetchval("SELECT count(*) FROM usage_facts")
    assert facts == len(replies) + len(summaries) == len(fakes.model.usage_log)
    run = await api.run(h, run_id)
    billed = replies + summaries
    assert run["steps"] == 201
    assert run["cost_micros"] == sum(d["cost_micros"] for d in billed) > sum(
        d["cost_micros"] for d in replies)
    assert run["usage"] == {
        "input_tokens": sum(d["usage"]["input_tokens"] for d in billed),
        "output_tokens": sum(d["usage"]["output_tokens"] for d in billed)}
    trace = (await api.client.get(f"/v1/runs/{run_id}/trace", headers=h)).json()
    assert [s["seq"] for s in trace["summaries"]] == [
        e["seq"] for e in events if e["type"] == "Summarized"]
    assert trace["totals"]["cost_micros"] == run["cost_micros"]
    assert sum(1 for s in trace["spans"] if s["label"].startswith("summary by ")) == len(
        summaries)

    record = await export_run(db, TenantId(tenant), RunId.parse(run_id))
    assert replay(record) == []


async def test_a_summarized_run_replays_and_a_changed_summary_prompt_is_a_difference(
    api: Api, fakes: Fakes, worker: object, db: Database,
) -> None:
    tenant, h, agent = await _summarizing_agent(api, fakes, "short", 20, keep=1,
                                                after_tokens=300)
    run_id = await api.start(h, agent, "count to 20")
    events = await api.events_until_end(h, run_id, within=60)
    assert events[-1]["type"] == "RunFinished"
    # Two summaries at least: the second folds the first in.
    assert sum(e["type"] == "Summarized" for e in events) >= 2
    await check_and_record(db, tenant, run_id, "summarized")
    record = await export_run(db, TenantId(tenant), RunId.parse(run_id))
    # A summary taken somewhere else is a different decision.
    data = record.to_json()
    summarized = next(e for e in data["events"] if e["type"] == "Summarized")
    summarized["data"]["upto_seq"] -= 2
    differences = replay(type(record).from_json(orjson.loads(orjson.dumps(data))))
    assert differences and differences[0].seq == summarized["seq"]
    assert "Summarize(upto_seq=" in differences[0].recorded


async def test_a_summary_model_writes_summaries_without_moving_the_runs_model(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    fakes.model.scripts["own"] = _long_script(12)
    agent = await api.agent(h, model="scripted/own", tools=["echo"], summarize={
        "after_tokens": 300, "keep_last_steps": 0, "model": "scripted/echo"})
    run_id = await api.start(h, agent, "count to 12")
    events = await api.events_until_end(h, run_id, within=60)
    assert events[-1]["data"]["answer"] == "finished after step 11"
    summaries = [e for e in events if e["type"] == "Summarized"]
    assert summaries and all(e["data"]["model"] == "scripted/echo" for e in summaries)
    # keep_last_steps 0: each summary covers the log up to the decision that asked for it.
    assert all(e["data"]["upto_seq"] == e["data"]["basis_seq"] for e in summaries)
    assert {e["data"]["model"] for e in events if e["type"] == "ModelReplied"} == {"scripted/own"}
    assert not any(e["type"] in ("ModelFallback", "ModelRerouted") for e in events)
    asked = [r.json() for r in fakes.model.requests if r.path.endswith("/chat/completions")]
    assert [b["model"] for b in asked if b["messages"][-1]["content"] == SUMMARY_REQUEST] == [
        "scripted/echo"] * len(summaries)
    assert all("tools" not in b or not b["tools"] for b in asked
               if b["model"] == "scripted/echo")


async def test_a_looping_agent_is_told_once_then_stopped_for_repeating(
    api: Api, fakes: Fakes, database_dsn: str, db: Database,
) -> None:
    metrics = WorkerMetrics()
    async with running_worker(database_dsn, fakes.model.base_url, metrics=metrics):
        r = await api.client.post("/admin/v1/tenants", json={"name": "Loop", "plan": "gold"},
                                  headers=api.operator)
        tenant = r.json()["tenant_id"]
        key = (await api.client.post(f"/admin/v1/tenants/{tenant}/api-keys",
                                     headers=api.operator)).json()["api_key"]
        h = {"Authorization": f"Bearer {key}"}
        await api.tool_server(tenant, fakes.mcp.url)
        agent = await api.agent(h, tools=["echo"])  # repeat_limit: the default, 3
        run_id = await api.start(h, agent, scripted(*[call("echo", text="again")] * 10))
        events = await api.events_until_end(h, run_id)

    assert [e["type"] for e in events] == [
        "RunCreated", "ModelReplied", "ToolCompleted", "ModelReplied", "ToolCompleted",
        "ModelReplied", "ToolCompleted", "ModelReplied", "BudgetStopped"]
    told = events[6]["data"]
    assert "arguments" not in told and told["error"].startswith(
        'not run: echo was called with the same arguments {"text":"again"} 3 times in a row')
    assert [c.tool for c in fakes.mcp.calls] == ["echo", "echo"]  # the third was not made
    assert events[-1]["data"] == {"limit": "repeat_limit", "used": 4, "max": 3,
                                  "reason": "repeating", "basis_seq": 8}
    run = await api.run(h, run_id)
    assert run["status"] == "failed"
    assert run["error"] == {
        "type": "budget_exhausted", "limit": "repeat_limit", "reason": "repeating",
        "message": "stopped for repeating: the model repeated itself 4 times in a row after "
                   "it was told (the agent's repeat_limit is 3)"}
    trace = (await api.client.get(f"/v1/runs/{run_id}/trace", headers=h)).json()
    assert trace["stopped"] == {"seq": 9, "limit": "repeat_limit", "used": 4, "max": 3,
                                "reason": "repeating"}
    assert metrics.repeats.series() == {("gold", "told"): 1.0, ("gold", "stopped"): 1.0}
    assert metrics.budget_refusals.value("gold", "repeat_limit") == 1
    await check_and_record(db, tenant, run_id, "repeat-stopped")


async def test_repeat_limit_and_summarize_are_checked_at_the_edge(api: Api) -> None:
    _, h = await api.tenant()
    base = {"name": "a", "model": "scripted", "system_prompt": "s"}
    for bad in ({"limits": {"repeat_limit": 1}}, {"limits": {"repeat_limit": 101}},
                {"summarize": {"after_tokens": 10}},
                {"summarize": {"after_tokens": 1000, "keep_last_steps": -1}},
                {"summarize": {"after_tokens": 1000, "model": ""}},
                {"summarize": {"keep_last_steps": 2}}):
        r = await api.client.post("/v1/agents", json={**base, **bad}, headers=h)
        assert r.status_code == 400, (bad, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["type"] == "validation_error"
    r = await api.client.post("/v1/agents", headers=h, json={
        **base, "limits": {"repeat_limit": 0},
        "summarize": {"after_tokens": 8000, "model": "scripted/echo"}})
    assert r.status_code == 201, r.text
    assert r.json()["limits"]["repeat_limit"] == 0
    assert r.json()["summarize"] == {"after_tokens": 8000, "keep_last_steps": 2,
                                     "model": "scripted/echo"}
    plain = (await api.client.post("/v1/agents", json={**base, "name": "b"}, headers=h)).json()
    assert plain["limits"]["repeat_limit"] == 3 and plain["summarize"] is None
