"""``tenantry router`` (ADR 0028): reach the global directory, bring its schema current
(its own migration series, never a cell's), and serve the router's app until signalled."""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from tenantry import logs
from tenantry.bootstrap import StartupFailed
from tenantry.bootstrap.services import run_until_signalled
from tenantry.cells.directory import DIRECTORY
from tenantry.config import Settings
from tenantry.db import DATABASE_DOWN
from tenantry.db.migrate import migrate
from tenantry.db.reach import URL_SOURCE, check_database, cluster_url, describe_failure
from tenantry.errors import ConfigurationError

log = logging.getLogger(__name__)

#: Where the directory's URL comes from, for the one-line errors.
DIRECTORY_SOURCE = "--directory-url / TENANTRY_DIRECTORY_URL"


def directory_dsn(settings: Settings) -> str:
    if not settings.directory_url:
        raise StartupFailed("no global directory: set --directory-url / "
                            "TENANTRY_DIRECTORY_URL to its Postgres database")
    try:
        return cluster_url(settings.directory_url, DIRECTORY_SOURCE)
    except ConfigurationError as exc:
        raise StartupFailed(exc.detail) from None


async def open_directory(dsn: str) -> asyncpg.Connection:
    """A connection to the directory with its schema current, or the one line saying why
    not (naming the directory's setting, not the cell's)."""
    try:
        await check_database(dsn)
    except ConfigurationError as exc:
        raise StartupFailed("directory: " + exc.detail.replace(URL_SOURCE, DIRECTORY_SOURCE)) \
            from None
    try:
        conn = await asyncpg.connect(dsn)
        await migrate(conn, schema=DIRECTORY)
    except DATABASE_DOWN as exc:
        raise StartupFailed("directory: " + describe_failure(dsn, exc).replace(
            URL_SOURCE, DIRECTORY_SOURCE)) from None
    return conn


def serve(settings: Settings) -> None:
    logs.configure(settings.log_format)
    if not settings.operator_token:
        raise StartupFailed("the router needs an operator token: set --operator-token / "
                            "TENANTRY_OPERATOR_TOKEN")
    dsn = directory_dsn(settings)
    asyncio.run(_serve(settings, dsn))


async def _serve(settings: Settings, dsn: str) -> None:
    import uvicorn

    from tenantry.api.router.app import create_router_app, router_state
    from tenantry.api.router.server import RouterHttp
    from tenantry.bootstrap.http_server import ApiServer, api_service

    conn = await open_directory(dsn)
    await conn.close()
    app = create_router_app(settings, lambda: router_state(settings, dsn))
    # RouterHttp: a cut answer drops its caller's connection at once (api/router/server.py).
    config = uvicorn.Config(app, host=settings.router_host, port=settings.router_port,
                            log_config=None, access_log=False, lifespan="on",
                            timeout_graceful_shutdown=5, http=RouterHttp)
    log.info("router starting", extra={"host": settings.router_host,
                                       "port": settings.router_port})
    await run_until_signalled(api_service(ApiServer(config)))
