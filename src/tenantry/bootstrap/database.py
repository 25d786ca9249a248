"""The database a process uses: the external one TENANTRY_DATABASE_URL names, else the
embedded Postgres in the data dir; reaching it, migrating it, and checking the logins the
serving pools use (docs/decisions/0011-database-roles.md)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncpg

from tenantry import __version__
from tenantry.bootstrap import StartupFailed
from tenantry.config import Settings
from tenantry.db import DATABASE_DOWN, roles
from tenantry.db.embedded import EmbeddedPostgres
from tenantry.db.migrate import Applied, migrate, missing_routines, pending, schema_release
from tenantry.db.pool import connect_timeout, server_settings
from tenantry.db.reach import (
    CONNECT_FAILURES,
    URL_SOURCE,
    check_database,
    cluster_url,
    describe_failure,
)
from tenantry.db.release import Release
from tenantry.db.schema_files import Migration, Routine
from tenantry.db.status import behind
from tenantry.errors import ConfigurationError
from tenantry.vault import MasterKey, reseal_legacy_accounts

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(slots=True)
class ResolvedDatabase:
    #: Migrations and the operator's one-shot commands: the owner (the embedded superuser,
    #: or whoever TENANTRY_DATABASE_URL names).
    dsn: str
    embedded: EmbeddedPostgres | None
    #: The API's and workers' pools: the embedded cluster's powerless login, else the URL.
    app_dsn: str = ""
    #: The console's cross-tenant reads: its own login, else (external, unset) the app's.
    console_dsn: str = ""

    def __post_init__(self) -> None:
        self.app_dsn = self.app_dsn or self.dsn
        self.console_dsn = self.console_dsn or self.app_dsn

    @property
    def kind(self) -> str:
        """What the start-up banner says of it."""
        return "embedded" if self.embedded else "external"

    def stop(self) -> None:
        if self.embedded is not None and self.embedded.started_here:
            self.embedded.stop()

    def run(self, main: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """A one-shot command's ``main()`` run to its end, then this database stopped (if
        it was started here) however it ended. The database going away after ``main``'s
        start-up check is the one-line StartupFailed, not a traceback."""
        try:
            return asyncio.run(main())
        except DATABASE_DOWN as exc:  # it went away after the check
            raise StartupFailed(describe_failure(self.dsn, exc)) from None
        finally:
            self.stop()


def resolve_database(settings: Settings, *, create: bool = False) -> ResolvedDatabase:
    """``create``: make the embedded cluster if the data dir has none (only what sets a
    data dir up does: ``up`` and ``migrate``)."""
    console = _cluster_url(settings.console_database_url, "TENANTRY_CONSOLE_DATABASE_URL")
    if settings.database_url:
        return ResolvedDatabase(_cluster_url(settings.database_url, URL_SOURCE), None,
                                console_dsn=console)
    embedded = EmbeddedPostgres(settings.data_dir)
    owner = embedded.start(create=create)
    return ResolvedDatabase(owner, embedded, embedded.app_dsn, console or embedded.console_dsn)


def _cluster_url(url: str | None, source: str) -> str:
    """The URL every connection uses (several hosts: the writable one, db/dsn.py)."""
    return cluster_url(url, source) if url else ""


async def warn_of_powerful_logins(database: ResolvedDatabase, *, console: bool) -> None:
    """Log loudly if a serving login is a superuser, has BYPASSRLS, or (the tenant API's)
    may become the console role; ``console``: this process serves the console too. Never
    refuses: CI's Postgres is a trusted superuser and the whole suite runs on it."""
    logins = [(database.app_dsn, "tenant API and workers")]
    if console and database.console_dsn != database.app_dsn:
        logins.append((database.console_dsn, "console"))
    for dsn, what in logins:
        try:
            conn = await asyncpg.connect(dsn, timeout=connect_timeout(dsn))
        except CONNECT_FAILURES as exc:  # one line, as for the owner's URL (db/reach.py)
            raise ConfigurationError(f"{what}: {describe_failure(dsn, exc)}") from None
        try:
            roles.warn(await roles.login_warnings(conn, console=what == "console"), what)
        finally:
            await conn.close()


async def reseal_legacy_keys(dsn: str, master: MasterKey | None) -> list[str]:
    """After migrating: bind model accounts' keys sealed before migration 0015 to their
    provider and base_url (with the owner's connection: the application role may not)."""
    if master is None:
        return []
    conn = await asyncpg.connect(dsn)
    try:
        resealed = await reseal_legacy_accounts(conn, master)
    finally:
        await conn.close()
    if resealed:
        log.info("re-sealed %d model account key(s) bound to provider and base_url",
                 len(resealed), extra={"accounts": resealed})
    return resealed


async def apply_migrations(
    dsn: str, on_apply: Callable[[Migration | Routine], None] | None = None
) -> Applied:
    conn = await asyncpg.connect(dsn, server_settings=server_settings(purpose="migrate"))
    try:
        return await migrate(conn, on_apply)
    finally:
        await conn.close()


async def schema_behind(dsn: str, release: str = __version__) -> str | None:
    """Why this release may not serve the database, in one line (db/status.py's
    ``behind``), or None."""
    conn = await asyncpg.connect(dsn, server_settings=server_settings(purpose="start"))
    try:
        schema, contracted = await schema_release(conn)
        migrations = len(await pending(conn))
        routines = [r.name for r in await missing_routines(conn)]
    finally:
        await conn.close()
    return behind(Release.parse(release), schema, contracted, migrations, routines)


async def require_current_schema(dsn: str) -> None:
    """The database answers and its schema is current, else the one line saying why."""
    await check_database(dsn)
    behind = await schema_behind(dsn)
    if behind:
        raise StartupFailed(behind)
