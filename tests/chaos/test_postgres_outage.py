"""Chaos: Postgres crashes (``pg_ctl stop -m immediate``) while runs are inside keyed tool
calls, stays down about ten seconds (or past an event stream's keepalive), and comes back.
Real ``tenantry api`` and ``tenantry worker`` processes at production settings (default
lease, timeouts and pool sizes) on a cluster this test owns, so crashing it disturbs no
other test.

What a user would notice, asserted: during the outage every route answers 503
problem+json with Retry-After at once (no hang, no 500, no dropped connection); the
workers stay up and carry on afterwards; every run finishes; every keyed effect happened
exactly once; each process says once that the database went away and once that it came
back, with no traceback.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx2
import orjson
import pytest

from tenantry.api.runs import KEEPALIVE_SECONDS
from tenantry.ids import RunId
from tenantry.testing.fake_model import FakeModelServer
from tenantry.testing.mcp_server import EffectsMcpServer
from tests.support.api import TEST_MASTER_KEY
from tests.support.api_process import api_process
from tests.support.harness import (
    PlannedRun,
    TenantHandle,
    WorkerFleet,
    create_runs,
    create_tenants,
    plan_with_slow_call,
    verify,
)
from tests.support.outage import (
    BACK_MARK,
    assert_outage_said_once,
    ended_at_least,
    migrate,
    probe_every_route,
)
from tests.support.pgcluster import PgCluster
from tests.support.waiting import until

pytestmark = pytest.mark.chaos

RUNS = 24
TENANTS = 2
WORKERS = 2
CONCURRENCY = 16  # per worker: every run is in flight when the database goes
OUTAGE_S = 10.0
#: Longer than an event stream's keepalive interval: the stream keeps its client through
#: keepalives (it reads nothing while idle) until the hub, listening again, wakes it.
LONG_OUTAGE_S = KEEPALIVE_SECONDS + 3.0
#: The slow call every run is inside when the database crashes; it ends during the outage.
SLOW_S = 2.0


def plan(index: int) -> PlannedRun:
    return plan_with_slow_call(index, SLOW_S)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[PgCluster]:
    with PgCluster(tmp_path / "pg") as owned:
        yield owned


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("lease_seconds", "pool_max", "outage_s"), [
    pytest.param(None, None, OUTAGE_S, id="production-defaults"),
    pytest.param(2, 6, LONG_OUTAGE_S, id="short-lease-small-pools-long-outage"),
])
async def test_runs_survive_a_postgres_crash(
    cluster: PgCluster, mcp: EffectsMcpServer, model: FakeModelServer, tmp_path: Path,
    lease_seconds: int | None, pool_max: int | None, outage_s: float,
) -> None:
    """``None``: the production default (a 30 s lease, 20-connection pools, 5 s connect
    timeout); the short variant resumes the cut-off runs within seconds, and its outage
    outlasts an event stream's keepalive, so the stream must stay open through keepalives."""
    dsn = cluster.dsn()
    await migrate(dsn, tmp_path)
    key = TEST_MASTER_KEY.encoded()
    async with api_process(dsn, tmp_path / "api", master_key=key,
                           pool_max=pool_max) as api, WorkerFleet(
        dsn=dsn, model_url=model.base_url, log_dir=tmp_path / "workers", size=WORKERS,
        concurrency=CONCURRENCY, lease_seconds=lease_seconds, pool_max=pool_max,
        master_key=key,
    ) as fleet, httpx2.AsyncClient(base_url=api.base_url, timeout=10) as client:
        await fleet.start()
        tenants = await create_tenants(client, api.operator, mcp.url, TENANTS)
        runs: dict[str, PlannedRun] = {}
        await create_runs(client, tenants, [plan(i) for i in range(RUNS)], runs)

        async def every_run_is_in_its_slow_call() -> bool:
            return sum(1 for c in mcp.calls if c.tool == "slow") >= RUNS

        def logs() -> str:
            return f"{api.tail()}\n{fleet.tails()}"

        await until(every_run_is_in_its_slow_call, "every run calls the slow tool", 60, logs)
        # A client watching a run live: its stream must outlive the outage.
        watched = next(iter(runs))
        opened = asyncio.Event()
        stream = asyncio.create_task(read_stream(client, tenants, runs, watched, opened))
        # Should the test fail before it reads the result, the failure says enough.
        stream.add_done_callback(lambda task: task.cancelled() or task.exception())
        await asyncio.wait_for(opened.wait(), 30)
        cluster.crash()
        down_since = time.monotonic()
        probes = 0
        # The outage lasts outage_s whatever happens; meanwhile every route is asked again
        # and again, and the workers must stay up.
        while time.monotonic() - down_since < outage_s:
            wrong = await probe_every_route(client, api, tenants[probes % TENANTS], watched)
            assert not wrong, "\n".join(wrong) + "\n" + logs()
            assert not fleet.unexpected_exits(), logs()
            assert api.process.returncode is None, logs()
            probes += 1
            await asyncio.sleep(0.5)  # pacing the probes; the outage is what we wait out
        cluster.start()

        admin = await asyncpg.connect(dsn)
        try:
            # Runs cut off mid-step resume once their lease (30 s by default) lapses.
            await until(ended_at_least(admin, RUNS), f"all {RUNS} runs end after the outage",
                        180, logs)
            # The API is itself again: a new run is accepted and finishes too.
            started = await client.post("/v1/runs", headers=tenants[0].headers, json={
                "agent_id": tenants[0].agent_id, "input": plan(RUNS).input})
            assert started.status_code == 202, started.text
            runs[started.json()["run_id"]] = plan(RUNS)
            await until(ended_at_least(admin, RUNS + 1), "the run started after the outage "
                        "ends", 60, logs)
            await fleet.stop()
            verdict = await verify(admin, runs, mcp)
            streamed = await asyncio.wait_for(stream, 30)
            logged = await admin.fetchval(
                "SELECT last_seq FROM runs WHERE run_id = $1", RunId.parse(watched).uuid)
        finally:
            await admin.close()
        assert verdict.ok, f"{probes} probes\n{verdict.describe()}\n{logs()}"
        assert verdict.finished == RUNS + 1
        assert not fleet.unexpected_exits(), logs()
        # The crash landed inside tool calls: they were repeated with the same key.
        assert verdict.retried_calls > 0, verdict.describe()
        assert probes > 0
        # One connection, the whole log in order, through the outage, to the end.
        assert [seq for seq, _ in streamed] == list(range(1, logged + 1)), streamed
        assert streamed[-1][1] == "RunFinished", streamed
        print(f"outage: {probes} rounds of probes; {verdict.counts()}")  # shown with -s

    # One line when the outage began and one when it ended, per process; no traceback.
    for name, text in [("api", api.log()), *((w.name, w.log().decode(errors="replace"))
                                             for w in fleet.gone)]:
        assert_outage_said_once(name, text)


async def read_stream(client: httpx2.AsyncClient, tenants: list[TenantHandle],
                      runs: dict[str, PlannedRun], run_id: str,
                      opened: asyncio.Event) -> list[tuple[int, str]]:
    """The run's SSE stream, from the start to its terminal event: (seq, type) pairs.
    ``opened`` is set once the first event has arrived."""
    tenant = tenants[runs[run_id].index % len(tenants)]  # create_runs' round-robin
    seen: list[tuple[int, str]] = []
    async with client.stream("GET", f"/v1/runs/{run_id}/events", headers=tenant.headers,
                             timeout=httpx2.Timeout(10, read=None)) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                event = orjson.loads(line[6:])
                if event["type"] == "model_delta":  # live, not in the log: no seq
                    continue
                seen.append((event["seq"], event["type"]))
                opened.set()
    return seen


@pytest.mark.timeout(180)
async def test_tenantry_up_reports_an_outage_once(cluster: PgCluster, tmp_path: Path) -> None:
    """``tenantry up``: the API and a worker loop in one process, several pools and LISTEN
    loops; an outage is still one line when it starts and one when it ends."""
    async with api_process(cluster.dsn(), tmp_path / "up", command="up") as up, \
            httpx2.AsyncClient(base_url=up.base_url, timeout=10) as client:
        async def create_tenant() -> httpx2.Response:
            return await client.post("/admin/v1/tenants", headers=up.operator,
                                     json={"name": "Outage"})

        assert (await create_tenant()).status_code == 201
        cluster.crash()
        down_since = time.monotonic()
        while time.monotonic() - down_since < OUTAGE_S / 2:
            r = await create_tenant()
            assert r.status_code == 503 and r.json()["type"] == "database_unavailable", r.text
            await asyncio.sleep(0.5)  # pacing; the outage is what we wait out
        cluster.start()

        async def accepted_again() -> bool:
            return (await create_tenant()).status_code == 201

        async def said_it_is_back() -> bool:
            return BACK_MARK in up.log()

        await until(accepted_again, "the API accepts writes after the outage", 30, up.tail)
        await until(said_it_is_back, "the process logs that the database is back", 30,
                    up.tail)
    assert_outage_said_once("up", up.log())
