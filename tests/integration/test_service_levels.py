"""What the service levels are measured by, through /metrics and /readyz over real HTTP:
runs ended by whose doing (a platform fault is ``ours`` and nothing else), the API's
requests by route class and outcome, and readiness that follows the database and its
schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from fastapi import FastAPI

from tenantry.db.migrate import migrate
from tenantry.runs.inprocess import LocalWorkers
from tenantry.telemetry.worker import WorkerMetrics
from tests.support.api import Api, serving_api
from tests.support.faults import BrokenTools
from tests.support.pgcluster import PgCluster
from tests.support.prometheus import samples, value
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

BY_CAUSE = "tenantry_runs_ended_by_cause_total"
REQUESTS = "tenantry_api_requests_total"


async def _tenant(api: Api, plan: str) -> tuple[str, dict[str, str]]:
    r = await api.client.post("/admin/v1/tenants", json={"name": plan.title(), "plan": plan},
                              headers=api.operator)
    tenant = r.json()["tenant_id"]
    key = (await api.client.post(f"/admin/v1/tenants/{tenant}/api-keys",
                                 headers=api.operator)).json()["api_key"]
    return tenant, {"Authorization": f"Bearer {key}"}


def _by_cause(text: str) -> dict[tuple[str, str], float]:
    return {(dict(labels)["tenant_class"], dict(labels)["cause"]): found
            for (name, labels), found in samples(text).items() if name == BY_CAUSE}


async def _scrape(api: Api) -> str:
    r = await api.client.get("/metrics", headers=api.operator)
    assert r.status_code == 200
    return r.text


async def test_a_platform_fault_is_counted_ours_and_nothing_else(
    database_dsn: str, fakes: Fakes,
) -> None:
    local = LocalWorkers()
    async with serving_api(database_dsn, local=local) as api, running_worker(
        database_dsn, fakes.model.base_url, metrics=WorkerMetrics(), gateway=BrokenTools,
    ) as worker:
        local.engines.append(worker.engine)
        _, h = await _tenant(api, "gold")
        agent = await api.agent(h)
        run = await api.start(h, agent, "hello")
        ended = (await api.events_until_end(h, run))[-1]
        assert ended["type"] == "RunFailed" and ended["data"]["ours"] is True
        text = await _scrape(api)
    assert _by_cause(text) == {("gold", "ours"): 1.0}
    # The existing figure is unchanged: by status, which cannot say whose fault it was.
    assert value(samples(text), "tenantry_worker_runs_ended_total", tenant_class="gold",
                 status="failed") == 1.0


async def test_completed_and_cancelled_runs_are_counted_as_such(
    database_dsn: str, fakes: Fakes,
) -> None:
    local = LocalWorkers()
    async with serving_api(database_dsn, local=local) as api, running_worker(
        database_dsn, fakes.model.base_url, metrics=WorkerMetrics(),
    ) as worker:
        local.engines.append(worker.engine)
        tenant, h = await _tenant(api, "free")
        await api.tool_server(tenant, fakes.mcp.url)
        agent = await api.agent(h, tools=["slow"])
        done = await api.start(h, agent, scripted(answer("done")))
        assert (await api.events_until_end(h, done))[-1]["type"] == "RunFinished"
        # Cancelled while its tool call runs: the worker ends it once the call returns.
        doomed = await api.start(h, agent, scripted(call("slow", seconds=1.0),
                                                    answer("too late")))
        async with api.client.stream("GET", f"/v1/runs/{doomed}/events", headers=h) as r:
            async for line in r.aiter_lines():
                if line.startswith("event: ModelReplied"):
                    break
        assert (await api.client.post(f"/v1/runs/{doomed}/cancel", headers=h)).json()[
            "cancel_requested"] is True
        assert (await api.events_until_end(h, doomed))[-1]["type"] == "RunCancelled"
        text = await _scrape(api)
    assert _by_cause(text) == {("free", "completed"): 1.0, ("free", "cancelled"): 1.0}


def _requests(text: str) -> dict[tuple[str, str], float]:
    return {(dict(labels)["route_class"], dict(labels)["outcome"]): found
            for (name, labels), found in samples(text).items() if name == REQUESTS}


async def test_requests_are_counted_by_route_class_and_outcome(api: Api) -> None:
    app: FastAPI = api.app

    async def boom() -> None:
        raise RuntimeError("a bug in a handler")

    app.add_api_route("/v1/boom", boom, methods=["GET"])
    before = _requests(await _scrape(api))
    assert (await api.client.get("/v1/boom")).status_code == 500
    assert (await api.client.get("/v1/runs")).status_code == 401  # no key
    assert (await api.client.post("/v1/runs", json={})).status_code == 401
    assert (await api.client.get("/healthz")).status_code == 200
    assert (await api.client.get("/nowhere")).status_code == 404
    # Classed by the route's template (the consoles by their prefix).
    assert (await api.client.get("/v1/runs/run_x/events")).status_code == 401
    assert (await api.client.get("/console/login")).status_code == 200
    after = _requests(await _scrape(api))
    moved = {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k, 0.0)}
    # The scrapes themselves are not counted.
    assert moved == {("tenant_read", "server_error"): 1.0, ("tenant_read", "client_error"): 1.0,
                     ("runs_create", "client_error"): 1.0, ("meta", "ok"): 1.0,
                     ("unmatched", "client_error"): 1.0, ("stream", "client_error"): 1.0,
                     ("console", "ok"): 1.0}


async def test_readyz_names_pending_migrations(api: Api, admin_conn: asyncpg.Connection) -> None:
    ready = await api.client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}
    assert (await api.client.get("/healthz")).json() == {"status": "ok"}
    await admin_conn.execute(
        "DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM "
        "schema_migrations)")

    async def unready() -> bool:
        return (await api.client.get("/readyz")).status_code == 503

    await until(unready, "/readyz answers 503", 10)
    r = await api.client.get("/readyz")
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["type"] == "unready" and body["status"] == 503
    assert [reason for reason in body["reasons"] if "1 migration(s) pending" in reason]
    # Liveness is not readiness: the process still answers.
    assert (await api.client.get("/healthz")).status_code == 200


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[PgCluster]:
    """This test's own server: it is stopped mid-test (never the shared one)."""
    with PgCluster(tmp_path / "pg") as own:
        yield own


async def test_a_database_outage_makes_the_api_unready_and_metrics_say_so(
    cluster: PgCluster,
) -> None:
    dsn = cluster.dsn()
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    async with serving_api(dsn) as api:
        assert (await api.client.get("/readyz")).status_code == 200
        text = await _scrape(api)
        assert value(samples(text), "tenantry_database_up") == 1.0
        cluster.crash()

        async def status(wanted: int) -> bool:
            return (await api.client.get("/readyz")).status_code == wanted

        await until(lambda: status(503), "/readyz answers 503 with the database down", 30)
        body = (await api.client.get("/readyz")).json()
        assert [reason for reason in body["reasons"] if reason.startswith("database:")]
        # /metrics still answers: the process's own figures, and the database down.
        down = samples(await _scrape(api))
        assert value(down, "tenantry_database_up") == 0.0
        assert value(down, REQUESTS, route_class="meta", outcome="unavailable_declared") >= 1
        cluster.start()
        await until(lambda: status(200), "/readyz answers 200 with the database back", 30)
        assert value(samples(await _scrape(api)), "tenantry_database_up") == 1.0
