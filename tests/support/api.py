"""The real API app on a loopback port, and a small client for what tests do through it."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx2
import orjson
import uvicorn
from fastapi import FastAPI

from tenantry.api.platform import Platform
from tenantry.bootstrap.api import build_app
from tenantry.config import Settings
from tenantry.runs.inprocess import LocalWorkers
from tenantry.vault import MasterKey
from tests.support.db import console_login_dsn, login_dsn

OPERATOR_TOKEN = "op_test_token"


# One vault master key for the test session, shared by the API and the workers under test.
TEST_MASTER_KEY = MasterKey.generate()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Api:
    base_url: str
    client: httpx2.AsyncClient
    operator: dict[str, str]
    app: FastAPI | None = None  # the app served, to observe its process (pool, streams)

    @property
    def platform(self) -> Platform:
        assert self.app is not None
        found: Platform = self.app.state.platform
        return found

    async def tenant(self, name: str = "Acme", *,
                     region: str = "default") -> tuple[str, dict[str, str]]:
        """A new tenant and the auth headers of a fresh API key for it."""
        r = await self.client.post("/admin/v1/tenants", json={"name": name, "region": region},
                                   headers=self.operator)
        assert r.status_code == 201, r.text
        tenant_id = r.json()["tenant_id"]
        r = await self.client.post(f"/admin/v1/tenants/{tenant_id}/api-keys",
                                   headers=self.operator)
        assert r.status_code == 201, r.text
        return tenant_id, {"Authorization": f"Bearer {r.json()['api_key']}"}

    async def tool_server(self, tenant_id: str, url: str, *, name: str = "effects",
                          honours_idempotency_keys: bool = True,
                          **fields: object) -> dict[str, object]:
        r = await self.client.post(
            f"/admin/v1/tenants/{tenant_id}/tool-servers", headers=self.operator,
            json={"name": name, "url": url, "honours_idempotency_keys": honours_idempotency_keys,
                  **fields})
        assert r.status_code == 201, r.text
        body: dict[str, object] = r.json()
        return body

    async def model_account(self, account_id: str, base_url: str, *,
                            tenant: str | None = None, **fields: object) -> dict[str, object]:
        """Register a model account (a tenant's own when ``tenant`` is given)."""
        body = {"account_id": account_id, "provider": "openai", "base_url": base_url,
                "models": ["scripted"], "region": "us", **fields}
        path = (f"/admin/v1/tenants/{tenant}/model-accounts" if tenant
                else "/admin/v1/model-accounts")
        r = await self.client.post(path, json=body, headers=self.operator)
        assert r.status_code == 201, r.text
        created: dict[str, object] = r.json()
        return created

    async def start(self, headers: dict[str, str], agent: str, input: object,
                    **extra: object) -> str:
        r = await self.client.post("/v1/runs", json={"agent_id": agent, "input": input, **extra},
                                   headers=headers)
        assert r.status_code == 202, r.text
        run_id: str = r.json()["run_id"]
        return run_id

    async def events_until_end(self, headers: dict[str, str], run_id: str,
                               within: float = 30, *,
                               deltas: bool = False) -> list[dict[str, object]]:
        """The run's whole log, read from its SSE stream until the terminal event (with
        ``deltas``, the live ``model_delta`` events too, where they came)."""
        events: list[dict[str, object]] = []
        async with asyncio.timeout(within):
            async with self.client.stream("GET", f"/v1/runs/{run_id}/events",
                                          headers=headers, timeout=within) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        event = orjson.loads(line[6:])
                        if deltas or event.get("type") != "model_delta":
                            events.append(event)
        return events

    async def run(self, headers: dict[str, str], run_id: str) -> dict[str, object]:
        r = await self.client.get(f"/v1/runs/{run_id}", headers=headers)
        body: dict[str, object] = r.json()
        return body

    async def agent(self, headers: dict[str, str], name: str = "helper", **spec: object) -> str:
        body = {"name": name, "model": "scripted", "system_prompt": "Be brief.", **spec}
        r = await self.client.post("/v1/agents", json=body, headers=headers)
        assert r.status_code == 201, r.text
        agent_id: str = r.json()["agent_id"]
        return agent_id


@asynccontextmanager
async def serving_api(database_dsn: str, *, local: LocalWorkers | None = None,
                      **overrides: object) -> AsyncIterator[Api]:
    """An API process's worth of app (its own pool, LISTEN connection and caches); with
    ``local``, worker loops in this process are handed to it as `tenantry up` does (the
    console and /metrics show their breakers, pools and figures)."""
    settings = Settings(**{  # type: ignore[arg-type]
        "database_url": database_dsn, "operator_token": OPERATOR_TOKEN, "db_pool_min": 1,
        "db_pool_max": 5, "max_body_bytes": 64 * 1024,
        "master_key": TEST_MASTER_KEY.encoded(),
        # The tests' tool servers are on this machine: tenants may register them (the
        # tests of the operator's rules turn this off).
        "tenant_tool_servers_allow_private": True, **overrides})
    port = free_port()
    # The serving logins, as `tenantry up` uses on the embedded cluster (ADR 0011).
    app = build_app(settings, login_dsn(database_dsn),
                    console_dsn=console_login_dsn(database_dsn), local=local)
    config = uvicorn.Config(app, host="127.0.0.1", port=port,
                            log_config=None, access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx2.AsyncClient(base_url=base, timeout=10) as client:
            yield Api(base, client, {"Authorization": f"Bearer {OPERATOR_TOKEN}"}, app)
    finally:
        server.should_exit = True
        await task
