"""Numbered plain-SQL migrations (``migrations/NNNN_name.sql``), applied in order, each in
its own transaction, under an advisory lock so two processes starting at once cannot race.
An applied migration whose file later changed is an error, not a silent skip.

A database holds one :class:`Schema`: a cell's (``tenantry.db.migrations``, the default) or
another series with its own package, record table and lock (the global directory of cells,
``tenantry.cells``), so the two can never be applied to each other by mistake."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

import asyncpg

from tenantry.errors import ConfigurationError

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Schema:
    """One series of migrations: where its files are, where a database records them, and
    the advisory lock that serialises two processes migrating it at once."""

    package: str
    record_table: str
    lock_key: int


# Any lock constant works; it only has to be the same for every Tenantry process.
CELL = Schema("tenantry.db.migrations", "schema_migrations", 0x7E_4A_47_12)


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def available(schema: Schema = CELL) -> list[Migration]:
    found = []
    for entry in resources.files(schema.package).iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(
                Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8"))
            )
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise ConfigurationError(f"migrations must be numbered 1..N without gaps: {versions}")
    return found


async def migrate(
    conn: asyncpg.Connection,
    on_apply: Callable[[Migration], None] | None = None,
    *,
    schema: Schema = CELL,
    upto: int | None = None,
) -> list[Migration]:
    """Apply every pending migration (those numbered at most ``upto``, if given: benchmarks
    compare a schema before and after one); return the ones applied now."""
    table = schema.record_table
    await conn.execute("SELECT pg_advisory_lock($1)", schema.lock_key)
    try:
        await conn.execute(
            f"""
            CREATE TABLE IF NOT EXISTS {table} (
                version    integer PRIMARY KEY,
                name       text NOT NULL,
                sha256     text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )
            """
        )
        rows = await conn.fetch(f"SELECT version, name, sha256 FROM {table}")
        applied = {r["version"]: r for r in rows}
        known = available(schema)
        done: list[Migration] = []
        for migration in known:
            if upto is not None and migration.version > upto:
                break
            row = applied.get(migration.version)
            if row is not None:
                if row["sha256"] != migration.sha256:
                    raise ConfigurationError(
                        f"migration {migration.version:04d}_{migration.name} changed after it "
                        "was applied; add a new migration instead of editing an old one"
                    )
                continue
            if on_apply is not None:
                on_apply(migration)
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    f"INSERT INTO {table} (version, name, sha256) VALUES ($1, $2, $3)",
                    migration.version,
                    migration.name,
                    migration.sha256,
                )
            done.append(migration)
        unknown = sorted(set(applied) - {m.version for m in known})
        if unknown:
            raise ConfigurationError(
                f"database has migrations this code does not know: {unknown}; "
                "is an older Tenantry pointed at a newer database?"
            )
        return done
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", schema.lock_key)


async def pending(conn: asyncpg.Connection, schema: Schema = CELL) -> list[Migration]:
    table = schema.record_table
    exists = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", table)
    done: set[int] = set()
    if exists:
        done = {r["version"] for r in await conn.fetch(f"SELECT version FROM {table}")}
    return [m for m in available(schema) if m.version not in done]
