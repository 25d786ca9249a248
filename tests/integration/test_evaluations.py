"""Agent test sets, evaluations and promotion (ADR 0034), end to end on a real
platform: the API, a worker, the fake model server (whose scripted replies may quote the
system prompt, as a real model's would change with it) and a real MCP tool server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
import pytest

from tests.support.api import Api, serving_api
from tests.support.api_process import api_process
from tests.support.evaluations import (
    POLICY_CASE,
    POLICY_PROMPT,
    STATUS_CASE,
    agent_with_two_versions,
    evaluation_done,
)
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes


async def test_a_prompt_change_fails_exactly_the_case_it_breaks_and_calls_no_tool(
    api: Api, fakes: Fakes, worker: object, admin_conn: asyncpg.Connection,
) -> None:
    _, h, agent = await agent_with_two_versions(api, fakes)
    r = await api.client.post(f"/v1/agents/{agent}/test-sets", headers=h, json={
        "name": "support", "cases": [POLICY_CASE, STATUS_CASE],
        "stubs": {"effect": "shipped (stub)"}})
    assert r.status_code == 201, r.text
    test_set = r.json()
    assert test_set["tool_results"] == "recorded" and len(test_set["cases"]) == 2
    calls_before = len(fakes.mcp.calls)

    r = await api.client.post(f"/v1/agents/{agent}/evaluations", headers=h, json={
        "test_set_id": test_set["test_set_id"], "candidate": {"version": 2}})
    assert r.status_code == 201, r.text
    started = r.json()
    assert (started["baseline"], started["candidate"]) == (
        {"version": 1, "model": None}, {"version": 2, "model": None})
    report = await evaluation_done(api, h, agent, started["evaluation_id"])

    policy, status = report["cases"]
    # Exactly the case the prompt change breaks fails, with both answers side by side.
    assert policy["baseline"]["passed"] is True and policy["candidate"]["passed"] is False
    assert "refund policy" in policy["baseline"]["answer"]
    assert "refund policy" not in policy["candidate"]["answer"]
    assert "order-7 is shipped" in policy["candidate"]["answer"]
    assert "passed" in policy["differences"] and "answer" in policy["differences"]
    failed = [c for c in policy["candidate"]["checks"] if not c["passed"]]
    assert [c["check"] for c in failed] == ["answer_contains"]
    assert status["baseline"]["passed"] is True and status["candidate"]["passed"] is True
    assert status["differences"] == []
    # Tool calls were answered by the recording and the stub: the server saw nothing.
    assert [c["outcome"] for c in policy["baseline"]["tool_calls"]] == ["recorded"]
    assert [c["outcome"] for c in status["candidate"]["tool_calls"]] == ["stub"]
    assert status["candidate"]["tool_calls"][0]["arguments"] == {"note": "order-8"}
    assert len(fakes.mcp.calls) == calls_before
    totals = report["totals"]
    assert (totals["baseline"]["passed"], totals["candidate"]["passed"],
            totals["candidate"]["failed"]) == (2, 1, 1)
    assert totals["candidate"]["steps"] == 4 and totals["candidate"]["cost_micros"] >= 0
    assert report["passed"] is False
    # Ordinary runs of the tenant, at batch priority, each on its side's version.
    for case in report["cases"]:
        for side, version in (("baseline", 1), ("candidate", 2)):
            run = await api.run(h, case[side]["run_id"])
            assert (run["priority"], run["version"]) == ("batch", version)

    # A failed evaluation cannot be the evidence of a promotion; the tenant may still decide.
    r = await api.client.post(f"/v1/agents/{agent}/promote", headers=h, json={
        "version": 2, "evaluation_id": started["evaluation_id"]})
    assert r.status_code == 409 and "failed 1 case" in r.json()["detail"], r.text
    assert (await api.client.get(f"/v1/agents/{agent}", headers=h)).json()["live_version"] == 1


async def test_live_version_changes_only_on_promote_and_runs_without_a_version_use_it(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    _, h, agent = await agent_with_two_versions(api, fakes)
    shown = (await api.client.get(f"/v1/agents/{agent}", headers=h)).json()
    assert (shown["version"], shown["live_version"]) == (2, 1)  # published, not live
    listed = (await api.client.get("/v1/agents", headers=h)).json()["data"]
    assert [(a["latest_version"], a["live_version"]) for a in listed] == [(2, 1)]
    run = await api.start(h, agent, scripted(answer("{system}")))
    await api.events_until_end(h, run)
    first = await api.run(h, run)
    assert first["version"] == 1 and POLICY_PROMPT in str(first["answer"])

    r = await api.client.post(f"/v1/agents/{agent}/promote", headers=h, json={"version": 2})
    assert r.status_code == 200, r.text
    promoted = r.json()
    assert (promoted["version"], promoted["previous_version"]) == (2, 1)
    assert promoted["promoted_by"].startswith("key_") and promoted["evaluation_id"] is None
    run = await api.start(h, agent, scripted(answer("{system}")))
    await api.events_until_end(h, run)
    assert (await api.run(h, run))["version"] == 2
    history = (await api.client.get(f"/v1/agents/{agent}/promotions", headers=h)).json()
    assert [(p["version"], p["promoted_by"]) for p in history["data"]] == [
        (2, promoted["promoted_by"])]
    # A version that does not exist (yet) cannot be promoted: the agent's state, 409.
    r = await api.client.post(f"/v1/agents/{agent}/promote", headers=h, json={"version": 3})
    assert r.status_code == 409 and r.headers["content-type"] == "application/problem+json"
    assert (r.json()["type"], r.json()["field"]) == ("conflict", "version")


async def test_a_passed_evaluation_promotes_and_a_case_made_from_a_run_replays_its_tools(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    _, h, agent = await agent_with_two_versions(api, fakes)
    # A real run of the live version: the tool server is really called once.
    source = await api.start(h, agent, scripted(call("effect", note="order-9"),
                                                answer("Done: {last_tool_result}")))
    await api.events_until_end(h, source)
    calls = len(fakes.mcp.calls)
    assert calls >= 1
    r = await api.client.post(f"/v1/agents/{agent}/test-sets", headers=h, json={
        "name": "from production", "cases": [{"from_run": source,
                                              "checks": {"answer_contains": ["order-9"]}}]})
    assert r.status_code == 201, r.text
    case = r.json()["cases"][0]
    assert case["from_run"] == source and case["input"]["script"]
    assert [(c["tool"], c["arguments"]) for c in case["recorded"]] == [
        ("effect", {"note": "order-9"})]

    r = await api.client.post(f"/v1/agents/{agent}/evaluations", headers=h, json={
        "test_set_id": r.json()["test_set_id"], "candidate": {"version": 2}})
    evaluation = r.json()["evaluation_id"]
    report = await evaluation_done(api, h, agent, evaluation)
    assert report["passed"] is True, report
    only = report["cases"][0]
    recorded = case["recorded"][0]["result"]
    assert recorded in only["baseline"]["answer"] and recorded in only["candidate"]["answer"]
    assert len(fakes.mcp.calls) == calls  # the recording answered: no second effect

    r = await api.client.post(f"/v1/agents/{agent}/promote", headers=h, json={
        "version": 2, "evaluation_id": evaluation})
    assert r.status_code == 200, r.text
    assert r.json()["evaluation_id"] == evaluation
    # An evaluation is evidence for the version it evaluated, not another.
    r = await api.client.post(f"/v1/agents/{agent}/promote", headers=h, json={
        "version": 1, "evaluation_id": evaluation})
    assert r.status_code == 409, r.text


async def test_live_tool_results_call_servers_that_honour_keys_and_a_model_candidate(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    _, h, agent = await agent_with_two_versions(api, fakes)
    # A model the platform has never heard of is served once the operator prices it.
    r = await api.client.put("/admin/v1/prices/scripted-next", headers=api.operator, json={
        "input_per_m": 1_000_000, "cached_input_per_m": 100_000, "output_per_m": 2_000_000})
    assert r.status_code in (200, 201), r.text
    r = await api.client.post(f"/v1/agents/{agent}/test-sets", headers=h, json={
        "name": "live", "tool_results": "live", "cases": [STATUS_CASE]})
    calls = len(fakes.mcp.calls)
    r = await api.client.post(f"/v1/agents/{agent}/evaluations", headers=h, json={
        "test_set_id": r.json()["test_set_id"], "candidate": {"model": "scripted-next"}})
    assert r.status_code == 201, r.text
    assert r.json()["candidate"] == {"version": 1, "model": "scripted-next"}
    report = await evaluation_done(api, h, agent, r.json()["evaluation_id"])
    only = report["cases"][0]
    assert only["candidate"]["status"] == "finished", only["candidate"]["error"]
    assert [c["outcome"] for c in only["candidate"]["tool_calls"]] == [None]
    assert len(fakes.mcp.calls) == calls + 2  # one real call per side (keys honoured)
    events = await api.events_until_end(h, only["candidate"]["run_id"])
    models = {e["data"]["model"] for e in events if e["type"] == "ModelReplied"}
    assert models == {"scripted-next"}  # the candidate's model, in place of the version's


async def test_another_tenants_test_sets_and_evaluations_are_not_found(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    _, h, agent = await agent_with_two_versions(api, fakes)
    r = await api.client.post(f"/v1/agents/{agent}/test-sets", headers=h, json={
        "name": "mine", "cases": [STATUS_CASE], "stubs": {"effect": "shipped"}})
    test_set = r.json()["test_set_id"]
    r = await api.client.post(f"/v1/agents/{agent}/evaluations", headers=h, json={
        "test_set_id": test_set, "candidate": {"version": 2}})
    evaluation = r.json()["evaluation_id"]
    _, other = await api.tenant("Other")
    for method, path, body in (
            ("GET", f"/v1/agents/{agent}/test-sets", None),
            ("GET", f"/v1/agents/{agent}/test-sets/{test_set}", None),
            ("POST", f"/v1/agents/{agent}/test-sets", {"name": "x", "cases": [STATUS_CASE]}),
            ("GET", f"/v1/agents/{agent}/evaluations", None),
            ("GET", f"/v1/agents/{agent}/evaluations/{evaluation}", None),
            ("POST", f"/v1/agents/{agent}/evaluations",
             {"test_set_id": test_set, "candidate": {"version": 2}}),
            ("POST", f"/v1/agents/{agent}/promote", {"version": 2}),
            ("GET", f"/v1/agents/{agent}/promotions", None)):
        r = await api.client.request(method, path, headers=other, json=body)
        assert r.status_code == 404, (method, path, r.text)


@pytest.mark.parametrize("body", [
    {"name": "x", "cases": []},
    {"name": "x", "cases": [{"input": "a\u0000b"}]},
    {"name": "x\u0000", "cases": [{"input": "hi"}]},
    {"name": "x", "cases": [{"input": "hi", "checks": {"answer_matches": "("}}]},
    # Python's re accepts both; RE2, which matches in linear time, does not.
    {"name": "x", "cases": [{"input": "hi", "checks": {"answer_matches": "(?=a)a"}}]},
    {"name": "x", "cases": [{"input": "hi", "checks": {"answer_matches": r"(a)\1"}}]},
    {"name": "x", "cases": [{"input": "hi", "checks": {"answer_matches": "((a{999}){999})"}}]},
    {"name": "x", "cases": [{"input": "hi", "checks": {"max_steps": 2**40}}]},
    {"name": "x", "cases": [{"input": "hi", "recorded": [
        {"tool": "effect", "result": "a", "error": "b"}]}]},
    {"name": "x", "cases": [{"checks": {}}]},
    {"name": "x", "cases": [{"from_run": "run_nope"}]},
    {"name": "x", "cases": [{"input": "hi"}], "tool_results": "sometimes"},
    {"name": "x", "cases": [{"input": "hi", "surprise": 1}]},
])
async def test_bad_test_sets_are_refused_with_a_problem(
    api: Api, fakes: Fakes, body: dict[str, Any],
) -> None:
    _, h, agent = await agent_with_two_versions(api, fakes)
    r = await api.client.post(f"/v1/agents/{agent}/test-sets", headers=h, json=body)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"] == "application/problem+json"


async def test_a_catastrophic_pattern_from_one_tenant_stalls_no_other_tenant(
    api: Api, fakes: Fakes, worker: object, admin_conn: asyncpg.Connection,
    database_dsn: str, tmp_path: Path,
) -> None:
    """The attack: ``(a+)+b`` against an answer of sixty a's backtracks for longer than the
    universe under Python's ``re``, and the verdict is computed wherever a report is read.
    Read through a real API process, tenant B's requests and /healthz must be answered
    meanwhile, and tenant A's report must come back with its verdict."""
    tenant_a, h, agent = await agent_with_two_versions(api, fakes)
    r = await api.client.post(f"/v1/agents/{agent}/test-sets", headers=h, json={
        "name": "redos", "cases": [{"input": scripted(answer("a" * 60)),
                                    "checks": {"answer_matches": "(a+)+b"}}]})
    assert r.status_code == 201, r.text
    r = await api.client.post(f"/v1/agents/{agent}/evaluations", headers=h, json={
        "test_set_id": r.json()["test_set_id"], "candidate": {"version": 2}})
    assert r.status_code == 201, r.text
    evaluation = r.json()["evaluation_id"]
    # Both runs ended, read from the database: reading the report here would be the attack.
    async def both_ended() -> bool:
        return await admin_conn.fetchval(
            "SELECT count(*) FROM runs WHERE tenant_id = $1 AND status = 'finished'",
            tenant_a) == 2

    await until(both_ended, "the evaluation's two runs finished", within=60)
    _, h_b = await api.tenant("Bystander")

    async with api_process(database_dsn, tmp_path) as served, \
            httpx2.AsyncClient(base_url=served.base_url, timeout=60) as client:
        report = asyncio.create_task(
            client.get(f"/v1/agents/{agent}/evaluations/{evaluation}", headers=h))
        # B keeps asking until A's report is back, so some of B's requests meet it in the
        # API's event loop whenever its verdicts are computed.
        try:
            while True:
                async with asyncio.timeout(1):
                    assert (await client.get("/v1/runs", headers=h_b)).status_code == 200
                    assert (await client.get("/healthz")).status_code == 200
                if report.done():
                    break
        finally:
            report.cancel()
        r = await report
    assert r.status_code == 200, r.text
    verdicts = [c for side in ("baseline", "candidate")
                for c in r.json()["cases"][0][side]["checks"] if c["check"] == "answer_matches"]
    assert [v["passed"] for v in verdicts] == [False, False]
    assert "does not match" in verdicts[0]["detail"]


async def test_a_cell_shedding_batch_runs_refuses_an_evaluation_and_writes_nothing(
    database_dsn: str, fakes: Fakes, admin_conn: asyncpg.Connection,
) -> None:
    """An evaluation is two batch runs per case: while the cell refuses new batch runs
    (ADR 0008) it is refused whole, with the body `POST /v1/runs` answers; an interactive
    run is still accepted."""
    levels = {"delay_new_runs_at": 1, "refuse_batch_runs_at": 2, "max_queued_runs": 4,
              "load_read_seconds": 0}
    async with serving_api(database_dsn, **levels) as api:
        _, h, agent = await agent_with_two_versions(api, fakes)
        r = await api.client.post(f"/v1/agents/{agent}/test-sets", headers=h, json={
            "name": "support", "cases": [POLICY_CASE, STATUS_CASE]})
        assert r.status_code == 201, r.text
        test_set = r.json()["test_set_id"]
        _, filler = await api.tenant("Filler")
        filler_agent = await api.agent(filler)
        for i in range(2):  # two queued: the batch level
            await api.start(filler, filler_agent, scripted(answer(f"filler {i}")))
        runs_before = await admin_conn.fetchval("SELECT count(*) FROM runs")

        r = await api.client.post(f"/v1/agents/{agent}/evaluations", headers=h, json={
            "test_set_id": test_set, "candidate": {"version": 2}})
        assert r.status_code == 503, r.text
        assert r.headers["content-type"] == "application/problem+json"
        problem = r.json()
        assert problem["type"] == "overloaded" and problem["shed"] == ["batch"]
        assert int(r.headers["retry-after"]) == problem["retry_after"] > 0
        # The body a shed run gets: no queue depth, no threshold.
        assert set(problem) == {"type", "title", "status", "detail", "shed", "retry_after"}
        assert await admin_conn.fetchval("SELECT count(*) FROM runs") == runs_before
        assert await admin_conn.fetchval("SELECT count(*) FROM agent_evaluations") == 0
        assert await admin_conn.fetchval("SELECT count(*) FROM evaluation_runs") == 0
        listed = await api.client.get(f"/v1/agents/{agent}/evaluations", headers=h)
        assert listed.json()["data"] == []
        # Interactive work of the same tenant is still admitted at this level.
        await api.start(h, agent, scripted(answer("interactive")))
