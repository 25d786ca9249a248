"""Parked runs wake when their provider recovers, whatever optional endpoints it has
(ADR 0009).

The fake providers here have no ``GET /models`` (it answers 404, as many OpenAI-compatible
servers do), so a probe can never say "back": recovery has to be learned from a real call.
Real fake servers on loopback, real workers, real Postgres.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable

import asyncpg
import pytest

from tenantry.db import Database
from tenantry.models.accounts import ModelAccount, wake_parked_for
from tenantry.models.gateway import GatewaySettings
from tenantry.runs.engine import EngineSettings
from tenantry.testing.fake_model import FakeModelServer
from tests.support.api import Api
from tests.support.db import run_statuses
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import TEST_ENGINE, TEST_GATEWAY, Fakes, running_worker

STEP = {"delay_ms": 100}


@pytest.fixture
async def providers() -> AsyncIterator[tuple[FakeModelServer, FakeModelServer]]:
    async with (FakeModelServer(provider="openai", models_endpoint=False) as gpt,
                FakeModelServer(provider="anthropic", models_endpoint=False) as claude):
        yield gpt, claude


def _script(i: int, steps: int) -> dict[str, object]:
    calls = [{**call("echo", text=f"{i}-{n}"), **STEP} for n in range(steps)]
    return scripted(*calls, {**answer(f"done {i}"), **STEP}, text=f"run {i}")


async def _start(api: Api, h: dict[str, str], agent: str, runs: int,
                 steps: int) -> list[str]:
    """Start runs a few at a time (the API shares this process's loop with the fakes)."""
    started: list[str] = []
    for first in range(0, runs, 8):
        started += await asyncio.gather(*(api.start(h, agent, _script(i, steps))
                                          for i in range(first, min(first + 8, runs))))
    return started


async def _replied_runs(conn: asyncpg.Connection, runs: list[str]) -> int:
    return int(await conn.fetchval(
        "SELECT count(DISTINCT run_id) FROM run_events WHERE type = 'ModelReplied' "
        "AND 'run_' || replace(run_id::text, '-', '') = ANY($1)", runs))


async def _at_least(count: Awaitable[int], n: int) -> bool:
    return await count >= n


async def _all(conn: asyncpg.Connection, runs: list[str], status: str) -> bool:
    statuses = await run_statuses(conn, runs)
    assert "failed" not in statuses, statuses
    return statuses == {status: len(runs)}


async def _events(api: Api, h: dict[str, str], run_id: str) -> list[dict[str, object]]:
    r = await api.client.get(f"/v1/runs/{run_id}/events",
                             headers={**h, "Accept": "application/json"})
    assert r.status_code == 200, r.text
    events: list[dict[str, object]] = r.json()["events"]
    return events


def _probes(server: FakeModelServer) -> int:
    return sum(1 for r in server.requests if r.method == "GET" and r.path == "/v1/models")


async def test_runs_parked_on_providers_without_a_models_endpoint_wake_on_recovery(
    api: Api, fakes: Fakes, providers: tuple[FakeModelServer, FakeModelServer],
    database_dsn: str, admin_conn: asyncpg.Connection,
) -> None:
    """Two workers (each its own gateway and breakers), two providers without ``/models``:
    every account goes down mid-run, every run parks, one provider comes back, every run
    finishes. The park recheck is an hour, so waking can only come from the gateways.
    (Breakers cool down for 2 s: while the providers are down, each worker wakes a parked
    run per account and cool-down to try them, so the moment when every run is parked
    comes often enough to observe.)"""
    gpt, claude = providers
    await api.model_account("gpt", gpt.base_url, priority=0)
    await api.model_account("claude", claude.base_url, provider="anthropic", priority=0)
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["echo"])
    engine = dataclasses.replace(TEST_ENGINE, park_recheck_seconds=3600.0,
                                 park_recheck_max_seconds=3600.0)
    gateway = dataclasses.replace(TEST_GATEWAY, breaker_reset_seconds=2.0,
                                  breaker_max_reset_seconds=2.0)
    runs = 40
    batch = await _start(api, h, agent, runs, 4)  # queued: the workers start after
    async with (running_worker(database_dsn, None, settings=engine, name="one",
                               model_gateway=gateway) as one,
                running_worker(database_dsn, None, settings=engine, name="two",
                               model_gateway=gateway) as two):
        await until(lambda: _at_least(_replied_runs(admin_conn, batch), runs),
                    "every run has had its first reply", 60)
        gpt.set_mode("down")
        claude.set_mode("down")

        async def all_parked() -> bool:
            return await _all(admin_conn, batch, "waiting") and one.active == two.active == 0
        await until(all_parked, "every run parked with its slot released", 60)
        assert {tuple(r["parked_on"]) for r in await admin_conn.fetch(
            "SELECT parked_on FROM runs WHERE status = 'waiting'")} == {("scripted",)}

        claude.set_mode("ok")
        await until(lambda: _all(admin_conn, batch, "finished"), "every parked run finished",
                    60)
    # The gateways did ask for /models, were told there is none, and woke the runs anyway:
    # with every run parked only a probe wakes one, so some account was probed. (Not
    # necessarily claude's: a run a probe of gpt woke may reach claude first, and the real
    # call that holds claude's half-open slot is its probe.)
    assert _probes(gpt) + _probes(claude) > 0
    for run_id in batch:
        events = await _events(api, h, run_id)
        kinds = [e["type"] for e in events]
        assert "RunFailed" not in kinds
        parked = kinds.index("RunParked")
        assert kinds[parked + 1] == "RunResumed"
        last = [e["data"] for e in events if e["type"] == "ModelReplied"][-1]
        assert last["account"] == "claude"


async def test_at_default_settings_parked_runs_wake_after_recovery_without_models(
    api: Api, fakes: Fakes, providers: tuple[FakeModelServer, FakeModelServer],
    database_dsn: str, admin_conn: asyncpg.Connection,
) -> None:
    """The same story at the shipped gateway, breaker and park settings (nothing
    shortened), with a handful of runs: the provider is down when they start, they park,
    it comes back, they all finish within the documented bound."""
    gpt, _ = providers
    await api.model_account("gpt", gpt.base_url)
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["echo"])
    gpt.set_mode("down")
    batch = await _start(api, h, agent, 5, 1)
    async with running_worker(database_dsn, None, settings=EngineSettings(),
                              model_gateway=GatewaySettings()) as worker:

        async def all_parked() -> bool:
            return await _all(admin_conn, batch, "waiting") and worker.active == 0
        await until(all_parked, "every run parked with its slot released", 60)
        gpt.set_mode("ok")
        # Documented bound at defaults (docs/how-to/model-providers.md): well inside this.
        await until(lambda: _all(admin_conn, batch, "finished"), "every parked run finished",
                    90)
    assert _probes(gpt) > 0


async def test_waking_for_an_account_wakes_the_runs_it_can_serve(
    api: Api, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    """A tenant's own account wakes only that tenant's runs, ``limit`` at a time; a
    ``family/*`` account reaches runs parked on a model of the family."""
    one, h1 = await api.tenant("One")
    two, h2 = await api.tenant("Two")
    agents = {one: await api.agent(h1), two: await api.agent(h2)}
    for tenant, h, n in ((one, h1, 3), (two, h2, 2)):
        for i in range(n):
            await api.start(h, agents[tenant], f"run {i}")
    # No worker runs here: park them as the driver would.
    await admin_conn.execute(
        "UPDATE runs SET status = 'waiting', parked_on = ARRAY['scripted/echo'], "
        "available_at = now() + interval '1 hour'")

    async def waiting() -> dict[str, int]:
        rows = await admin_conn.fetch("SELECT tenant_id, count(*) AS n FROM runs "
                                      "WHERE status = 'waiting' GROUP BY tenant_id")
        return {r["tenant_id"]: r["n"] for r in rows}

    own = ModelAccount("own", "openai", "http://own.invalid/v1", ("scripted/echo",), "us",
                       tenant=one)
    assert await wake_parked_for(db, own, 2) == 2
    assert await waiting() == {one: 1, two: 2}
    assert await wake_parked_for(db, own) == 1
    assert await waiting() == {two: 2}
    other = ModelAccount("other", "openai", "http://other.invalid/v1", ("gpt-4o",), "us")
    assert await wake_parked_for(db, other) == 0
    family = ModelAccount("family", "openai", "http://f.invalid/v1", ("scripted/*",), "us")
    assert await wake_parked_for(db, family) == 2
    assert await waiting() == {}
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM runs WHERE status = 'queued' AND parked_on IS NULL "
        "AND available_at IS NULL") == 5
