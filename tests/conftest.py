"""Shared fixtures: a real Postgres (template database migrated once per session, a fresh
database per test) and the real HTTP app served by uvicorn on a loopback port."""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx2
import orjson
import pytest
import uvicorn

from tenantry.bootstrap.api import build_app
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.db.embedded import EmbeddedPostgres
from tenantry.db.migrate import migrate
from tenantry.ledger.prices import PriceBook
from tenantry.models.accounts import ModelAccount
from tenantry.models.gateway import GatewaySettings, ModelGateway
from tenantry.runs.driver import Engine, EngineSettings
from tenantry.runs.inprocess import LocalWorkers
from tenantry.runs.lease import worker_id
from tenantry.runs.webhooks import WebhookSender
from tenantry.runs.worker import Worker
from tenantry.sandbox.manager import SandboxManager
from tenantry.scheduler.shedding import CellLoad, ShedThresholds
from tenantry.telemetry.worker import WorkerMetrics
from tenantry.testing.fake_model import FakeModelServer
from tenantry.testing.mcp_server import EffectsMcpServer
from tenantry.tools.builtin import BuiltinTools
from tenantry.tools.gateway import ToolGateway
from tenantry.tools.mcp_client import McpToolClient
from tenantry.vault import MasterKey, Vault

OPERATOR_TOKEN = "op_test_token"
# One vault master key for the test session, shared by the API and the workers under test.
TEST_MASTER_KEY = MasterKey.generate()
LOCAL_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


def _choose_admin_dsn(tmp_root: Path) -> tuple[str, EmbeddedPostgres | None]:
    """TENANTRY_TEST_DATABASE_URL, else the local server on 5432 (what CI uses), else an
    embedded Postgres for this session, so `make test` works on a fresh machine too."""
    configured = os.environ.get("TENANTRY_TEST_DATABASE_URL")
    if configured:
        return configured, None
    with socket.socket() as probe:
        probe.settimeout(1)
        if probe.connect_ex(("127.0.0.1", 5432)) == 0:
            return LOCAL_DSN, None
    embedded = EmbeddedPostgres(tmp_root / "pg")
    return embedded.start(), embedded


@pytest.fixture(scope="session")
def admin_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    dsn, embedded = _choose_admin_dsn(tmp_path_factory.mktemp("embedded"))
    yield dsn
    if embedded is not None:
        embedded.stop()


def dsn_for(admin_dsn: str, database: str) -> str:
    parts = urlsplit(admin_dsn)
    return urlunsplit(parts._replace(path="/" + database))


@pytest.fixture(scope="session")
async def template_db(admin_dsn: str) -> AsyncIterator[str]:
    name = f"tenantry_tmpl_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        conn = await asyncpg.connect(dsn_for(admin_dsn, name))
        try:
            await migrate(conn)
        finally:
            await conn.close()
        yield name
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@pytest.fixture
async def database_dsn(admin_dsn: str, template_db: str) -> AsyncIterator[str]:
    """A fresh, migrated database for this test only (copied from the template)."""
    name = f"tenantry_t_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
        yield dsn_for(admin_dsn, name)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture
async def admin_conn(database_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """A superuser connection to the test database: for checking what was (not) written."""
    conn = await asyncpg.connect(database_dsn)
    yield conn
    await conn.close()


@pytest.fixture
async def db(database_dsn: str) -> AsyncIterator[Database]:
    database = await Database.connect(database_dsn, min_size=1, max_size=5)
    yield database
    await database.close()


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
                          honours_idempotency_keys: bool = True) -> dict[str, object]:
        r = await self.client.post(
            f"/admin/v1/tenants/{tenant_id}/tool-servers", headers=self.operator,
            json={"name": name, "url": url, "honours_idempotency_keys": honours_idempotency_keys})
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
                               within: float = 30) -> list[dict[str, object]]:
        """The run's whole log, read from its SSE stream until the terminal event."""
        events: list[dict[str, object]] = []
        async with asyncio.timeout(within):
            async with self.client.stream("GET", f"/v1/runs/{run_id}/events",
                                          headers=headers, timeout=within) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        events.append(orjson.loads(line[6:]))
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


@pytest.fixture
async def api(database_dsn: str) -> AsyncIterator[Api]:
    """The real app on a real loopback port, on this test's database."""
    async with serving_api(database_dsn) as served:
        yield served


@asynccontextmanager
async def serving_api(database_dsn: str, *, local: LocalWorkers | None = None,
                      **overrides: object) -> AsyncIterator[Api]:
    """An API process's worth of app (its own pool, LISTEN connection and caches); with
    ``local``, worker loops in this process are handed to it as `tenantry up` does (the
    console and /metrics show their breakers, pools and figures)."""
    settings = Settings(**{  # type: ignore[arg-type]
        "database_url": database_dsn, "operator_token": OPERATOR_TOKEN, "db_pool_min": 1,
        "db_pool_max": 5, "max_body_bytes": 64 * 1024,
        "master_key": TEST_MASTER_KEY.encoded(), **overrides})
    port = free_port()
    config = uvicorn.Config(build_app(settings, database_dsn, local=local), host="127.0.0.1",
                            port=port,
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
            yield Api(base, client, {"Authorization": f"Bearer {OPERATOR_TOKEN}"})
    finally:
        server.should_exit = True
        await task


# -- the run engine -------------------------------------------------------------------------


@dataclass
class Fakes:
    model: FakeModelServer
    mcp: EffectsMcpServer


@pytest.fixture
async def fakes() -> AsyncIterator[Fakes]:
    """A fake OpenAI-compatible model server and an MCP server that counts effects, both
    real HTTP servers on loopback."""
    async with FakeModelServer() as model, EffectsMcpServer() as mcp:
        yield Fakes(model, mcp)


TEST_ENGINE = EngineSettings(lease_seconds=30.0, park_recheck_seconds=0.3)
# Fast ladders: short backoff, breakers that cool down (and get probed) within a second.
TEST_GATEWAY = GatewaySettings(backoff_seconds=0.02, max_backoff_seconds=0.1,
                               breaker_reset_seconds=0.3, breaker_max_reset_seconds=1.0,
                               probe_interval_seconds=0.05, refresh_seconds=0.2,
                               call_timeout_seconds=10.0)


@asynccontextmanager
async def running_worker(
    dsn: str, model_url: str | None, *, settings: EngineSettings = TEST_ENGINE,
    concurrency: int = 50, name: str = "test-worker", gateway: type[ToolGateway] = ToolGateway,
    model_gateway: GatewaySettings = TEST_GATEWAY, sandboxes: SandboxManager | None = None,
    metrics: WorkerMetrics | None = None, shedding: ShedThresholds | None = None,
) -> AsyncIterator[Worker]:
    """A real worker loop (in this process) on its own pool, until the block ends. Its model
    gateway routes over the accounts registered in the database plus, if ``model_url`` is
    given, that fake server as a configured account serving any model. With ``shedding``
    its claims follow the cell's load level (read on every claim), as a deployed worker's."""
    database = await Database.connect(dsn, min_size=1, max_size=10)
    vault = Vault(database, TEST_MASTER_KEY)
    implicit = []
    if model_url is not None:
        implicit.append((ModelAccount("fake", "openai", model_url, ("*",), "default",
                                      priority=1000), None))
    stop = asyncio.Event()
    metrics = metrics or WorkerMetrics()
    try:
        async with McpToolClient() as mcp, ModelGateway(
            database, vault=vault, master=TEST_MASTER_KEY, settings=model_gateway,
            implicit=implicit, observer=metrics,
        ) as model:
            tools = gateway(database, mcp, vault=vault, builtins=BuiltinTools(sandboxes))
            engine = Engine(db=database, model=model, tools=tools,
                            prices=PriceBook(database, refresh_seconds=0.2),
                            worker=worker_id(name), settings=settings,
                            sandboxes=sandboxes, metrics=metrics)
            webhooks = WebhookSender(database, allow_private=True)
            load = None if shedding is None else CellLoad(database, shedding, ttl_seconds=0)
            worker = Worker(engine, dsn=dsn, concurrency=concurrency, poll_seconds=0.1,
                            webhooks=webhooks, drain_seconds=1.0, load=load)
            task = asyncio.create_task(worker.run(stop))
            try:
                yield worker
            finally:
                stop.set()
                await task
                await webhooks.aclose()
    finally:
        await database.close()


@pytest.fixture
async def worker(database_dsn: str, fakes: Fakes) -> AsyncIterator[Worker]:
    async with running_worker(database_dsn, fakes.model.base_url) as w:
        yield w


async def until(
    check: Callable[[], Awaitable[bool]], what: str, within: float,
    details: Callable[[], str] = str,
) -> None:
    """Poll ``check`` (a database, API or log observation) until it holds."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within:.0f}s: {what}\n{details()}")
        await asyncio.sleep(0.05)


def scripted(*steps: dict[str, object], text: str = "go") -> dict[str, object]:
    """A run input carrying its own script for the fake model (see tenantry.models.scripted)."""
    return {"script": list(steps), "input": text}


def call(name: str, **arguments: object) -> dict[str, object]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def answer(text: str) -> dict[str, object]:
    return {"text": text}
