"""A real worker loop in the test process, with the fake model and MCP servers it uses."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from tenantry.blobs import WORKER_PATIENCE_SECONDS, Blobs, ObjectStore
from tenantry.db import Database
from tenantry.ledger.prices import PriceBook
from tenantry.models.accounts import ModelAccount
from tenantry.models.clients import http_client
from tenantry.models.gateway import GatewaySettings, ModelGateway
from tenantry.runs.engine import Engine, EngineSettings
from tenantry.runs.lease import worker_id
from tenantry.runs.webhooks import WebhookSender
from tenantry.runs.worker import Worker
from tenantry.sandbox.manager import SandboxManager
from tenantry.scheduler.shedding import CellLoad, ShedThresholds
from tenantry.telemetry.worker import WorkerMetrics
from tenantry.testing.fake_model import FakeModelServer
from tenantry.testing.mcp_server import EffectsMcpServer
from tenantry.tools.builtin import BrowserPolicy, BuiltinTools
from tenantry.tools.destinations import MODEL_ACCOUNT, Destinations
from tenantry.tools.gateway import ToolGateway
from tenantry.tools.mcp_client import McpToolClient
from tenantry.vault import Vault
from tests.support.api import TEST_MASTER_KEY
from tests.support.db import login_dsn


@dataclass
class Fakes:
    model: FakeModelServer
    mcp: EffectsMcpServer


#: The tests' tool servers are on this machine: tenants' own may be there too.
LOCAL_TOOL_SERVERS = Destinations(allow_private=True)
#: So are their model providers: the accounts tenants register connect through the same
#: guard as a deployed worker's (bootstrap/worker.py), with private addresses allowed.
LOCAL_MODEL_ACCOUNTS = Destinations(allow_private=True, subject=MODEL_ACCOUNT)
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
    webhooks: Callable[[Database], WebhookSender] | None = None,
    browser: BrowserPolicy | None = None, poll_seconds: float = 0.1,
    objects: ObjectStore | None = None,
) -> AsyncIterator[Worker]:
    """A real worker loop (in this process) on its own pool, until the block ends. Its model
    gateway routes over the accounts registered in the database plus, if ``model_url`` is
    given, that fake server as a configured account serving any model. With ``shedding``
    its claims follow the cell's load level (read on every claim), as a deployed worker's.
    ``webhooks``: makes the worker's webhook sender on its pool (default: private
    addresses allowed, default limits). ``poll_seconds``: its idle poll and housekeeping
    interval (a deployed worker's is 1 s). ``objects``: the object store its large tool
    outputs go to, through a registry on its own pool (None: they are capped, not kept)."""
    database = await Database.connect(login_dsn(dsn), min_size=1, max_size=10)
    vault = Vault(database, TEST_MASTER_KEY)
    implicit = []
    if model_url is not None:
        implicit.append((ModelAccount("fake", "openai", model_url, ("*",), "default",
                                      priority=1000), None))
    stop = asyncio.Event()
    metrics = metrics or WorkerMetrics()
    try:
        async with McpToolClient(destinations=LOCAL_TOOL_SERVERS) as mcp, ModelGateway(
            database, vault=vault, master=TEST_MASTER_KEY, settings=model_gateway,
            implicit=implicit, observer=metrics,
            client_factory=functools.partial(http_client,
                                             guard=LOCAL_MODEL_ACCOUNTS.connect_to),
        ) as model:
            # As a deployed worker's: a write waits out a short outage of the store.
            blobs = None if objects is None else Blobs(
                database, objects, patience_seconds=WORKER_PATIENCE_SECONDS)
            kept = {} if blobs is None else {"blobs": blobs}
            tools = gateway(database, mcp, vault=vault, builtins=BuiltinTools(sandboxes, browser),
                            **kept)
            engine = Engine(db=database, model=model, tools=tools, blobs=blobs,
                            prices=PriceBook(database, refresh_seconds=0.2),
                            worker=worker_id(name), settings=settings,
                            sandboxes=sandboxes, metrics=metrics)
            sender = (webhooks(database) if webhooks is not None
                      else WebhookSender(database, allow_private=True))
            load = None if shedding is None else CellLoad(database, shedding, ttl_seconds=0)
            worker = Worker(engine, dsn=dsn, concurrency=concurrency, poll_seconds=poll_seconds,
                            webhooks=sender, drain_seconds=1.0, load=load)
            task = asyncio.create_task(worker.run(stop))
            try:
                yield worker
            finally:
                stop.set()
                await task
                await sender.aclose()
    finally:
        await database.close()
