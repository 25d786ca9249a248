"""Child runs (ADR 0032): an agent starts other agents through its `start_agent` tool.
Each child is its own run; the parent waits for it without holding a slot and resumes with
its answer (or its failure) as the tool result."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import asyncpg
import orjson

from tenantry.api.console import epoch, session
from tenantry.db import Database
from tests.support.api import OPERATOR_TOKEN, TEST_MASTER_KEY, Api
from tests.support.harness import WorkerFleet
from tests.support.replay import check_and_record
from tests.support.scripts import answer, scripted
from tests.support.waiting import until
from tests.support.worker import TEST_ENGINE, Fakes, running_worker


def start(agent: str, *steps: dict[str, object]) -> dict[str, object]:
    """One start_agent call whose child carries its own script (as its input text). The
    child's script holds no placeholders: the parent's script fills those in its own
    call's arguments."""
    return {"name": "start_agent",
            "arguments": {"agent": agent, "input": orjson.dumps(scripted(*steps)).decode()}}


async def _children(api: Api, h: dict[str, str], run_id: str) -> list[dict[str, object]]:
    r = await api.client.get(f"/v1/runs/{run_id}/children", headers=h)
    assert r.status_code == 200, r.text
    data: list[dict[str, object]] = r.json()["data"]
    return data


async def test_a_parent_starts_two_children_waits_without_a_slot_and_gets_both_answers(
    api: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection, db: Database
) -> None:
    tenant, h = await api.tenant()
    kid = await api.agent(h, name="researcher")
    lead = await api.agent(h, name="lead", children=[{"agent_id": kid}])
    # One slot: the parent can only finish if it gives its slot back while it waits.
    async with running_worker(database_dsn, fakes.model.base_url, concurrency=1):
        run_id = await api.start(h, lead, scripted(
            {"tool_calls": [start("researcher", answer("north is cold")),
                            start("researcher", answer("south is warm"))]},
            answer("both: {tool_results}")))
        events = await api.events_until_end(h, run_id)
    assert [e["type"] for e in events] == [
        "RunCreated", "ModelReplied", "ChildRunStarted", "ChildRunStarted", "ChildRunEnded",
        "ToolCompleted", "ChildRunEnded", "ToolCompleted", "ModelReplied", "RunFinished"]
    run = await api.run(h, run_id)
    assert run["status"] == "finished"
    assert "north is cold" in str(run["answer"]) and "south is warm" in str(run["answer"])
    # Both children started before the parent waited: they were queued side by side.
    children = await _children(api, h, run_id)
    assert [(c["status"], c["answer"], c["parent_run_id"], c["agent_id"]) for c in children] == [
        ("finished", "north is cold", run_id, kid), ("finished", "south is warm", run_id, kid)]
    started = [e["data"] for e in events if e["type"] == "ChildRunStarted"]
    assert [s["run_id"] for s in started] == [c["run_id"] for c in children]
    # Each child's key is its parent's call key; its priority is the parent's.
    keys = await admin_conn.fetch(
        "SELECT idempotency_key, priority FROM runs WHERE parent_run_id IS NOT NULL "
        "ORDER BY run_id")
    assert [tuple(k) for k in keys] == [(f"{run_id}:2:0", "interactive"),
                                        (f"{run_id}:2:1", "interactive")]
    # The trace links both ways.
    trace = (await api.client.get(f"/v1/runs/{run_id}/trace", headers=h)).json()
    assert [(c["run_id"], c["status"]) for c in trace["children"]] == [
        (c["run_id"], "finished") for c in children]
    child_trace = (await api.client.get(f"/v1/runs/{children[0]['run_id']}/trace",
                                        headers=h)).json()
    assert child_trace["parent_run_id"] == run_id and child_trace["children"] == []
    # So does the operator console's run view.
    cookie, _ = session.issue(OPERATOR_TOKEN, epoch=epoch.FIRST)
    console = {"Cookie": f"{session.SESSION_COOKIE}={cookie}"}
    page = (await api.client.get(f"/console/runs/{tenant}/{run_id}/live", headers=console)).text
    for child in children:
        assert f'href="/console/runs/{tenant}/{child["run_id"]}"' in page
    page = (await api.client.get(f"/console/runs/{tenant}/{children[0]['run_id']}/live",
                                 headers=console)).text
    assert f'href="/console/runs/{tenant}/{run_id}"' in page
    await check_and_record(db, tenant, run_id, "child-runs")


async def test_cancelling_a_parent_cancels_its_children(
    api: Api, fakes: Fakes, worker: object, admin_conn: asyncpg.Connection
) -> None:
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    # The child waits for a person's approval: it is waiting, like its parent.
    kid = await api.agent(h, name="refunder", tools=["effect"], needs_approval=["effect"])
    lead = await api.agent(h, name="lead", children=[{"agent_id": kid}])
    run_id = await api.start(h, lead, scripted(
        {"tool_calls": [start("refunder", {"tool_calls": [
            {"name": "effect", "arguments": {"note": "refund"}}]}, answer("done"))]},
        answer("{last_tool_result}")))
    await until(lambda: _approvals_pending(api, h), "the child to wait for its approval", 30)
    r = await api.client.post(f"/v1/runs/{run_id}/cancel", headers=h)
    assert r.status_code == 200, r.text
    events = await api.events_until_end(h, run_id)
    assert events[-1]["type"] == "RunCancelled"
    children = await _children(api, h, run_id)
    assert [c["status"] for c in children] == ["cancelled"]
    assert fakes.mcp.calls == []  # the child's call was never made
    approvals = await admin_conn.fetch("SELECT status FROM approvals")
    assert [a["status"] for a in approvals] == ["cancelled"]


async def _approvals_pending(api: Api, h: dict[str, str]) -> bool:
    page = (await api.client.get("/v1/approvals", params={"status": "pending"},
                                 headers=h)).json()
    return bool(page["data"])


async def test_a_childs_spend_counts_against_the_parents_max_cost(
    api: Api, fakes: Fakes, worker: object
) -> None:
    _, h = await api.tenant()
    kid = await api.agent(h, name="spender")  # its own limit: the default $5
    lead = await api.agent(h, name="lead", children=[{"agent_id": kid}],
                           limits={"max_cost_micros": 5_000})
    # The scripted model costs $1 per million input tokens: one child step of 20,000
    # prompt tokens spends 20,000 micro-dollars, past what the parent had left.
    run_id = await api.start(h, lead, scripted(
        {"tool_calls": [start("spender",
                              {"tool_calls": [{"name": "nothing", "arguments": {}}],
                               "usage": {"prompt_tokens": 20_000}},
                              answer("never reached"))]},
        answer("never reached either")))
    events = await api.events_until_end(h, run_id)
    started = next(e["data"] for e in events if e["type"] == "ChildRunStarted")
    own = next(e["data"]["cost_micros"] for e in events if e["type"] == "ModelReplied")
    # The child was capped at what the parent had left, and stopped there.
    assert started["cost_cap_micros"] == 5_000 - own
    child = (await _children(api, h, run_id))[0]
    child_events = await api.events_until_end(h, str(child["run_id"]))
    stop = child_events[-1]
    assert stop["type"] == "BudgetStopped"
    assert stop["data"]["limit"] == "max_cost_micros" and stop["data"]["max"] == 5_000 - own
    # The parent heard of it as the call's error, then stopped at its own limit.
    ended = next(e["data"] for e in events if e["type"] == "ChildRunEnded")
    assert ended["status"] == "failed" and ended["cost_micros"] == child["cost_micros"]
    assert events[-1]["type"] == "BudgetStopped"
    assert events[-1]["data"] == {"limit": "max_cost_micros", "max": 5_000,
                                  "used": own + child["cost_micros"],
                                  "basis_seq": events[-1]["data"]["basis_seq"]}
    assert (await api.run(h, run_id))["status"] == "failed"


async def test_depth_is_bounded_with_a_tool_error(
    api: Api, fakes: Fakes, database_dsn: str
) -> None:
    _, h = await api.tenant()
    first = await api.agent(h, name="fractal")
    # Version 2 may start the agent itself (its live version, once promoted: this one).
    r = await api.client.post(f"/v1/agents/{first}/versions", headers=h, json={
        "model": "scripted", "system_prompt": "Delegate.", "children": [{"agent_id": first}]})
    assert r.status_code == 201, r.text
    r = await api.client.post(f"/v1/agents/{first}/promote", headers=h, json={"version": 2})
    assert r.status_code == 200, r.text
    grandchild = start("fractal", answer("too deep to be reached"))
    settings = dataclasses.replace(TEST_ENGINE, child_max_depth=1)
    async with running_worker(database_dsn, fakes.model.base_url, settings=settings):
        run_id = await api.start(h, first, scripted(
            {"tool_calls": [start("fractal", {"tool_calls": [grandchild]},
                                  answer("the child carried on"))]},
            answer("{last_tool_result}")))
        await api.events_until_end(h, run_id)
        [child] = await _children(api, h, run_id)
        child_events = await api.events_until_end(h, str(child["run_id"]))
    refused = next(e["data"] for e in child_events if e["type"] == "ToolCompleted")
    assert refused["tool"] == "start_agent" and "may go 1 deep" in refused["error"]
    assert await _children(api, h, str(child["run_id"])) == []
    # The child was told, carried on, and its parent got its answer.
    assert (await api.run(h, run_id))["answer"] == "the child carried on"


async def test_children_must_be_the_tenants_own_agents(api: Api) -> None:
    _, h = await api.tenant("Acme")
    _, other = await api.tenant("Globex")
    theirs = await api.agent(other, name="theirs")
    # Malformed: 400.
    for body in ({"children": [{"agent_id": theirs, "version": 0}]},
                 {"children": [{"agent_id": theirs}, {"agent_id": theirs}]},
                 {"tools": ["start_agent"]}):
        r = await api.client.post("/v1/agents", headers=h, json={
            "name": "lead", "model": "scripted", "system_prompt": "x", **body})
        assert r.status_code == 400, r.text
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["type"] == "validation_error"
    # Well formed, naming no agent of this tenant (another's, or an id that is none): 409,
    # with the field, as any body naming what does not exist; nothing is written.
    for body in ({"children": [{"agent_id": theirs}]},
                 {"children": [{"agent_id": "agt_not-an-id"}]}):
        r = await api.client.post("/v1/agents", headers=h, json={
            "name": "lead", "model": "scripted", "system_prompt": "x", **body})
        assert r.status_code == 409, r.text
        assert r.headers["content-type"] == "application/problem+json"
        assert (r.json()["type"], r.json()["field"]) == ("conflict", "children[0]")
    assert (await api.client.get("/v1/agents", headers=h)).json()["data"] == []

    # Another tenant's run has no children to list: it does not exist for this one.
    run_id = await api.start(other, theirs, "hello")
    r = await api.client.get(f"/v1/runs/{run_id}/children", headers=h)
    assert r.status_code == 404 and r.json()["type"] == "not_found"


async def test_a_parent_whose_worker_is_killed_after_asking_never_starts_a_second_child(
    api: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection, tmp_path: Path
) -> None:
    _, h = await api.tenant()
    kid = await api.agent(h, name="slowpoke")
    lead = await api.agent(h, name="lead", children=[{"agent_id": kid}])
    # At the production lease: a killed worker's runs move at the next claim (ADR 0018).
    async with WorkerFleet(dsn=database_dsn, model_url=fakes.model.base_url,
                           log_dir=tmp_path / "workers", size=1, concurrency=4,
                           lease_seconds=None, master_key=TEST_MASTER_KEY.encoded()) as fleet:
        await fleet.start()
        run_id = await api.start(h, lead, scripted(
            {"tool_calls": [start("slowpoke", {"text": "slow and sure", "delay_ms": 1500})]},
            answer("{last_tool_result}")))
        await until(lambda: _logged(admin_conn, run_id, "ChildRunStarted"),
                    "the parent to start its child", 60)
        await fleet.kill(fleet.live[0])  # SIGKILL, mid-way through the child's model call
        replacement = await fleet.spawn()
        await fleet.wait_ready(replacement)
        events = await api.events_until_end(h, run_id, within=90)
    assert events[-1]["type"] == "RunFinished"
    assert (await api.run(h, run_id))["answer"] == "slow and sure"
    children = await admin_conn.fetch("SELECT status FROM runs WHERE parent_run_id IS NOT NULL")
    assert [c["status"] for c in children] == ["finished"]
    assert [e["type"] for e in events].count("ChildRunStarted") == 1


async def _logged(conn: asyncpg.Connection, run_id: str, event_type: str) -> bool:
    found = await conn.fetchval(
        "SELECT count(*) FROM run_events e JOIN runs r USING (tenant_id, run_id) "
        "WHERE 'run_' || replace(r.run_id::text, '-', '') = $1 AND e.type = $2",
        run_id, event_type)
    return bool(found)
