"""Shedding under overload (ADR 0008), through the API and a real worker with the
thresholds set low: new runs are delayed behind every tenant's in-flight runs, then new
batch runs are refused, then every new run; steps of runs in flight go on at every level."""

from __future__ import annotations

import asyncpg
import httpx2

from tenantry.db import Database
from tenantry.ids import RunId
from tenantry.runs.lease import claim
from tenantry.scheduler.policy import TenantPolicy
from tenantry.scheduler.shedding import ShedThresholds
from tests.support.api import Api, serving_api
from tests.support.scheduler import tenant_with_runs
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

#: Only what a tenant may know about a shed request: never the cell's depth.
SHED_BODY_KEYS = {"type", "title", "status", "detail", "shed", "retry_after"}


def _shedding(**levels: int) -> dict[str, int]:
    """Settings overrides: these levels, and the cell's depth read on every request."""
    return {**levels, "load_read_seconds": 0}


async def _pending_approval(api: Api, h: dict[str, str]) -> str:
    """The run parks itself: its approval appears."""
    found: list[str] = []

    async def appeared() -> bool:
        page = (await api.client.get("/v1/approvals", params={"status": "pending"},
                                     headers=h)).json()
        found[:] = [a["approval_id"] for a in page["data"]]
        return bool(found)

    await until(appeared, "the run waits for an approval", 30)
    return found[0]


async def _waiting_on_approval(api: Api, fakes: Fakes, database_dsn: str,
                               name: str) -> tuple[str, dict[str, str], str, str]:
    """A tenant whose run took a step and waits for a person (no slot held)."""
    tenant, h = await api.tenant(name)
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["effect"], needs_approval=["effect"])
    async with running_worker(database_dsn, fakes.model.base_url, name="before"):
        run_id = await api.start(h, agent, scripted(
            call("effect", note=f"{name} refund"), answer("{last_tool_result}")))
        approval = await _pending_approval(api, h)
    return tenant, h, run_id, approval


async def _approve(api: Api, h: dict[str, str], approval: str) -> None:
    r = await api.client.post(f"/v1/approvals/{approval}", json={"decision": "approve"},
                              headers=h)
    assert r.status_code == 200, r.text


async def _filler(api: Api, runs: int, name: str = "Filler") -> tuple[str, dict[str, str]]:
    """Another tenant's new runs, queued: what fills the cell."""
    tenant, h = await api.tenant(name)
    agent = await api.agent(h)
    for i in range(runs):
        await api.start(h, agent, scripted(answer(f"filler {i}")))
    return tenant, h


async def _post(api: Api, h: dict[str, str], agent: str, priority: str,
                key: str | None = None) -> httpx2.Response:
    headers = {**h, "Idempotency-Key": key} if key else h
    return await api.client.post("/v1/runs", headers=headers, json={
        "agent_id": agent, "input": scripted(answer("hi")), "priority": priority})


def _assert_shed(r: httpx2.Response, shed: list[str]) -> None:
    assert r.status_code == 503, r.text
    problem = r.json()
    assert problem["type"] == "overloaded" and problem["shed"] == shed
    assert int(r.headers["retry-after"]) == problem["retry_after"] > 0
    assert set(problem) == SHED_BODY_KEYS, problem  # no queue depth, no threshold
    assert not any(ch.isdigit() for ch in problem["detail"]), problem["detail"]


async def test_past_the_first_level_in_flight_runs_of_every_tenant_go_before_new_ones(
    database_dsn: str, fakes: Fakes, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    levels = _shedding(delay_new_runs_at=1, refuse_batch_runs_at=50, max_queued_runs=100)
    async with serving_api(database_dsn, **levels) as api:
        _, whale_h, resumed, approval = await _waiting_on_approval(
            api, fakes, database_dsn, "Whale")
        # The whale also has a run in a slot: its share (1 running) is larger than the
        # minnow's (none).
        busy = await api.start(whale_h, await api.agent(whale_h, name="busy"),
                               scripted(answer("busy")))
        [held] = await claim(db, "another-worker", 1, 300.0)
        assert str(held.run) == busy
        await _approve(api, whale_h, approval)  # its run is back in the queue: level 1
        _, minnow_h = await api.tenant("Minnow")
        fresh = await api.start(minnow_h, await api.agent(minnow_h), scripted(answer("new")))

        # Below the first level the claim would serve the minnow's new run first (a probe,
        # rolled back)...
        probe = admin_conn.transaction()
        await probe.start()
        normal = await admin_conn.fetchval(
            "SELECT run_id FROM tenantry_claim_runs('probe', 1, 30, 'agent', false)")
        await probe.rollback()
        assert str(RunId(normal)) == fresh
        # ...overloaded, a worker with one slot takes the whale's in-flight run first and
        # the minnow's new run only after it: delayed, not refused.
        shedding = ShedThresholds(delay_new_at=1, refuse_batch_at=50, refuse_all_at=100)
        async with running_worker(database_dsn, fakes.model.base_url, concurrency=1,
                                  name="after", shedding=shedding):
            await api.events_until_end(minnow_h, fresh)
            resumed_events = await api.events_until_end(whale_h, resumed)
    assert resumed_events[-1]["type"] == "RunFinished"
    order = await admin_conn.fetchrow(
        "SELECT (SELECT finished_at FROM runs WHERE run_id = $1) AS resumed_done, "
        "       (SELECT started_at FROM runs WHERE run_id = $2) AS fresh_started",
        RunId.parse(resumed).uuid, RunId.parse(fresh).uuid)
    assert order["resumed_done"] <= order["fresh_started"], dict(order)


async def test_past_the_second_level_new_batch_runs_are_refused_interactive_ones_accepted(
    database_dsn: str, admin_conn: asyncpg.Connection,
) -> None:
    levels = _shedding(delay_new_runs_at=1, refuse_batch_runs_at=2, max_queued_runs=4)
    async with serving_api(database_dsn, **levels) as api:
        _, h = await api.tenant()
        agent = await api.agent(h)
        assert (await _post(api, h, agent, "batch")).status_code == 202  # level 0
        await _filler(api, 1)  # two queued: level 2
        before = await admin_conn.fetchval("SELECT count(*) FROM runs")
        _assert_shed(await _post(api, h, agent, "batch"), ["batch"])
        assert await admin_conn.fetchval("SELECT count(*) FROM runs") == before  # nothing written
        interactive = await _post(api, h, agent, "interactive")
        assert interactive.status_code == 202, interactive.text
        assert (await api.run(h, interactive.json()["run_id"]))["status"] == "queued"


async def test_metrics_show_the_level_new_runs_are_answered_with(database_dsn: str) -> None:
    levels = _shedding(delay_new_runs_at=1, refuse_batch_runs_at=2, max_queued_runs=3)
    async with serving_api(database_dsn, **levels) as api:

        async def level() -> str:
            text = (await api.client.get("/metrics", headers=api.operator)).text
            return next(line for line in text.splitlines()
                        if line.startswith("tenantry_shed_level "))

        assert await level() == "tenantry_shed_level 0"
        await _filler(api, 2)
        assert await level() == "tenantry_shed_level 2"


async def test_past_the_last_level_every_new_run_is_refused_but_a_retry_is_answered(
    database_dsn: str, admin_conn: asyncpg.Connection,
) -> None:
    levels = _shedding(delay_new_runs_at=1, refuse_batch_runs_at=2, max_queued_runs=3)
    async with serving_api(database_dsn, **levels) as api:
        _, h = await api.tenant()
        agent = await api.agent(h)
        first = await _post(api, h, agent, "batch", key="order-7")
        assert first.status_code == 202
        await _filler(api, 2)  # three queued: level 3
        before = await admin_conn.fetchval("SELECT count(*) FROM runs")
        for priority in ("batch", "interactive"):
            _assert_shed(await _post(api, h, agent, priority), ["batch", "interactive"])
        # The same request again (a client that lost the first answer) gets its run back:
        # it was accepted before the cell filled up.
        again = await _post(api, h, agent, "batch", key="order-7")
        assert again.status_code == 202, again.text
        assert again.json()["run_id"] == first.json()["run_id"]
        assert await admin_conn.fetchval("SELECT count(*) FROM runs") == before
        # Another tenant is refused alike: the cell sheds, whoever's work it is.
        _, other_h = await api.tenant("Other")
        _assert_shed(await _post(api, other_h, await api.agent(other_h), "interactive"),
                     ["batch", "interactive"])


async def test_steps_of_runs_in_flight_go_on_at_every_level(
    database_dsn: str, fakes: Fakes, admin_conn: asyncpg.Connection,
) -> None:
    levels = _shedding(max_queued_runs=2)  # the other levels derived: both at 1
    async with serving_api(database_dsn, **levels) as api:
        _, h, run_id, approval = await _waiting_on_approval(api, fakes, database_dsn, "Acme")
        filler, _ = await _filler(api, 2)  # two queued: level 3
        # The filler's runs stay queued (its spend cap is reached), so the cell stays full.
        r = await api.client.put(f"/admin/v1/tenants/{filler}/policy",
                                 json={"monthly_spend_cap_micros": 0}, headers=api.operator)
        assert r.status_code == 200, r.text
        agent = await api.agent(h, name="other")
        _assert_shed(await _post(api, h, agent, "interactive"), ["batch", "interactive"])
        await _approve(api, h, approval)  # a decision on a run in flight is never refused
        shedding = ShedThresholds.derive(2)
        async with running_worker(database_dsn, fakes.model.base_url, name="after",
                                  shedding=shedding):
            events = await api.events_until_end(h, run_id)
        assert [e["type"] for e in events][-3:] == ["ToolCompleted", "ModelReplied",
                                                    "RunFinished"]
        assert (await api.run(h, run_id))["answer"] == "applied Acme refund"
        # Still full: new runs are still refused.
        _assert_shed(await _post(api, h, agent, "interactive"), ["batch", "interactive"])
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM runs WHERE tenant_id = $1 AND status = 'queued'", filler) == 2


async def test_in_flight_first_keeps_shares_and_ceilings_within_each_tier(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    capped = await tenant_with_runs(db, "capped", 3, TenantPolicy(max_running=2))
    other = await tenant_with_runs(db, "other", 2)
    newcomer = await tenant_with_runs(db, "newcomer", 1)
    ids = {r["tenant_id"]: [x["run_id"] for x in await admin_conn.fetch(
        "SELECT run_id FROM runs WHERE tenant_id = $1 ORDER BY created_at", r["tenant_id"])]
        for r in await admin_conn.fetch("SELECT tenant_id FROM tenants")}
    in_flight = [*ids[capped.value][:2], ids[other.value][0]]  # back from approvals, say
    await admin_conn.execute("UPDATE runs SET steps = 2 WHERE run_id = ANY($1::uuid[])",
                             in_flight)
    leases = await claim(db, "w", 10, 30.0, in_flight_first=True)
    order = [lease.run.uuid for lease in leases]
    # Every in-flight run first, whatever the tenant; shares alternate inside the tier.
    assert set(order[:3]) == set(in_flight)
    # Fair inside the tier: one each before capped (smallest share again) takes its second.
    assert {lease.tenant for lease in leases[:2]} == {capped, other}
    # Then new runs, by share: the newcomer (none running) before other (one running);
    # capped is at its ceiling and gets no third.
    assert order[3:] == [ids[newcomer.value][0], ids[other.value][1]]
