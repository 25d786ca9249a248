"""A tenant that reaches its monthly spend cap waits; nobody else does (ADR 0035). Its runs
in flight stop between steps with nothing lost — `waiting`, reason `monthly_spend_cap`, no
worker slot held — and continue from their logs when the operator raises or removes the
cap, or when the month ends. A run's own limits still end it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import asyncpg
import orjson
import pytest

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.ids import RunId
from tenantry.models.gateway import GatewaySettings
from tenantry.runs.engine import EngineSettings
from tenantry.runs.lease import claim
from tenantry.scheduler import policy, spend_cap
from tenantry.scheduler.policy import TenantPolicy
from tenantry.testing.fake_model import FakeModelServer
from tests.support.api import Api
from tests.support.console import operator
from tests.support.scheduler import tenant_with_runs
from tests.support.scripts import answer, call, scripted
from tests.support.spend import a_month_passes, month_spend, set_cap
from tests.support.waiting import until
from tests.support.worker import TEST_ENGINE, TEST_GATEWAY, Fakes, running_worker

RUNS_Q = load("tenantry.runs")
#: A reply that costs $0.40 at the scripted model's price ($4 per million output tokens):
#: what one step of a run spends when the model writes a lot.
EXPENSIVE = {"completion_tokens": 100_000}
#: The worker's settings: the production ones (lease, recheck, gateway, 1 s housekeeping),
#: and the tests' shortened ones.
SETTINGS = {
    "production": {"settings": EngineSettings(), "model_gateway": GatewaySettings(),
                   "poll_seconds": 1.0},
    "shortened": {"settings": TEST_ENGINE, "model_gateway": TEST_GATEWAY,
                  "poll_seconds": 0.1},
}


def _next_month() -> datetime:
    now = datetime.now(UTC)
    return (datetime(now.year + 1, 1, 1, tzinfo=UTC) if now.month == 12
            else datetime(now.year, now.month + 1, 1, tzinfo=UTC))


async def _events(api: Api, h: dict[str, str], run_id: str) -> list[dict[str, Any]]:
    r = await api.client.get(f"/v1/runs/{run_id}/events",
                             headers={**h, "Accept": "application/json"})
    assert r.status_code == 200, r.text
    events: list[dict[str, Any]] = r.json()["events"]
    return events


async def _waits_for_the_cap(api: Api, h: dict[str, str], run_id: str) -> bool:
    run = await api.run(h, run_id)
    return run["status"] == "waiting" and run["waiting_reason"] == "monthly_spend_cap"


def _model_calls(model: FakeModelServer, marker: str) -> int:
    """How many chat requests the fake model served for the run whose input is ``marker``."""
    served = 0
    for request in model.requests:
        body = request.json() if request.path.endswith("/chat/completions") else None
        if not isinstance(body, dict):
            continue
        first = next(m for m in body["messages"] if m["role"] == "user")
        envelope = orjson.loads(first["content"])
        if isinstance(envelope, dict) and envelope.get("input") == marker:
            served += 1
    return served


async def _running(conn: asyncpg.Connection, tenant: str) -> int:
    """The scheduler's count of the tenant's runs holding a worker slot."""
    return int(await conn.fetchval("SELECT running FROM tenant_load WHERE tenant_id = $1",
                                   tenant))


@pytest.mark.parametrize("worker_settings", list(SETTINGS))
async def test_runs_in_flight_wait_at_the_cap_without_a_slot_and_finish_when_it_is_raised(
    api: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection, db: Database,
    worker_settings: str,
) -> None:
    a, a_h = await api.tenant("Overspender")
    b, b_h = await api.tenant("Bystander")
    for tenant in (a, b):
        await api.tool_server(tenant, fakes.mcp.url)
    a_agent = await api.agent(a_h, tools=["effect", "echo"], needs_approval=["effect"])
    b_agent = await api.agent(b_h, tools=["echo"])
    markers = ["alpha", "bravo", "charlie"]
    # Five model steps each; the third costs $0.40, far past what the cap will leave.
    script = [call("echo", text="{input} one"), call("effect", note="{input}"),
              {**call("echo", text="{input} three"), "usage": EXPENSIVE},
              call("echo", text="{input} four"), answer("{input}: {tool_results}")]
    # As many worker slots as A has runs: were a waiting run holding one, B would not run.
    async with running_worker(database_dsn, fakes.model.base_url, concurrency=3,
                              **SETTINGS[worker_settings]) as worker:  # type: ignore[arg-type]
        runs = {m: await api.start(a_h, a_agent, scripted(*script, text=m)) for m in markers}

        # Each is mid-flight (two model steps, one tool call) and waits for its approval.
        async def asked() -> bool:
            page = (await api.client.get("/v1/approvals", params={"status": "pending"},
                                         headers=a_h)).json()
            return len(page["data"]) == 3
        await until(asked, "A's three runs wait for their approvals", 30)
        approvals = (await api.client.get("/v1/approvals", params={"status": "pending"},
                                          headers=a_h)).json()["data"]
        # Room for a few more calls, not for the expensive replies: the first of them to be
        # billed crosses the cap.
        cap = await month_spend(api, a) + 50_000
        await set_cap(api, a, cap)
        for approval in approvals:
            r = await api.client.post(f"/v1/approvals/{approval['approval_id']}",
                                      json={"decision": "approve"}, headers=a_h)
            assert r.status_code == 200, r.text

        seen: list[str] = []  # what each run's log holds, should they not

        async def all_wait() -> bool:
            seen[:] = [" ".join(e["type"] for e in await _events(api, a_h, r))
                       for r in runs.values()]
            return all([await _waits_for_the_cap(api, a_h, r) for r in runs.values()])
        await until(all_wait, "A's runs wait for the spend cap", 60, lambda: "\n".join(seen))
        assert await month_spend(api, a) > cap  # crossed by what A's own runs spent
        assert await _running(admin_conn, a) == 0

        async def idle() -> bool:  # its tasks end just after their parks commit
            return worker.active == 0
        await until(idle, "the worker holds none of A's runs", 10)
        for run_id in runs.values():
            parked = (await _events(api, a_h, run_id))[-1]
            assert parked["type"] == "RunParked"
            assert parked["data"]["reason"] == "monthly_spend_cap"
            assert parked["data"]["cap_micros"] == cap
            assert parked["data"]["spent_micros"] > cap
            assert datetime.fromisoformat(parked["data"]["until"]) == _next_month()
        # New runs of A are still refused at admission.
        r = await api.client.post("/v1/runs", json={"agent_id": a_agent, "input": "more"},
                                  headers=a_h)
        assert r.status_code == 429 and r.json()["type"] == "budget_exhausted"
        # Nothing wakes them while the cap and the month stay as they are.
        assert await spend_cap.recheck(db) == 0

        # B's runs, several steps each, use the three slots and finish meanwhile.
        b_runs = [await api.start(b_h, b_agent, scripted(
            call("echo", text="b one"), call("echo", text="b two"), answer(f"b{i} done"),
            text=f"b{i}")) for i in range(3)]
        for i, run_id in enumerate(b_runs):
            events = await api.events_until_end(b_h, run_id, within=60)
            assert events[-1]["type"] == "RunFinished"
            assert events[-1]["data"]["answer"] == f"b{i} done"
        assert all([await _waits_for_the_cap(api, a_h, r) for r in runs.values()])

        # The operator raises the cap: the same runs continue from their logs.
        await set_cap(api, a, cap + 10_000_000)
        ended = {m: await api.events_until_end(a_h, run_id, within=60)
                 for m, run_id in runs.items()}

    for marker, run_id in runs.items():
        events = ended[marker]
        run = await api.run(a_h, run_id)
        assert run["status"] == "finished" and run["waiting_reason"] is None
        assert run["answer"] == (f"{marker}: {marker} one\napplied {marker}\n{marker} three\n"
                                 f"{marker} four")
        types = [e["type"] for e in events]
        assert types.count("RunParked") == 1 and types.count("RunResumed") == 1
        assert types[types.index("RunParked") + 1] == "RunResumed"
        # Every step once: five replies, the script's five steps in order, each asked of the
        # model once and billed once.
        replies = [e for e in events if e["type"] == "ModelReplied"]
        assert [[c["id"] for c in e["data"]["calls"]] for e in replies] == [
            ["call_0_0"], ["call_1_0"], ["call_2_0"], ["call_3_0"], []]
        assert _model_calls(fakes.model, marker) == 5
        facts = await admin_conn.fetch(
            "SELECT seq, cost_micros FROM usage_facts WHERE tenant_id = $1 AND run_id = $2 "
            "ORDER BY seq", a, RunId.parse(run_id).uuid)
        assert [(f["seq"], f["cost_micros"]) for f in facts] == [
            (e["seq"], e["data"]["cost_micros"]) for e in replies]
        tools = [e["data"]["key"] for e in events if e["type"] == "ToolCompleted"]
        assert len(tools) == len(set(tools)) == 4
        assert fakes.mcp.key_counts()[f"{run_id}:{replies[1]['seq']}:0"].effects == 1


@pytest.mark.parametrize("worker_settings", list(SETTINGS))
async def test_a_run_waiting_for_the_cap_goes_on_when_the_month_ends(
    api: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection, db: Database,
    worker_settings: str,
) -> None:
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    await set_cap(api, tenant, 200_000)  # room for this month's first step, not its bill
    agent = await api.agent(h, tools=["echo"])
    async with running_worker(database_dsn, fakes.model.base_url,
                              **SETTINGS[worker_settings]):  # type: ignore[arg-type]
        run_id = await api.start(h, agent, scripted(
            {**call("echo", text="first"), "usage": EXPENSIVE}, call("echo", text="second"),
            answer("{tool_results}")))
        await until(lambda: _waits_for_the_cap(api, h, run_id), "the run waits for the cap",
                    30)
        assert await spend_cap.recheck(db) == 0
        await a_month_passes(admin_conn, tenant)
        events = await api.events_until_end(h, run_id, within=60)
    run = await api.run(h, run_id)
    assert run["status"] == "finished" and run["answer"] == "first\nsecond"
    types = [e["type"] for e in events]
    assert types == ["RunCreated", "ModelReplied", "ToolCompleted", "RunParked", "RunResumed",
                     "ModelReplied", "ToolCompleted", "ModelReplied", "RunFinished"]
    # The new month's spend is this month's calls alone; the cap is the same.
    assert 0 < await month_spend(api, tenant) < 200_000


async def test_a_waiting_run_says_why_on_every_surface_and_a_cancel_ends_it(
    api: Api, fakes: Fakes, worker: object, admin_conn: asyncpg.Connection,
) -> None:
    tenant, h = await api.tenant("Capped")
    await api.tool_server(tenant, fakes.mcp.url)
    await set_cap(api, tenant, 200_000)
    agent = await api.agent(h, tools=["echo"])
    run_id = await api.start(h, agent, scripted(
        {**call("echo", text="first"), "usage": EXPENSIVE}, answer("never")))
    # The event stream carries the park as it happens (the stream stays open: the run lives).
    parked: dict[str, Any] = {}
    async with asyncio.timeout(30), api.client.stream(
            "GET", f"/v1/runs/{run_id}/events", headers=h, timeout=30) as stream:
        async for line in stream.aiter_lines():
            if line.startswith("data: ") and '"RunParked"' in line:
                parked = orjson.loads(line[6:])
                break
    assert parked["data"]["reason"] == "monthly_spend_cap"
    assert parked["data"]["cap_micros"] == 200_000
    run = await api.run(h, run_id)
    assert (run["status"], run["waiting_reason"]) == ("waiting", "monthly_spend_cap")
    listed = (await api.client.get("/v1/runs", params={"status": "waiting"},
                                   headers=h)).json()["data"]
    assert [(r["run_id"], r["waiting_reason"]) for r in listed] == [
        (run_id, "monthly_spend_cap")]
    # The operator's console: the run's page says why; the tenants page counts them.
    console = operator()
    page = await api.client.get(f"/console/runs/{tenant}/{run_id}", headers=console.headers)
    assert page.status_code == 200
    assert 'id="run-waiting-reason" data-reason="monthly_spend_cap"' in page.text
    tenants = await api.client.get("/console/tenants", headers=console.headers)
    assert 'data-spend-capped="1"' in tenants.text

    cancelled = (await api.client.post(f"/v1/runs/{run_id}/cancel", headers=h)).json()
    assert (cancelled["status"], cancelled["waiting_reason"]) == ("cancelled", None)
    row = await admin_conn.fetchrow(
        "SELECT waiting_cap_micros, available_at FROM runs WHERE run_id = $1",
        RunId.parse(run_id).uuid)
    assert tuple(row) == (None, None)
    tenants = await api.client.get("/console/tenants", headers=console.headers)
    assert "data-spend-capped" not in tenants.text


async def test_a_runs_own_cost_limit_still_ends_it_whatever_the_tenants_cap(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    await set_cap(api, tenant, 10_000_000_000)  # far from reached
    agent = await api.agent(h, tools=["echo"], limits={"max_cost_micros": 1})
    run_id = await api.start(h, agent, scripted(call("echo", text="x"), answer("never")))
    events = await api.events_until_end(h, run_id)
    assert [e["type"] for e in events] == ["RunCreated", "ModelReplied", "ToolCompleted",
                                           "BudgetStopped"]
    assert events[-1]["data"]["limit"] == "max_cost_micros"
    run = await api.run(h, run_id)
    assert run["status"] == "failed" and run.get("waiting_reason") is None
    assert run["error"]["type"] == "budget_exhausted"
    assert run["error"]["limit"] == "max_cost_micros"


async def test_which_change_wakes_a_waiting_run_and_none_twice(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    """The wake rules on the database alone (no worker): the policy write wakes the runs its
    new cap lets go in its own transaction; the recheck wakes those whose month ended and
    those that parked just after a raise they could not see; nothing else, however often it
    is asked."""
    tenant = await tenant_with_runs(db, "waiter", 4, TenantPolicy(monthly_spend_cap_micros=100))
    leases = sorted(await claim(db, "w1", 4, 30.0), key=lambda lease: lease.run.uuid)
    assert len(leases) == 4
    this_month_ends = await admin_conn.fetchval(
        "SELECT date_trunc('month', now()) + interval '1 month'")
    ended_month = await admin_conn.fetchval("SELECT date_trunc('month', now())")
    # As each refused reservation saw things: the cap in force (100), or — the third — the
    # cap before a raise it could not see; the fourth was refused in a month since ended.
    seen = [(100, this_month_ends), (100, this_month_ends), (50, this_month_ends),
            (100, ended_month)]
    async with db.tenant_tx(tenant) as conn:
        for lease, (cap, ends) in zip(leases, seen, strict=True):
            await conn.execute(RUNS_Q.park_for_spend_cap, tenant.value, lease.run.uuid,
                               lease.epoch, cap, ends)

    async def statuses() -> list[str]:
        rows = await admin_conn.fetch(
            "SELECT run_id, status FROM runs WHERE tenant_id = $1", tenant.value)
        by_run = {r["run_id"]: r["status"] for r in rows}
        return [by_run[lease.run.uuid] for lease in leases]

    assert await statuses() == ["waiting"] * 4
    assert await spend_cap.recheck(db) == 2
    assert await statuses() == ["waiting", "waiting", "queued", "queued"]
    assert await spend_cap.recheck(db) == 0  # asked again: nothing has changed
    # Lowering the cap wakes nothing; raising it wakes the rest in the write's transaction.
    await policy.set_policy(db, tenant, TenantPolicy(monthly_spend_cap_micros=80))
    assert await statuses() == ["waiting", "waiting", "queued", "queued"]
    await policy.set_policy(db, tenant, TenantPolicy(monthly_spend_cap_micros=None))
    assert await statuses() == ["queued"] * 4
    rows = await admin_conn.fetch(
        "SELECT waiting_cap_micros, available_at FROM runs WHERE tenant_id = $1",
        tenant.value)
    assert {tuple(r) for r in rows} == {(None, None)}


@pytest.mark.parametrize("worker_settings", list(SETTINGS))
async def test_a_run_back_from_its_approval_while_the_tenant_is_at_its_cap_waits_too(
    api: Api, fakes: Fakes, database_dsn: str, worker_settings: str,
) -> None:
    """The fair claim passes over a tenant at its cap: a run in flight that goes back to the
    queue then (its approval decided) would sit `queued` without a word. It waits for the
    cap instead, says so, and goes on when the cap is raised."""
    async with running_worker(database_dsn, fakes.model.base_url,
                              **SETTINGS[worker_settings]):  # type: ignore[arg-type]
        tenant, h = await api.tenant()
        await api.tool_server(tenant, fakes.mcp.url)
        await set_cap(api, tenant, 200_000)
        agent = await api.agent(h, tools=["effect", "echo"], needs_approval=["effect"])
        asking = await api.start(h, agent, scripted(call("effect", note="{input}"),
                                                    answer("{tool_results}"), text="asking"))

        async def asked() -> bool:
            page = (await api.client.get("/v1/approvals", params={"status": "pending"},
                                         headers=h)).json()
            return len(page["data"]) == 1
        await until(asked, "the run waits for its approval", 30)
        # Another run's expensive step takes the tenant past its cap.
        spender = await api.start(h, agent, scripted(
            {**call("echo", text="big"), "usage": EXPENSIVE}, answer("{tool_results}"),
            text="spender"))
        await until(lambda: _waits_for_the_cap(api, h, spender), "the spender waits", 30)
        approval = (await api.client.get("/v1/approvals", params={"status": "pending"},
                                         headers=h)).json()["data"][0]
        r = await api.client.post(f"/v1/approvals/{approval['approval_id']}",
                                  json={"decision": "approve"}, headers=h)
        assert r.status_code == 200, r.text
        await until(lambda: _waits_for_the_cap(api, h, asking), "the approved run waits", 30)
        events = await _events(api, h, asking)
        assert [e["type"] for e in events] == ["RunCreated", "ModelReplied", "ApprovalRequested",
                                               "ApprovalDecided", "RunParked"]
        assert events[-1]["data"]["reason"] == "monthly_spend_cap"
        assert events[-1]["data"]["cap_micros"] == 200_000
        assert datetime.fromisoformat(events[-1]["data"]["until"]) == _next_month()
        assert "effect" not in [c.tool for c in fakes.mcp.calls]  # it waits with its run

        await set_cap(api, tenant, None)  # the operator removes the cap
        for run_id, expected in ((asking, "applied asking"), (spender, "big")):
            ended = await api.events_until_end(h, run_id)
            assert ended[-1]["type"] == "RunFinished"
            assert ended[-1]["data"]["answer"] == expected
        assert [c.tool for c in fakes.mcp.calls].count("effect") == 1
