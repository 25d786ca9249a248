"""Wiring the run engine's concrete pieces together, in one place (no import-time globals):
database pool, model client, MCP client, tool gateway, webhooks, the worker loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tenantry.blobs import DirectoryBlobStore
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.ledger.pricing import DEFAULT_PRICES
from tenantry.models.openai_compat import OpenAICompatible
from tenantry.platform_setup import master_key
from tenantry.runs.driver import Engine, EngineSettings
from tenantry.runs.lease import worker_id
from tenantry.runs.webhooks import WebhookSender
from tenantry.runs.worker import Worker
from tenantry.tools.gateway import ToolGateway
from tenantry.tools.mcp_client import McpToolClient
from tenantry.vault import Vault

logger = logging.getLogger(__name__)


@asynccontextmanager
async def model_client(settings: Settings) -> AsyncIterator[OpenAICompatible]:
    """The configured OpenAI-compatible endpoint, or — when none is configured — the
    built-in scripted model served on a loopback port (demos and local development)."""
    if settings.model_base_url:
        client = OpenAICompatible(settings.model_base_url, api_key=settings.model_api_key,
                                  account="configured")
        try:
            yield client
        finally:
            await client.aclose()
        return
    from tenantry.testing.fake_model import FakeModelServer

    async with FakeModelServer() as server:
        logger.info("no TENANTRY_MODEL_BASE_URL: using the built-in scripted model",
                    extra={"base_url": server.base_url})
        client = OpenAICompatible(server.base_url, account="scripted")
        client.provider = "scripted"
        try:
            yield client
        finally:
            await client.aclose()


@asynccontextmanager
async def engine(settings: Settings, dsn: str, *, name: str = "worker") -> AsyncIterator[Engine]:
    db = await Database.connect(dsn, role=settings.db_role or None,
                                min_size=min(2, settings.db_pool_max),
                                max_size=settings.db_pool_max)
    master = master_key(settings)
    vault = Vault(db, master) if master is not None else None
    if vault is None:
        logger.warning("no vault master key: tool servers with credentials will be refused")
    blobs = DirectoryBlobStore(settings.data_dir / "blobs")
    try:
        async with McpToolClient() as mcp, model_client(settings) as model:
            gateway = ToolGateway(db, mcp, vault=vault, blobs=blobs)
            yield Engine(
                db=db, model=model, tools=gateway, prices=DEFAULT_PRICES,
                worker=worker_id(name),
                settings=EngineSettings(lease_seconds=settings.lease_seconds),
            )
    finally:
        await db.close()


async def run_worker(settings: Settings, dsn: str, stop: asyncio.Event) -> None:
    async with engine(settings, dsn) as eng:
        webhooks = WebhookSender(eng.db, allow_private=settings.webhook_allow_private)
        control = await Database.connect(dsn, role=settings.db_role or None, min_size=1,
                                         max_size=2)
        try:
            await Worker(eng, dsn=dsn, concurrency=settings.worker_concurrency,
                         webhooks=webhooks, control=control).run(stop)
        finally:
            await control.close()
            await webhooks.aclose()
