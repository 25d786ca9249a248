"""The HTTP API's pieces, built for the app's lifespan: the database pool, the event hub
(which also carries key revocations), the MCP client, the vault and admission's view of
the cell. :func:`build_app` hands them to :func:`tenantry.api.app.create_app`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from tenantry.api.app import create_app
from tenantry.api.platform import Platform
from tenantry.blobs import open_blobs, open_objects
from tenantry.bootstrap.secrets import master_key
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.db.outage import Outage
from tenantry.db.roles import CONSOLE_ROLE
from tenantry.runs.hub import EventHub
from tenantry.runs.inprocess import LocalWorkers
from tenantry.scheduler.admission import CellCapacity
from tenantry.scheduler.shedding import CellLoad, ShedThresholds
from tenantry.tenants.auth_cache import CHANNEL as KEY_CHANNEL
from tenantry.tenants.auth_cache import AuthCache
from tenantry.tenants.oidc import OidcProvider
from tenantry.tools.destinations import MODEL_ACCOUNT, Destinations
from tenantry.tools.mcp_client import McpToolClient
from tenantry.vault import Vault

logger = logging.getLogger(__name__)


def build_app(
    settings: Settings, dsn: str, *, console_dsn: str | None = None,
    local: LocalWorkers | None = None, outage: Outage | None = None,
) -> FastAPI:
    """``dsn`` is the resolved database's serving login (the embedded one's or
    TENANTRY_DATABASE_URL); ``console_dsn``: the console's own login (None: ``dsn``);
    ``local``: the workers sharing this process, if any (`tenantry up`); ``outage``: the
    process's record of database outages, shared with those workers (one log line each)."""
    return create_app(settings, lambda: platform(settings, dsn, console_dsn=console_dsn,
                                                 local=local, outage=outage))


@asynccontextmanager
async def platform(
    settings: Settings, dsn: str, *, console_dsn: str | None = None,
    local: LocalWorkers | None = None, outage: Outage | None = None,
) -> AsyncIterator[Platform]:
    """What every request handler needs, open for as long as the app serves."""
    db = await Database.connect(
        dsn, role=settings.db_role or None, min_size=settings.db_pool_min,
        max_size=settings.db_pool_max, outage=outage,
    )
    # The console's cross-tenant reads: a small pool of their own, whose login alone may
    # become tenantry_console; the tenant pool's login cannot (ADR 0011). It connects on
    # first use: a console login still to be made costs the console, not the tenant API.
    try:
        console_db = await Database.connect(
            console_dsn or settings.console_database_url or dsn,
            role=CONSOLE_ROLE if settings.db_role else None, min_size=0, max_size=2,
            outage=db.outage)
    except BaseException:
        await db.close()
        raise
    auth_cache = AuthCache()
    # One LISTEN connection carries both the event tails and key revocations.
    hub = EventHub(dsn, extra={KEY_CHANNEL: auth_cache.clear}, outage=db.outage)
    mcp = McpToolClient(destinations=Destinations.of(settings))
    master = master_key(settings)
    # Checked before serving (process.py): here it is only opened. No patience: a read
    # of a store that does not answer is a 503 at once.
    objects = open_objects(settings)
    try:
        await hub.start()
        vault = Vault(db, master) if master is not None else None
        platform = Platform(
            settings, db, hub, mcp, vault, console_db=console_db, auth_cache=auth_cache,
            master=master, blobs=open_blobs(settings, db, objects),
            model_destinations=Destinations.of(settings, MODEL_ACCOUNT),
            cell=CellCapacity(CellLoad(db, ShedThresholds.of(settings),
                                       settings.load_read_seconds)), local=local,
            oidc=OidcProvider(settings.oidc_issuer, settings.oidc_client_id or "",
                              settings.oidc_client_secret) if settings.oidc_issuer else None)
        if settings.operator_token and not await platform.operator_tokens.seed():
            logger.warning("the configured operator token was retired by a rotation: "
                           "/admin/v1 and the console's login refuse it; configure the "
                           "current one (TENANTRY_OPERATOR_TOKEN)")
        try:
            yield platform
        finally:
            await platform.intake.close()
    finally:
        await objects.close()
        await mcp.aclose()
        await hub.close()
        await console_db.close()
        await db.close()
