"""What the database-failure chaos tests share (a Postgres crash, a failover): migrating
the test's own cluster through the CLI, probing every kind of route while the database is
gone, and waiting for runs to end."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import httpx2
import orjson

from tests.support.api_process import ApiProcess
from tests.support.harness import TenantHandle, ended_runs, tenantry_command, worker_env

#: What each process logs when an outage starts and when it ends (tenantry.db.outage).
DOWN_MARK = "database unavailable ("
BACK_MARK = "database answering again"


async def migrate(dsn: str, tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        *tenantry_command(), "migrate", "--database-url", dsn,
        env=worker_env(tmp_path / "migrate-data", lease_seconds=None, pool_max=None),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await process.communicate()
    assert process.returncode == 0, (out + err).decode()


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
