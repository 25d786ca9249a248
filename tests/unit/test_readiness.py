"""/readyz's answers and caching, a standalone worker's /readyz, and the API's request
classes and outcomes (api/availability.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx2
import pytest

from tenantry.api.availability import Outcome, RouteClass, outcome, route_class
from tenantry.runs.inprocess import LocalWorkers
from tenantry.telemetry import readiness
from tenantry.telemetry.http import metrics_app
from tenantry.telemetry.readiness import Readiness
from tenantry.telemetry.worker import WorkerMetrics


@dataclass
class FakeLoop:
    held: bool

    def holds_session(self) -> bool:
        return self.held


async def test_a_standalone_workers_readyz_follows_its_sessions_and_boundary() -> None:
    weak = LocalWorkers(weak_boundary="sandbox: the boundary in force is bwrap, weaker "
                                      "than TENANTRY_SANDBOX_MIN_BOUNDARY=gvisor")
    app = metrics_app(WorkerMetrics(), "op_secret", Readiness(weak.checks()))
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app),
                                  base_url="http://worker") as client:
        r = await client.get("/readyz")  # no credentials: probes carry none
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["reasons"] == [weak.weak_boundary, "workers: no worker loop running yet"]

    local = LocalWorkers()
    loop = FakeLoop(held=False)
    local.loops.append(loop)  # type: ignore[arg-type]
    app = metrics_app(WorkerMetrics(), "op_secret", Readiness(local.checks(), cache_seconds=0))
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app),
                                  base_url="http://worker") as client:
        r = await client.get("/readyz")
        assert r.json()["reasons"] == [
            "workers: 1 of 1 worker loop(s) hold no worker session (claiming nothing until "
            "the database answers)"]
        loop.held = True
        r = await client.get("/readyz")
    assert r.status_code == 200 and r.json() == {"status": "ready"}


async def test_checks_run_once_however_many_probes_arrive() -> None:
    calls = 0
    now = 0.0

    async def check() -> list[str]:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)
        return []

    ready = Readiness([("db", check)], clock=lambda: now)
    await asyncio.gather(*(ready.reasons() for _ in range(50)))
    assert calls == 1
    now += readiness.CACHE_SECONDS
    await ready.reasons()
    assert calls == 2


async def test_a_check_that_hangs_makes_the_process_unready(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(readiness, "CHECK_SECONDS", 0.01)

    async def hangs() -> list[str]:
        await asyncio.Event().wait()
        return []

    assert await Readiness([("database", hangs)]).reasons() == [
        "database: no answer within 0.01 s"]


@pytest.mark.parametrize(("method", "where", "kind"), [
    ("POST", "/v1/runs", RouteClass.RUNS_CREATE),
    ("GET", "/v1/runs", RouteClass.TENANT_READ),
    ("GET", "/v1/runs/{run_id}/events", RouteClass.STREAM),
    ("DELETE", "/v1/runs/{run_id}", RouteClass.TENANT_WRITE),
    ("GET", "/oauth/callback", RouteClass.TENANT_READ),
    ("PUT", "/admin/v1/prices/{model}", RouteClass.OPERATOR),
    ("GET", "/console/runs", RouteClass.CONSOLE),
    ("GET", "/app", RouteClass.CONSOLE),
    ("GET", "/application", RouteClass.UNMATCHED),
    ("GET", "/readyz", RouteClass.META),
    ("GET", "/wp-login.php", RouteClass.UNMATCHED),
])
def test_route_classes(method: str, where: str, kind: RouteClass) -> None:
    assert route_class(method, where) is kind


@pytest.mark.parametrize(("status", "retry_after", "gone", "expected"), [
    (200, False, False, Outcome.OK),
    (304, False, False, Outcome.OK),
    (404, False, False, Outcome.CLIENT_ERROR),
    (429, True, False, Outcome.CLIENT_ERROR),
    (500, False, False, Outcome.SERVER_ERROR),
    (None, False, False, Outcome.SERVER_ERROR),
    (503, False, False, Outcome.SERVER_ERROR),
    (503, True, False, Outcome.UNAVAILABLE_DECLARED),
    (504, False, False, Outcome.TIMEOUT),
    (200, False, True, Outcome.TIMEOUT),
])
def test_outcomes(status: int | None, retry_after: bool, gone: bool,
                  expected: Outcome) -> None:
    assert outcome(status, retry_after=retry_after, gone=gone) is expected
