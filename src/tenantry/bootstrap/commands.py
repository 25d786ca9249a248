"""The one-shot commands that open the platform's database: ``migrate``, ``vault
rotate-master-key`` and ``replay --tenant``'s reading of recorded runs. Each resolves the
database (starting the embedded one if need be), checks it can be reached, and stops it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncpg
from rich.console import Console

from tenantry import logs
from tenantry.bootstrap import StartupFailed
from tenantry.bootstrap.database import (
    apply_migrations,
    require_current_schema,
    reseal_legacy_keys,
    resolve_database,
)
from tenantry.bootstrap.secrets import master_key, replace_dev_key
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.db.contraction import contract as contract_steps
from tenantry.db.migrate import Applied
from tenantry.db.pool import server_settings
from tenantry.db.reach import check_database
from tenantry.db.schema_files import ContractStep, Migration, Routine
from tenantry.db.status import Status, read_status
from tenantry.errors import NotFound
from tenantry.ids import RunId, TenantId
from tenantry.retention import tombstones
from tenantry.runs.replay import RecordedRun, ended_runs, export_run, export_runs
from tenantry.tenants.service import get_tenant
from tenantry.vault import MasterKey
from tenantry.vault import rotate_master_key as rewrap

T = TypeVar("T")


def migrate(settings: Settings) -> Applied:
    """Apply pending migrations and changed routines, showing each on stderr."""
    logs.configure(settings.log_format)
    database = resolve_database(settings, create=True)
    return database.run(lambda: _migrate_with_progress(database.dsn, master_key(settings)))


def _shown(item: Migration | Routine) -> str:
    if isinstance(item, ContractStep):
        return f"contract step {item.label}"
    return f"migration {item.label}" if isinstance(item, Migration) else f"routine {item.name}"


async def _migrate_with_progress(dsn: str, master: MasterKey | None) -> Applied:
    await check_database(dsn)
    console = Console(stderr=True)
    with console.status("applying migrations") as status:
        def show(item: Migration | Routine) -> None:
            status.update(f"applying {_shown(item)}")
            console.log(_shown(item))

        applied = await apply_migrations(dsn, show)
    # Keys sealed before 0015 get bound to their account's provider and base_url now,
    # while the owner's connection is open (the serving role may not re-seal).
    for account in await reseal_legacy_keys(dsn, master):
        console.log(f"re-sealed model account {account}'s key")
    return applied


def migrate_status(settings: Settings) -> Status:
    """What `tenantry migrate --status` prints: read, nothing changed."""
    return _with_owner(settings, read_status)


def contract(settings: Settings) -> list[ContractStep]:
    """Apply the contract steps due, showing each on stderr (``--contract``)."""
    console = Console(stderr=True)

    async def steps(conn: asyncpg.Connection) -> list[ContractStep]:
        return await contract_steps(conn, lambda item: console.log(_shown(item)))

    return _with_owner(settings, steps)


def _with_owner(settings: Settings,
                work: Callable[[asyncpg.Connection], Coroutine[Any, Any, T]]) -> T:
    """``work`` on one connection of the owner's (the migrating role), named as a migrate."""
    logs.configure(settings.log_format)
    database = resolve_database(settings)

    async def run() -> T:
        await check_database(database.dsn)
        conn = await asyncpg.connect(database.dsn,
                                     server_settings=server_settings(purpose="migrate"))
        try:
            return await work(conn)
        finally:
            await conn.close()

    return database.run(run)


@dataclass(frozen=True, slots=True)
class Rotation:
    rewrapped: int  # tenant data keys
    key_id: str  # the new master key's
    dev_key_replaced: bool  # the data dir's development key now holds the new key


def rotate_master_key(settings: Settings, new_key: str) -> Rotation:
    """Re-wrap every tenant's data key under ``new_key`` (the current key: as configured)."""
    old = master_key(settings)
    new = MasterKey.parse(new_key, "--new-key")
    if old is None:
        raise StartupFailed("no current master key: set TENANTRY_MASTER_KEY")
    database = resolve_database(settings)

    async def rotate() -> int:
        await check_database(database.dsn)
        # The migrating role, not the application role: rotation touches every tenant.
        conn = await asyncpg.connect(database.dsn)
        try:
            return await rewrap(conn, old, new)
        finally:
            await conn.close()

    try:
        count = asyncio.run(rotate())
    finally:
        database.stop()
    return Rotation(count, new.key_id, replace_dev_key(settings, new))


EXPORT_PAGE = 500  # runs whose logs one export statement reads


def recorded_runs(
    settings: Settings, tenant_text: str, run_ids: list[str]
) -> list[tuple[str, RecordedRun]]:
    """A tenant's ended runs (or just ``run_ids``) as recorded runs, named by run id."""
    return asyncio.run(_recorded_runs(settings, tenant_text, run_ids))


async def _recorded_runs(
    settings: Settings, tenant_text: str, run_ids: list[str]
) -> list[tuple[str, RecordedRun]]:
    try:
        tenant = TenantId.parse(tenant_text)
        runs = [RunId.parse(r) for r in run_ids]
    except ValueError as exc:
        raise StartupFailed(str(exc)) from None
    database = resolve_database(settings)
    db: Database | None = None
    try:
        # Current, not just reachable: a cluster never migrated has no login role to use.
        await require_current_schema(database.dsn)
        db = await Database.connect(database.app_dsn, role=settings.db_role or None,
                                    min_size=1, max_size=2)
        try:
            await get_tenant(db, tenant)
        except NotFound:
            raise StartupFailed(f"tenant {tenant} does not exist") from None
        if not runs:  # every ended run, read in pages; one deleted meanwhile is left out
            ended = await ended_runs(db, tenant)
            return [(record.run_id, record)
                    for start in range(0, len(ended), EXPORT_PAGE)
                    for record in await export_runs(db, tenant,
                                                    ended[start:start + EXPORT_PAGE])]
        found = []
        for run in runs:
            try:
                found.append((str(run), await export_run(db, tenant, run)))
            except NotFound:
                stone = await tombstones.find(db, tenant, run)
                if stone is None:
                    raise
                # Its events are gone: nothing to replay, and no crash.
                raise StartupFailed(
                    f"{run}: tombstoned ({stone.status}, deleted by {stone.reason} "
                    f"at {stone.deleted_at:%Y-%m-%d %H:%M} UTC): its events are "
                    "gone") from None
        return found
    finally:
        # Whatever failed, the embedded Postgres started here stops: nothing left running.
        if db is not None:
            await db.close()
        database.stop()
