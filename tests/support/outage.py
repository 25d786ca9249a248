"""What the database-failure chaos tests and benchmarks share (a Postgres crash, a failover):
migrating the test's own cluster through the CLI, a platform with every run mid-flight,
probing every kind of route while the database is gone, and waiting for runs to end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx2
import orjson

from tenantry.testing.fake_model import FakeModelServer
from tenantry.testing.mcp_server import EffectsMcpServer
from tests.support.api import TEST_MASTER_KEY
from tests.support.api_process import ApiProcess, api_process
from tests.support.harness import (
    PlannedRun,
    TenantHandle,
    WorkerFleet,
    create_runs,
    create_tenants,
    ended_runs,
    plan_with_slow_call,
    tenantry_command,
    worker_env,
)
from tests.support.waiting import until

#: What each process logs when an outage starts and when it ends (tenantry.db.outage).
DOWN_MARK = "database unavailable ("
BACK_MARK = "database answering again"
#: The deadline of the held calls' server: past any test's own timeout.
HELD_CALL_TIMEOUT_SECONDS = 900


async def migrate(dsn: str, tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        *tenantry_command(), "migrate", "--database-url", dsn,
        env=worker_env(tmp_path / "migrate-data", lease_seconds=None, pool_max=None),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await process.communicate()
    assert process.returncode == 0, (out + err).decode()


@dataclass(slots=True)
class MidFlight:
    """A platform on a test's own database, its runs each inside their slow call."""

    api: ApiProcess
    fleet: WorkerFleet
    client: httpx2.AsyncClient
    tenants: list[TenantHandle]
    runs: dict[str, PlannedRun]

    def logs(self) -> str:
        return f"{self.api.tail()}\n{self.fleet.tails()}"


@asynccontextmanager
async def platform_mid_flight(
    url: str, root: Path, mcp: EffectsMcpServer, model: FakeModelServer, *, runs: int,
    tenants: int, workers: int, concurrency: int, slow_s: float,
) -> AsyncIterator[MidFlight]:
    """``url`` migrated, ``tenantry api`` and ``workers`` worker processes on it at production
    settings (default lease, timeouts, pool sizes), and ``runs`` runs of
    :func:`plan_with_slow_call` through the API; entered once every run is inside its
    ``slow_s`` call, which then answers only once the caller lets it
    (``mcp.release_slow_calls()``, done on the way out at the latest): a crash lands
    mid-call whatever the machine's pace."""
    await migrate(url, root)
    key = TEST_MASTER_KEY.encoded()
    async with api_process(url, root / "api", master_key=key) as api, WorkerFleet(
        dsn=url, model_url=model.base_url, log_dir=root / "workers", size=workers,
        concurrency=concurrency, lease_seconds=None, pool_max=None, master_key=key,
    ) as fleet, httpx2.AsyncClient(base_url=api.base_url, timeout=10) as client:
        await fleet.start()
        # The held calls wait for the test, not the other way round: their server is
        # registered with a deadline past the test's own, so however long the machine takes
        # to bring every run into its call, none times out while held.
        handles = await create_tenants(client, api.operator, mcp.url, tenants,
                                       call_timeout_seconds=HELD_CALL_TIMEOUT_SECONDS)
        planned: dict[str, PlannedRun] = {}
        mcp.hold_slow_calls()
        await create_runs(client, handles, [plan_with_slow_call(i, slow_s)
                                            for i in range(runs)], planned)
        loaded = MidFlight(api, fleet, client, handles, planned)

        async def every_run_in_its_slow_call() -> bool:
            return sum(1 for c in mcp.calls if c.tool == "slow") >= runs

        await until(every_run_in_its_slow_call, "every run calls the slow tool", 120,
                    loaded.logs)
        try:
            yield loaded
        finally:
            mcp.release_slow_calls()


async def probe_every_route(
    client: httpx2.AsyncClient, api: ApiProcess, tenant: TenantHandle, run_id: str,
) -> list[str]:
    """One request to each kind of route; what was wrong with any answer (empty: all were
    503 database_unavailable problem+json with Retry-After). A hang shows as the client's
    timeout, a dropped connection as a transport error: both are failures here."""
    requests = [
        ("POST", "/v1/runs", tenant.headers, {"agent_id": tenant.agent_id, "input": "x"}),
        ("GET", "/v1/runs", tenant.headers, None),
        ("GET", f"/v1/runs/{run_id}", tenant.headers, None),
        ("GET", f"/v1/runs/{run_id}/events", {**tenant.headers, "Accept": "application/json"},
         None),
        ("POST", f"/v1/runs/{run_id}/cancel", tenant.headers, None),
        ("GET", f"/v1/agents/{tenant.agent_id}", tenant.headers, None),
        ("POST", "/admin/v1/tenants", api.operator, {"name": "During the outage"}),
        ("POST", f"/admin/v1/tenants/{tenant.tenant_id}/api-keys", api.operator, None),
    ]
    wrong = []
    for method, path, headers, body in requests:
        try:
            r = await client.request(method, path, headers=headers, json=body)
        except httpx2.TransportError as exc:
            wrong.append(f"{method} {path}: {type(exc).__name__} {exc}")
            continue
        problem = orjson.loads(r.content) if r.content.startswith(b"{") else {}
        if (r.status_code != 503 or r.headers.get("content-type") != "application/problem+json"
                or r.headers.get("retry-after") != "5"
                or problem.get("type") != "database_unavailable"):
            wrong.append(f"{method} {path}: {r.status_code} {dict(r.headers)} {r.text[:300]}")
    return wrong


def ended_at_least(admin: asyncpg.Connection, total: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await ended_runs(admin) >= total
    return check


def assert_outage_said_once(name: str, text: str) -> None:
    """A process's log (JSON lines) said once that the database went away and once that it
    came back, with no traceback."""
    messages = [orjson.loads(line).get("msg", "") for line in text.splitlines()
                if line.startswith("{")]
    assert sum(DOWN_MARK in m for m in messages) == 1, f"{name}:\n{text[-4000:]}"
    assert sum(BACK_MARK in m for m in messages) == 1, f"{name}:\n{text[-4000:]}"
    assert "Traceback" not in text, f"{name}:\n{text[-4000:]}"
