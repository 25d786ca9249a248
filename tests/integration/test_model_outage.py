"""The "provider goes down mid-run" story (ADR 0003): an outage costs tenants
time, never failed runs, and never a silent change of model.

Three accounts across two providers (real fake servers speaking the OpenAI and Anthropic
wire formats), 100 runs in flight in one real worker:
1. the main account goes down mid-run → the runs continue on the other accounts, with the
   same model, and each move is recorded;
2. every account goes down → the runs park, status ``waiting``, their worker slots free;
3. one account comes back → its probe wakes every parked run and they all finish.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable

import asyncpg
import pytest

from tenantry.testing.fake_model import FakeModelServer
from tests.support.api import Api
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import TEST_ENGINE, Fakes, running_worker

RUNS = 100
STEP = {"delay_ms": 250}  # each model call takes a while: runs stay in flight
TOOL_STEPS = 6


@pytest.fixture
async def providers() -> AsyncIterator[dict[str, FakeModelServer]]:
    async with (FakeModelServer(provider="openai") as main,
                FakeModelServer(provider="anthropic") as second,
                FakeModelServer(provider="openai") as third):
        yield {"main": main, "second": second, "third": third}


def _script(i: int) -> dict[str, object]:
    steps = [{**call("echo", text=f"{i}-{n}"), **STEP} for n in range(TOOL_STEPS)]
    return scripted(*steps, {**answer(f"done {i}"), **STEP}, text=f"run {i}")


async def _replied_runs(conn: asyncpg.Connection, runs: list[str]) -> int:
    return int(await conn.fetchval(
        "SELECT count(DISTINCT run_id) FROM run_events WHERE type = 'ModelReplied' "
        "AND 'run_' || replace(run_id::text, '-', '') = ANY($1)", runs))


async def _statuses(conn: asyncpg.Connection, runs: list[str]) -> dict[str, int]:
    rows = await conn.fetch(
        "SELECT status, count(*) AS n FROM runs "
        "WHERE 'run_' || replace(run_id::text, '-', '') = ANY($1) GROUP BY status", runs)
    return {r["status"]: r["n"] for r in rows}


async def test_outage_moves_runs_then_parks_them_and_wakes_them_on_recovery(
    api: Api, fakes: Fakes, providers: dict[str, FakeModelServer], database_dsn: str,
    admin_conn: asyncpg.Connection,
) -> None:
    main, second, third = providers["main"], providers["second"], providers["third"]
    await api.model_account("main", main.base_url, priority=0)
    await api.model_account("second", second.base_url, provider="anthropic", priority=1)
    await api.model_account("third", third.base_url, priority=1)
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["echo"])  # no fallback models: never switch models
    # Parked runs are looked at again only after a minute: waking them is the probe's job.
    engine = dataclasses.replace(TEST_ENGINE, park_recheck_seconds=60.0)
    async with running_worker(database_dsn, None, settings=engine, concurrency=150) as worker:
        # -- 1. the main account goes down mid-run ---------------------------------------
        batch = list(await asyncio.gather(*(api.start(h, agent, _script(i))
                                            for i in range(RUNS))))
        await until(lambda: _at_least(_replied_runs(admin_conn, batch), RUNS),
                    "every run has had its first reply", 60)
        main.set_mode("down")
        await until(lambda: _settled(admin_conn, batch), "every run ended", 90)
        assert await _statuses(admin_conn, batch) == {"finished": RUNS}
        moved = 0
        for run_id in batch:
            events = await _events(api, h, run_id)
            kinds = [e["type"] for e in events]
            assert "ModelFallback" not in kinds and "RunFailed" not in kinds
            accounts = [e["data"]["account"] for e in events if e["type"] == "ModelReplied"]
            assert accounts[0] == "main"  # the preferred account while it was healthy
            assert {e["data"]["model"] for e in events if e["type"] == "ModelReplied"} \
                == {"scripted"}
            if accounts[-1] != "main":
                moved += 1
                reroutes = [e["data"] for e in events if e["type"] == "ModelRerouted"]
                # Moved once, recorded with where from, where to and why; then it stuck.
                assert len(reroutes) == 1, reroutes
                assert reroutes[0]["from"] == "main" and reroutes[0]["model"] == "scripted"
                assert reroutes[0]["to"] in ("second", "third") and reroutes[0]["reason"]
                after = accounts[accounts.index(reroutes[0]["to"]):]
                assert set(after) == {reroutes[0]["to"]}
        assert moved >= RUNS // 2, f"only {moved} runs were still going when main went down"
        assert {"second", "third"} <= _accounts_used(second, third)

        # -- 2. every account goes down: runs park and free their slots ------------------
        batch = list(await asyncio.gather(*(api.start(h, agent, _script(i))
                                            for i in range(RUNS))))
        await until(lambda: _at_least(_replied_runs(admin_conn, batch), RUNS),
                    "every run of the second batch has had its first reply", 60)
        second.set_mode("down")
        third.set_mode("down")

        async def all_parked() -> bool:
            return await _statuses(admin_conn, batch) == {"waiting": RUNS} \
                and worker.active == 0
        await until(all_parked, "every run parked with its slot released", 60)
        parked_on = await admin_conn.fetch(
            "SELECT DISTINCT parked_on FROM runs WHERE status = 'waiting'")
        assert [r["parked_on"] for r in parked_on] == [["scripted"]]

        # -- 3. one account comes back: every parked run resumes and finishes ------------
        third.set_mode("ok")
        await until(lambda: _settled(admin_conn, batch), "every parked run ended", 90)
        assert await _statuses(admin_conn, batch) == {"finished": RUNS}
        for run_id in batch:
            events = await _events(api, h, run_id)
            kinds = [e["type"] for e in events]
            assert "ModelFallback" not in kinds and "RunFailed" not in kinds
            parked = kinds.index("RunParked")
            assert kinds[parked + 1] == "RunResumed"
            assert "model unavailable" in events[parked]["data"]["reason"]
            last = [e["data"] for e in events if e["type"] == "ModelReplied"][-1]
            assert last["account"] == "third" and last["model"] == "scripted"


async def _at_least(count: Awaitable[int], n: int) -> bool:
    return await count >= n


async def _settled(conn: asyncpg.Connection, runs: list[str]) -> bool:
    statuses = await _statuses(conn, runs)
    assert "failed" not in statuses, statuses
    return sum(statuses.get(s, 0) for s in ("finished", "cancelled")) == len(runs)


async def _events(api: Api, h: dict[str, str], run_id: str) -> list[dict[str, object]]:
    r = await api.client.get(f"/v1/runs/{run_id}/events", headers={
        **h, "Accept": "application/json"})
    assert r.status_code == 200, r.text
    events: list[dict[str, object]] = r.json()["events"]
    return events


def _accounts_used(*servers: FakeModelServer) -> set[str]:
    names = {0: "second", 1: "third"}
    return {names[i] for i, s in enumerate(servers) if s.usage_log}
