"""Approvals: a run waits with no slot held, survives worker restarts, and continues only
with the exact call a person approved."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg

from tenantry.db import Database
from tenantry.runs import approvals
from tests.support.api import Api
from tests.support.replay import check_and_record
from tests.support.scripts import answer, call, scripted
from tests.support.worker import Fakes, running_worker


async def _waiting_run(
    api: Api, fakes: Fakes, admin_conn: asyncpg.Connection
) -> tuple[dict[str, str], str, dict[str, object], str]:
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["effect", "echo"], needs_approval=["effect"])
    run_id = await api.start(h, agent, scripted(
        call("effect", note="refund 120 EUR to order-9"), answer("{last_tool_result}")))
    async with asyncio.timeout(30):
        while True:  # the run parks itself; wait for the pending approval to appear
            page = (await api.client.get("/v1/approvals", params={"status": "pending"},
                                         headers=h)).json()
            if page["data"]:
                break
            await asyncio.sleep(0.05)
    return h, run_id, page["data"][0], tenant


async def test_a_run_waits_without_a_slot_and_continues_after_approval(
    api: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection, db: Database
) -> None:
    async with running_worker(database_dsn, fakes.model.base_url, name="first") as first:
        h, run_id, approval, tenant = await _waiting_run(api, fakes, admin_conn)
        assert first.active == 0  # nothing holds the run in memory
    row = await admin_conn.fetchrow("SELECT status, lease_owner FROM runs")
    assert tuple(row) == ("waiting", None)
    # The approver sees exactly what will be sent, bound to the call's key.
    assert approval["tool"] == "effect"
    assert approval["arguments"] == {"note": "refund 120 EUR to order-9"}
    assert approval["key"] == f"{run_id}:2:0"
    assert fakes.mcp.calls == []
    # Workers restart while it waits; then a person approves.
    r = await api.client.post(f"/v1/approvals/{approval['approval_id']}",
                              json={"decision": "approve"}, headers=h)
    assert r.status_code == 200 and r.json()["status"] == "approved"
    async with running_worker(database_dsn, fakes.model.base_url, name="second"):
        events = await api.events_until_end(h, run_id)
    assert [e["type"] for e in events] == [
        "RunCreated", "ModelReplied", "ApprovalRequested", "ApprovalDecided", "ToolCompleted",
        "ModelReplied", "RunFinished"]
    assert [(c.tool, c.arguments, c.meta_key) for c in fakes.mcp.calls] == [
        ("effect", {"note": "refund 120 EUR to order-9"}, f"{run_id}:2:0")]
    assert (await api.run(h, run_id))["answer"] == "applied refund 120 EUR to order-9"
    await check_and_record(db, tenant, run_id, "approval-approved")
    # Approving twice is a conflict.
    again = await api.client.post(f"/v1/approvals/{approval['approval_id']}",
                                  json={"decision": "deny"}, headers=h)
    assert again.status_code == 409 and again.json()["approval_status"] == "approved"


async def test_a_denied_call_is_never_made_and_the_model_is_told(
    api: Api, fakes: Fakes, worker: object, admin_conn: asyncpg.Connection
) -> None:
    h, run_id, approval, _ = await _waiting_run(api, fakes, admin_conn)
    r = await api.client.post(f"/v1/approvals/{approval['approval_id']}",
                              json={"decision": "deny", "comment": "amount too high"},
                              headers=h)
    assert r.json()["status"] == "denied"
    await api.events_until_end(h, run_id)
    assert fakes.mcp.calls == []
    told = fakes.model.requests[-1].json()["messages"][-1]["content"]
    assert "the approver denied this call: amount too high" in told


async def test_an_expired_approval_is_told_to_the_model(
    api: Api, fakes: Fakes, worker: object, db: Database, admin_conn: asyncpg.Connection
) -> None:
    h, run_id, approval, _ = await _waiting_run(api, fakes, admin_conn)
    # Not yet due: nothing happens.
    assert await approvals.expire_due(db, datetime.now(UTC)) == 0
    # A clock 8 days ahead (the default expiry is 7 days): no sleeping in tests.
    assert await approvals.expire_due(db, datetime.now(UTC) + timedelta(days=8)) == 1
    events = await api.events_until_end(h, run_id)
    decided = next(e["data"] for e in events if e["type"] == "ApprovalDecided")
    assert decided["decision"] == "expired"
    assert fakes.mcp.calls == []
    told = fakes.model.requests[-1].json()["messages"][-1]["content"]
    assert "expired before anyone decided" in told
    r = await api.client.post(f"/v1/approvals/{approval['approval_id']}",
                              json={"decision": "approve"}, headers=h)
    assert r.status_code == 409


async def test_another_tenants_approval_is_not_found(
    api: Api, fakes: Fakes, worker: object, admin_conn: asyncpg.Connection
) -> None:
    h, run_id, approval, _ = await _waiting_run(api, fakes, admin_conn)
    _, other = await api.tenant("Other")
    missing = "apr_" + "0" * 32
    for method, body in (("GET", None), ("POST", {"decision": "approve"})):
        theirs = await api.client.request(method, f"/v1/approvals/{approval['approval_id']}",
                                          json=body, headers=other)
        nothing = await api.client.request(method, f"/v1/approvals/{missing}", json=body,
                                           headers=other)
        assert theirs.status_code == nothing.status_code == 404
        assert theirs.content == nothing.content
    assert (await api.client.get("/v1/approvals", headers=other)).json()["data"] == []
    still = (await api.client.get(f"/v1/approvals/{approval['approval_id']}", headers=h)).json()
    assert still["status"] == "pending"
    del run_id


async def test_cancelling_a_waiting_run_ends_it_and_closes_the_approval_to_decisions(
    api: Api, fakes: Fakes, worker: object, admin_conn: asyncpg.Connection
) -> None:
    h, run_id, approval, _ = await _waiting_run(api, fakes, admin_conn)
    r = await api.client.post(f"/v1/runs/{run_id}/cancel", headers=h)
    assert r.json()["status"] == "cancelled"
    r = await api.client.post(f"/v1/approvals/{approval['approval_id']}",
                              json={"decision": "approve"}, headers=h)
    assert r.status_code == 409 and r.json()["approval_status"] == "cancelled"
    closed = (await api.client.get(f"/v1/approvals/{approval['approval_id']}", headers=h)).json()
    assert closed["status"] == "cancelled" and closed["comment"] == "the run was cancelled"
    assert (await api.client.get("/v1/approvals", params={"status": "pending"},
                                 headers=h)).json()["data"] == []
    assert fakes.mcp.calls == []
