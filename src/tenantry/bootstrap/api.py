"""The HTTP API's pieces, built for the app's lifespan: the database pool, the event hub
(which also carries key revocations), the MCP client, the vault and admission's view of
the cell. :func:`build_app` hands them to :func:`tenantry.api.app.create_app`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from tenantry.api.app import create_app
from tenantry.api.platform import Platform
from tenantry.bootstrap.secrets import master_key
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.db.outage import Outage
from tenantry.runs.hub import EventHub
from tenantry.runs.inprocess import LocalWorkers
from tenantry.scheduler.admission import CellCapacity
from tenantry.scheduler.shedding import CellLoad, ShedThresholds
from tenantry.tenants.auth_cache import CHANNEL as KEY_CHANNEL
from tenantry.tenants.auth_cache import AuthCache
from tenantry.tools.mcp_client import McpToolClient
from tenantry.vault import Vault


def build_app(
    settings: Settings, dsn: str, *, local: LocalWorkers | None = None,
    outage: Outage | None = None,
) -> FastAPI:
    """``dsn`` is the resolved database (the embedded one's or TENANTRY_DATABASE_URL);
    ``local``: the workers sharing this process, if any (`tenantry up`); ``outage``: the
    process's record of database outages, shared with those workers (one log line each)."""
    return create_app(settings, lambda: platform(settings, dsn, local=local, outage=outage))


@asynccontextmanager
async def platform(
    settings: Settings, dsn: str, *, local: LocalWorkers | None = None,
    outage: Outage | None = None,
) -> AsyncIterator[Platform]:
    """What every request handler needs, open for as long as the app serves."""
    db = await Database.connect(
        dsn, role=settings.db_role or None, min_size=settings.db_pool_min,
        max_size=settings.db_pool_max, outage=outage,
    )
    auth_cache = AuthCache()
    # One LISTEN connection carries both the event tails and key revocations.
    hub = EventHub(dsn, extra={KEY_CHANNEL: auth_cache.clear}, outage=db.outage)
    mcp = McpToolClient()
    master = master_key(settings)
    try:
        await hub.start()
        vault = Vault(db, master) if master is not None else None
        yield Platform(
            settings, db, hub, mcp, vault, auth_cache=auth_cache, master=master,
            cell=CellCapacity(CellLoad(db, ShedThresholds.of(settings),
                                       settings.load_read_seconds)), local=local)
    finally:
        await mcp.aclose()
        await hub.close()
        await db.close()
