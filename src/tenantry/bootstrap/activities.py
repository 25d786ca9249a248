"""What ``tenantry activity-worker`` runs (ADR 0013): the activity dispatcher over a warm
pool of the strongest sandbox backend here, until SIGINT/SIGTERM.

Production, like ``tenantry worker``: it refuses to start below
TENANTRY_SANDBOX_MIN_BOUNDARY, with no sandbox backend at all, without the vault's master
key (activities read their scoped secrets from the vault) or with migrations pending —
each a one-line error, never a traceback."""

from __future__ import annotations

import asyncio
import logging

from tenantry import logs
from tenantry.activities.warmup import warm_attempt_path
from tenantry.bootstrap import StartupFailed
from tenantry.bootstrap.database import ResolvedDatabase, pending_migrations, resolve_database
from tenantry.bootstrap.secrets import master_key
from tenantry.bootstrap.services import run_until_signalled
from tenantry.config import Settings
from tenantry.db import DATABASE_DOWN, Database
from tenantry.db.reach import check_database, describe_failure
from tenantry.sandbox import probe as sandbox_probe
from tenantry.sandbox.pool import PooledDriver
from tenantry.store.dispatcher import Dispatcher
from tenantry.vault import MasterKey, Vault

logger = logging.getLogger(__name__)


def serve(settings: Settings) -> None:
    logs.configure(settings.log_format)
    found = sandbox_probe.require_boundary(settings)
    if found.backend is None:
        raise StartupFailed("tenantry activity-worker needs a sandbox backend and none "
                            "works here; see `tenantry sandbox probe`")
    master = master_key(settings)
    if master is None:
        raise StartupFailed("tenantry activity-worker needs the vault's master key (its "
                            "activities read their secrets): set TENANTRY_MASTER_KEY")
    database = resolve_database(settings)
    try:
        asyncio.run(_serve(settings, database, master, found.backend))
    except DATABASE_DOWN as exc:
        raise StartupFailed(describe_failure(database.dsn, exc)) from None
    finally:
        database.stop()


async def _serve(settings: Settings, database: ResolvedDatabase, master: MasterKey,
                 backend: str) -> None:
    await check_database(database.dsn)
    missing = await pending_migrations(database.dsn)
    if missing:
        raise StartupFailed(f"{missing} migration(s) pending; run 'tenantry migrate'")
    db = await Database.connect(database.app_dsn, role=settings.db_role or None,
                                min_size=1, max_size=min(settings.db_pool_max,
                                                         settings.activity_worker_slots + 2))
    limits = sandbox_probe.default_limits(settings)
    driver = PooledDriver(sandbox_probe.build_backend(backend, settings),
                          pool_size=settings.sandbox_pool_size, limits=limits,
                          warm_up=warm_attempt_path)
    driver.start()
    dispatcher = Dispatcher(db, Vault(db, master), driver,
                            slots=settings.activity_worker_slots,
                            claim_batch=settings.activity_worker_slots,
                            lease_seconds=float(settings.lease_seconds), limits=limits)

    async def dispatching(stop: asyncio.Event) -> None:
        dispatcher.start()
        logger.info("activity worker started", extra={
            "worker": dispatcher.worker_id, "backend": backend,
            "slots": settings.activity_worker_slots})
        await stop.wait()
        await dispatcher.stop()

    try:
        await run_until_signalled(dispatching)
    finally:
        await driver.close()
        await db.close()
