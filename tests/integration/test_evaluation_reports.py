"""Reading an evaluation costs bounded work whoever polls it (ADR 0034): a side is
judged once, at the first read after its run ended, and later reads take the stored
verdicts without reading the run's events; a side reports its first tool calls and their
total; a list of test sets shows summaries, not cases."""

from __future__ import annotations

from typing import Any

import asyncpg

from tenantry.api.console import epoch, session
from tenantry.evaluations.service import REPORTED_TOOL_CALLS
from tenantry.ids import RunId
from tests.support.api import OPERATOR_TOKEN, Api
from tests.support.evaluations import (
    POLICY_CASE,
    STATUS_CASE,
    agent_with_two_versions,
    evaluation_done,
)
from tests.support.scripts import answer, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes

#: More calls in one reply than a side reports; the check names the last one.
CALLS = REPORTED_TOOL_CALLS + 10
BUSY_CASE: dict[str, Any] = {
    "name": "calls a lot",
    "input": scripted({"tool_calls": [{"name": "effect", "arguments": {"note": f"n{i}"}}
                                      for i in range(CALLS)]}, answer("done")),
    "checks": {"tool_called_with": [{"tool": "effect",
                                     "arguments": {"note": f"n{CALLS - 1}"}}]},
}


async def test_an_ended_report_is_served_from_stored_verdicts_not_from_the_runs_events(
    api: Api, fakes: Fakes, worker: object, admin_conn: asyncpg.Connection,
) -> None:
    tenant, h, agent = await agent_with_two_versions(api, fakes)
    r = await api.client.post(f"/v1/agents/{agent}/test-sets", headers=h, json={
        "name": "support", "cases": [POLICY_CASE, STATUS_CASE, BUSY_CASE],
        "stubs": {"effect": "shipped (stub)"}})
    assert r.status_code == 201, r.text
    r = await api.client.post(f"/v1/agents/{agent}/evaluations", headers=h, json={
        "test_set_id": r.json()["test_set_id"], "candidate": {"version": 2}})
    assert r.status_code == 201, r.text
    evaluation = r.json()["evaluation_id"]
    # While its runs go on, a side lists no call (it is not judged yet).
    assert all(side["tool_calls"] == [] and side["tool_calls_total"] is None
               for case in r.json()["cases"] for side in (case["baseline"], case["candidate"]))
    first = await evaluation_done(api, h, agent, evaluation)

    policy, status, busy = first["cases"]
    assert [c["check"] for c in policy["candidate"]["checks"] if not c["passed"]] == [
        "answer_contains"]
    assert status["candidate"]["passed"] is True
    # A side lists its first calls and says how many there were; its checks saw them all.
    for side in (busy["baseline"], busy["candidate"]):
        assert side["tool_calls_total"] == CALLS
        assert [c["arguments"]["note"] for c in side["tool_calls"]] == [
            f"n{i}" for i in range(REPORTED_TOOL_CALLS)]
        assert side["passed"] is True, side["checks"]
    assert busy["differences"] == []
    # The console's page says how many more there were.
    cookie, _ = session.issue(OPERATOR_TOKEN, epoch=epoch.FIRST)
    page = await api.client.get(f"/console/evaluations/{tenant}/{evaluation}",
                                headers={"Cookie": f"{session.SESSION_COOKIE}={cookie}"})
    assert page.status_code == 200, page.text
    assert page.text.count(f"… 10 more ({CALLS} calls in all)") == 2

    # The runs' tool calls leave the log (as the superuser, past the immutability
    # trigger): a report that read them again would change its verdicts.
    runs = [RunId.parse(case[side]["run_id"]).uuid
            for case in first["cases"] for side in ("baseline", "candidate")]
    async with admin_conn.transaction():
        await admin_conn.execute("SET LOCAL tenantry.retention = 'on'")
        await admin_conn.execute("DELETE FROM run_event_payloads "
                                 "WHERE tenant_id = $1 AND run_id = ANY($2::uuid[])",
                                 tenant, runs)
        removed = await admin_conn.execute(
            "DELETE FROM run_events WHERE tenant_id = $1 AND run_id = ANY($2::uuid[]) "
            "AND type = 'ToolCompleted'", tenant, runs)
    assert removed == f"DELETE {2 * (1 + 1 + CALLS)}"

    again = (await api.client.get(f"/v1/agents/{agent}/evaluations/{evaluation}",
                                  headers=h)).json()
    assert again == first
    # Evidence for a promotion reads the same stored verdicts.
    r = await api.client.post(f"/v1/agents/{agent}/promote", headers=h, json={
        "version": 2, "evaluation_id": evaluation})
    assert r.status_code == 409 and "failed 1 case" in r.json()["detail"], r.text


async def test_a_list_of_test_sets_shows_summaries_and_one_test_set_its_cases(
    api: Api, fakes: Fakes,
) -> None:
    _, h, agent = await agent_with_two_versions(api, fakes)
    made = []
    for name, cases in (("one", [STATUS_CASE]), ("two", [POLICY_CASE, STATUS_CASE])):
        r = await api.client.post(f"/v1/agents/{agent}/test-sets", headers=h, json={
            "name": name, "cases": cases, "tool_results": "live"})
        assert r.status_code == 201, r.text
        made.append(r.json())
    r = await api.client.get(f"/v1/agents/{agent}/test-sets", headers=h, params={"limit": 1})
    assert r.status_code == 200, r.text
    page = r.json()
    assert page["data"] == [{"test_set_id": made[1]["test_set_id"], "agent_id": agent,
                             "name": "two", "tool_results": "live", "cases": 2,
                             "created_at": made[1]["created_at"]}]
    r = await api.client.get(f"/v1/agents/{agent}/test-sets", headers=h,
                             params={"cursor": page["next_cursor"]})
    assert [(t["name"], t["cases"]) for t in r.json()["data"]] == [("one", 1)]
    one = await api.client.get(f"/v1/agents/{agent}/test-sets/{made[0]['test_set_id']}",
                               headers=h)
    assert one.json() == made[0]


async def test_a_report_read_while_its_tenant_moves_is_served_and_judged_after(
    api: Api, fakes: Fakes, worker: object, admin_conn: asyncpg.Connection,
) -> None:
    """A tenant being moved to another cell is written by nobody (migration 0031): the
    operator's console still shows its report (judged, not stored), and the first read
    after the move stores the verdicts."""
    tenant, h, agent = await agent_with_two_versions(api, fakes)
    r = await api.client.post(f"/v1/agents/{agent}/test-sets", headers=h, json={
        "name": "one", "cases": [STATUS_CASE], "stubs": {"effect": "shipped (stub)"}})
    r = await api.client.post(f"/v1/agents/{agent}/evaluations", headers=h, json={
        "test_set_id": r.json()["test_set_id"], "candidate": {"version": 2}})
    evaluation = r.json()["evaluation_id"]

    async def both_ended() -> bool:  # read from the database: a report read would judge
        return await admin_conn.fetchval(
            "SELECT count(*) FROM runs WHERE tenant_id = $1 AND status = 'finished'",
            tenant) == 2

    await until(both_ended, "the evaluation's two runs finished", within=60)
    await admin_conn.execute("INSERT INTO frozen_tenants (tenant_id, state, move_id) "
                             "VALUES ($1, 'locked', gen_random_uuid())", tenant)
    cookie, _ = session.issue(OPERATOR_TOKEN, epoch=epoch.FIRST)
    page = await api.client.get(f"/console/evaluations/{tenant}/{evaluation}",
                                headers={"Cookie": f"{session.SESSION_COOKIE}={cookie}"})
    assert page.status_code == 200, page.text
    assert "passed: the candidate passed every case" in page.text
    stored = "SELECT count(*) FROM evaluation_results WHERE tenant_id = $1"
    assert await admin_conn.fetchval(stored, tenant) == 0
    await admin_conn.execute("DELETE FROM frozen_tenants WHERE tenant_id = $1", tenant)
    report = await evaluation_done(api, h, agent, evaluation)
    assert report["passed"] is True
    assert await admin_conn.fetchval(stored, tenant) == 2
