"""The database a process uses: the external one TENANTRY_DATABASE_URL names, else the
embedded Postgres in the data dir; reaching it, and migrating it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from tenantry.config import Settings
from tenantry.db.embedded import EmbeddedPostgres
from tenantry.db.migrate import Migration, migrate, pending


@dataclass(slots=True)
class ResolvedDatabase:
    dsn: str
    embedded: EmbeddedPostgres | None

    @property
    def kind(self) -> str:
        """What the start-up banner says of it."""
        return "embedded" if self.embedded else "external"

    def stop(self) -> None:
        if self.embedded is not None and self.embedded.started_here:
            self.embedded.stop()


def resolve_database(settings: Settings) -> ResolvedDatabase:
    if settings.database_url:
        return ResolvedDatabase(settings.database_url, None)
    embedded = EmbeddedPostgres(settings.data_dir)
    return ResolvedDatabase(embedded.start(), embedded)


async def apply_migrations(
    dsn: str, on_apply: Callable[[Migration], None] | None = None
) -> list[Migration]:
    conn = await asyncpg.connect(dsn)
    try:
        return await migrate(conn, on_apply)
    finally:
        await conn.close()


async def pending_migrations(dsn: str) -> int:
    """How many migrations the schema lacks."""
    conn = await asyncpg.connect(dsn)
    try:
        return len(await pending(conn))
    finally:
        await conn.close()
