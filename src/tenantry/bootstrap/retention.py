"""``tenantry retention run`` and ``retention erase``: one cleaner pass, or an erase carried
to its end, from the operator's shell (ADR 0017). Each resolves the database (starting the
embedded one if need be), checks it can be reached, and stops it afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from tenantry.blobs import Blobs, open_blobs
from tenantry.bootstrap import StartupFailed
from tenantry.bootstrap.blob_store import object_store
from tenantry.bootstrap.database import require_current_schema, resolve_database
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.db.roles import CONSOLE_ROLE
from tenantry.ids import TenantId
from tenantry.retention import erase
from tenantry.retention import policy as policies
from tenantry.retention.cleaner import Cleaner, CleanupSettings, PassResult

T = TypeVar("T")


@dataclass(slots=True)
class Pools:
    db: Database  # the tenant API's and workers' login
    console: Database | None  # the operator's (the console's) login, when asked for
    blobs: Blobs  # where deleted runs' blobs are deleted from


def parse_tenant(text: str) -> TenantId:
    try:
        return TenantId.parse(text)
    except ValueError as exc:
        raise StartupFailed(f"--tenant {text!r}: {exc}") from None


def run_pass(settings: Settings, tenant: str | None, batch: int,
             progress: Callable[[PassResult], None]) -> list[PassResult]:
    """One pass over ``tenant`` (due or not), or over every due tenant; then the blob
    outbox."""
    chosen = parse_tenant(tenant) if tenant is not None else None

    async def work(pools: Pools) -> list[PassResult]:
        if chosen is not None:
            await policies.get(pools.db, chosen)  # NotFound: one line, not a foreign key
        cleaner = _cleaner(pools, batch)
        return await cleaner.run_once([chosen] if chosen else None, progress=progress)

    return _with_pools(settings, work, console=False)


def show_policy(settings: Settings, tenant: str) -> policies.RetentionPolicy:
    """The tenant's retention policy in force (the defaults when never set)."""
    chosen = parse_tenant(tenant)

    async def work(pools: Pools) -> policies.RetentionPolicy:
        return await policies.get(pools.db, chosen)

    return _with_pools(settings, work, console=False)


def erase_tenant(settings: Settings, tenant: str, batch: int,
                 progress: Callable[[Any], None], poll_seconds: float = 1.0) -> erase.EraseJob:
    """Start (or join) the tenant's erase as the operator, then pass over it until done."""
    chosen = parse_tenant(tenant)

    async def work(pools: Pools) -> erase.EraseJob:
        assert pools.console is not None
        job = await erase.start(pools.db, chosen, requested_by="operator (cli)",
                                operator_db=pools.console)
        progress(job)
        return await erase.run_until_done(_cleaner(pools, batch), chosen,
                                          job.job_id, progress=progress,
                                          poll_seconds=poll_seconds)

    return _with_pools(settings, work, console=True)


def _cleaner(pools: Pools, batch: int) -> Cleaner:
    return Cleaner(pools.db, pools.blobs, settings=CleanupSettings(batch=batch))


def _with_pools(settings: Settings, work: Callable[[Pools], Awaitable[T]], *,
                console: bool) -> T:
    database = resolve_database(settings)

    async def main() -> T:
        # Current, not just reachable: a cluster never migrated has no login role to use.
        await require_current_schema(database.dsn)
        async with _pools(settings, database.app_dsn,
                          database.console_dsn if console else None) as pools:
            return await work(pools)

    return database.run(main)


@asynccontextmanager
async def _pools(settings: Settings, dsn: str, console_dsn: str | None,
                 ) -> AsyncIterator[Pools]:
    role = settings.db_role or None
    db = await Database.connect(dsn, role=role, min_size=1, max_size=2)
    console = None
    try:
        if console_dsn is not None:
            # Erasing shreds secrets through a function only the console's role may call
            # (ADR 0011), as POST /admin/v1/tenants/{id}/erase does.
            console = await Database.connect(console_dsn, role=CONSOLE_ROLE if role else None,
                                             min_size=1, max_size=1)
        async with object_store(settings) as objects:
            yield Pools(db, console, open_blobs(settings, db, objects))
    finally:
        if console is not None:
            await console.close()
        await db.close()
