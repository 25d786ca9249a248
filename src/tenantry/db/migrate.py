"""The schema of a database: numbered migrations, then routines (ADR 0037).

Migrations (``migrations/NNNN_name.sql``) are the schema's history: tables, columns,
indexes, constraints, policies, grants on tables and data moves. They are applied in order,
each in its own transaction, and recorded with their sha256; an applied migration whose file
later changed is an error, not a silent skip.

Routines (``routines/name.sql``) are source: one file per function (with its grants and, for
a trigger function, its triggers) or view, the definition the database has now. After the
pending migrations, every routine whose sha256 differs from the one recorded, or whose
function, view or trigger is missing (a migration may drop a view to alter a column), is
applied again, all in one transaction. A routine marked ``-- phase: early`` (one that a
migration's DDL calls, such as the row-level security policies' tenant) is applied before
the pending migrations instead. Everything happens under one advisory lock, so two
processes starting at once cannot race.

A database holds one :class:`Schema`: a cell's (``tenantry.db.migrations`` and
``tenantry.db.routines``, the default) or another series with its own package, record table
and lock (the global directory of cells, ``tenantry.cells``), so the two can never be
applied to each other by mistake.

Online, beside live processes (a rolling upgrade), each transaction gives way instead of
deadlocking them: it waits at most :data:`LOCK_TIMEOUT` for any lock (below Postgres's
``deadlock_timeout``, so the migrator is the one that steps back before a deadlock is even
looked for), then rolls back and tries again (:func:`_giving_way`). Triggers on several tables
in one routine file take their locks in the file's order, which live transactions do not
follow: without this, a migrator holding one table's lock and waiting for another's could
meet a transaction holding the second and wanting the first.

Expand, then contract (docs/reference/architecture.md, "Changing the schema"): a release's
migrations only add, or change what the previous release does not read, so that release's
processes keep running on the new schema during a rolling upgrade. What the previous
release uses goes in a *contract step* (``contract/NNNN_name.sql``), applied by
:func:`tenantry.db.contraction.contract` (``tenantry migrate --contract``) once no process of
an older release is connected; recorded in a table of its own. A database migrated from
empty has no older process: its contract steps are applied at once. :func:`migrate` records
the release that migrated the database (``schema_releases``), refuses a database of a newer
release than its own, and refuses to change a schema while a process of a release the new
schema does not serve is connected (db/release.py)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import asyncpg

from tenantry import __version__
from tenantry.db.fleet import read_fleet
from tenantry.db.pool import Connection
from tenantry.db.release import FIRST, Release, describe_all, oldest_served, served_text
from tenantry.db.schema_files import (
    CELL,
    COMMENT,
    ContractStep,
    M,
    Migration,
    Routine,
    Schema,
    available,
    contract_steps,
    rewritten,
    routines,
)
from tenantry.errors import ConfigurationError

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: How long one of the migrator's transactions waits for a lock live transactions hold
#: (below ``deadlock_timeout``'s default of 1 s: the migrator steps back first).
LOCK_TIMEOUT = "500ms"
#: Tries of one transaction before the migrator gives up (about two minutes of waiting).
LOCK_ATTEMPTS = 80
_GIVE_WAY = (asyncpg.LockNotAvailableError, asyncpg.DeadlockDetectedError)


async def _giving_way(what: str, attempt: Callable[[], Awaitable[T]]) -> T:
    """``attempt()`` (one transaction that sets ``lock_timeout`` to :data:`LOCK_TIMEOUT`),
    again after a short, growing, jittered pause each time it could not take a lock."""
    for tried in range(1, LOCK_ATTEMPTS + 1):
        try:
            return await attempt()
        except _GIVE_WAY as exc:
            if tried == LOCK_ATTEMPTS:
                raise ConfigurationError(
                    f"{what} could not take its locks in {LOCK_ATTEMPTS} tries: live "
                    f"transactions kept holding them ({exc}); try again when the platform "
                    "is quieter") from None
            logger.info("%s gave way to live transactions (%s); trying again", what,
                        type(exc).__name__)
            await asyncio.sleep(min(0.05 * 2 ** min(tried, 5), 1.5) * random.uniform(0.5, 1))
    raise AssertionError("unreachable")


@dataclass(slots=True)
class Applied:
    """What :func:`migrate` applied, in order."""

    migrations: list[Migration] = field(default_factory=list)
    routines: list[Routine] = field(default_factory=list)
    #: Only on a database migrated from empty (no older process can be connected to it).
    contract: list[ContractStep] = field(default_factory=list)
    #: Contract steps left for ``tenantry migrate --contract``.
    contract_due: list[ContractStep] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Recorded:
    """What a database recorded of a schema: the migrations and contract steps applied
    (version -> sha256), the routines (name -> sha256) and the releases that migrated it."""

    migrations: dict[int, str]
    routines: dict[str, str]
    contract: dict[int, str]
    releases: tuple[Release, ...]
    #: Releases whose `tenantry migrate --contract` applied a step (or that migrated the
    #: database from empty, with its steps): older releases' processes are not served.
    contracted: tuple[Release, ...] = ()

    @property
    def release(self) -> Release | None:
        """The newest release that migrated the database: :data:`FIRST` for one migrated
        before releases were recorded, None for one never migrated."""
        if self.releases:
            return max(self.releases)
        return Release.parse(FIRST) if self.migrations else None

    @property
    def contracted_by(self) -> Release | None:
        return max(self.contracted) if self.contracted else None


_OBJECTS = """
SELECT 'function' AS kind, p.proname::text AS name FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace
UNION ALL
SELECT 'view', c.relname::text FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'v'
UNION ALL
SELECT 'trigger', c.relname || '.' || t.tgname FROM pg_trigger t
JOIN pg_class c ON c.oid = t.tgrelid
WHERE c.relnamespace = current_schema()::regnamespace AND NOT t.tgisinternal
  AND t.tgparentid = 0
"""


async def existing_objects(conn: Connection) -> set[tuple[str, str]]:
    """The functions, views and triggers the database has (from the catalog: any role)."""
    return {(r["kind"], r["name"]) for r in await conn.fetch(_OBJECTS)}


async def migrate(
    conn: asyncpg.Connection,
    on_apply: Callable[[Migration | Routine], None] | None = None,
    *,
    schema: Schema = CELL,
    release: str = __version__,
) -> Applied:
    """Apply the early routines that changed, every pending migration, then every routine
    that changed or whose objects are missing, and record ``release`` as having migrated
    the database; return what was applied. ``on_apply`` hears of each just before it is
    applied. Refused, before anything is applied: a database of a newer release, an
    edited migration, and a change while a process of a release the new schema does not
    serve is connected. A database migrated from empty gets its contract steps too."""
    code = Release.parse(release)
    await conn.execute("SELECT pg_advisory_lock($1)", schema.lock_key)
    try:
        await create_record_tables(conn, schema)
        known = available(schema)
        todo = routines(schema)
        found = await recorded(conn, schema)
        refuse_newer(found, schema, code)
        await check_applied(conn, schema, known, found)
        fresh = not found.migrations
        pending_ = [m for m in known if m.version not in found.migrations]
        if not fresh and (pending_ or await due_routines(conn, schema, found, todo)):
            await refuse_leaving_behind(conn, schema, code)
        applied = Applied()
        await _apply_routines(conn, schema, [r for r in todo if r.early], on_apply, applied)
        applied.migrations = await apply_steps(conn, schema, schema.record_table, pending_,
                                               on_apply)
        await _apply_routines(conn, schema, todo, on_apply, applied)
        steps = contract_steps(schema)
        if fresh:
            applied.contract = await apply_steps(
                conn, schema, schema.contract_table, steps, on_apply, contracted_by=code)
        else:
            applied.contract_due = [s for s in steps if s.version not in found.contract]
        if schema.release_table is not None:
            await conn.execute(
                f"INSERT INTO {schema.release_table} (release) VALUES ($1) "
                "ON CONFLICT (release) DO UPDATE SET migrated_at = now()", code.text)
        return applied
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", schema.lock_key)


async def create_record_tables(conn: asyncpg.Connection, schema: Schema) -> None:
    tables = [schema.record_table]
    if schema.contract is not None:
        tables.append(schema.contract_table)
    for table in tables:
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
    if schema.routines is not None:
        await conn.execute(
            f"""
            CREATE TABLE IF NOT EXISTS {schema.routine_table} (
                name       text PRIMARY KEY,
                sha256     text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )
            """
        )
    if schema.release_table is not None:
        # The release of each `tenantry migrate` that ran (its last run): the newest is the
        # schema's, which a process checks it is served by before it starts.
        await conn.execute(
            f"""
            CREATE TABLE IF NOT EXISTS {schema.release_table} (
                release       text PRIMARY KEY,
                migrated_at   timestamptz NOT NULL DEFAULT now(),
                -- When its contract steps were applied: releases before its line are
                -- served no more (what they use may be gone).
                contracted_at timestamptz
            )
            """
        )


async def _exists(conn: asyncpg.Connection, table: str) -> bool:
    return bool(await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", table))


async def recorded(conn: asyncpg.Connection, schema: Schema = CELL) -> Recorded:
    """What the database recorded (nothing of a table it lacks)."""
    async def shas(table: str | None, key: str) -> dict[Any, str]:
        if table is None or not await _exists(conn, table):
            return {}
        return {r[0]: r[1] for r in await conn.fetch(f"SELECT {key}, sha256 FROM {table}")}

    releases, contracted = await _releases(conn, schema)
    return Recorded(
        await shas(schema.record_table, "version"),
        await shas(schema.routine_table if schema.routines is not None else None, "name"),
        await shas(schema.contract_table if schema.contract is not None else None,
                   "version"),
        releases, contracted)


async def _releases(conn: asyncpg.Connection, schema: Schema
                    ) -> tuple[tuple[Release, ...], tuple[Release, ...]]:
    """The releases that migrated the database, and those that contracted it."""
    table = schema.release_table
    if table is None or not await _exists(conn, table):
        return (), ()
    rows = await conn.fetch(
        f"SELECT release, contracted_at IS NOT NULL AS contracted FROM {table}")
    found = [(_parse_recorded(r["release"], table), r["contracted"]) for r in rows]
    return tuple(r for r, _ in found), tuple(r for r, contracted in found if contracted)


def _parse_recorded(text: str, table: str) -> Release:
    try:
        return Release.parse(text)
    except ValueError:
        raise ConfigurationError(f"{table} holds {text!r}, which is not a release") from None


async def schema_release(conn: asyncpg.Connection, schema: Schema = CELL
                         ) -> tuple[Release | None, Release | None]:
    """The release whose schema the database has and the newest that contracted it (see
    :class:`Recorded`), read with what a serving login may read (migration 0041)."""
    releases, contracted = await _releases(conn, schema)
    if releases:
        return max(releases), max(contracted) if contracted else None
    if await _exists(conn, schema.record_table) and await conn.fetchval(
            f"SELECT EXISTS (SELECT 1 FROM {schema.record_table})"):
        return Release.parse(FIRST), None
    return None, None


def newer_than_code(found: Recorded, schema: Schema, code: Release) -> str | None:
    """What says the database is of a newer release than ``code``, in one line, or None:
    a newer release recorded, or migrations, routines or contract steps this code does not
    know (a routine's record whose file is gone is known while a step of this code
    retires it)."""
    known = available(schema)
    steps = contract_steps(schema)
    retired = {name for step in [*known, *steps] for name in step.retires}
    migrations = sorted(set(found.migrations) - {m.version for m in known})
    contract = sorted(set(found.contract) - {s.version for s in steps})
    names = sorted(set(found.routines) - {r.name for r in routines(schema)} - retired)
    unknown = []
    if migrations:
        unknown.append(f"migration(s) {', '.join(f'{v:04d}' for v in migrations)}")
    if names:
        unknown.append(f"routine(s) {', '.join(names)}")
    if contract:
        unknown.append(f"contract step(s) {', '.join(f'{v:04d}' for v in contract)}")
    facts = []
    if found.release is not None and found.release > code:
        facts.append(f"release {found.release} migrated it")
    if unknown:
        facts.append(f"it has {' and '.join(unknown)} this code does not know")
    if not facts:
        return None
    return (f"database is of a newer release than this code ({code}): "
            f"{'; '.join(facts)}")


def refuse_newer(found: Recorded, schema: Schema, code: Release) -> None:
    """An older release's migrate would put back its own routines: refused, before
    anything is applied."""
    newer = newer_than_code(found, schema, code)
    if newer is not None:
        # The directory of cells is migrated by `tenantry router` as it starts.
        how = "'tenantry migrate'" if schema.release_table is not None else "router"
        raise ConfigurationError(f"{newer}; run the newest release's {how}")


async def refuse_leaving_behind(conn: asyncpg.Connection, schema: Schema,
                                code: Release) -> None:
    """Release ``code``'s schema serves its own release line and the one before: with a
    process of an older line connected, changing the schema is refused (one line naming
    those releases; nothing changed)."""
    if schema.release_table is None:
        return
    behind = (await read_fleet(conn)).older_than(oldest_served(code))
    if behind:
        raise ConfigurationError(
            f"not migrated: {describe_all(behind)} connected, and release {code}'s schema "
            f"serves releases {served_text(code)} only; stop or upgrade those processes "
            "first ('tenantry migrate --status' lists what is connected)")


async def check_applied(
    conn: asyncpg.Connection, schema: Schema, known: list[Migration], found: Recorded,
) -> None:
    """Every applied migration and contract step is this code's, unedited."""
    table = schema.record_table
    originals = rewritten(schema)
    for migration in known:
        sha = found.migrations.get(migration.version)
        if sha is None or sha == migration.sha256:
            continue
        if sha == originals.get(migration.version):
            # Applied before it was rewritten in place (rewritten.txt): the same migration,
            # recorded as the file now reads, so that every cell of a release records the
            # same (a tenant moves only between equal schemas, cells/copy.py).
            await conn.execute(f"UPDATE {table} SET sha256 = $2 WHERE version = $1",
                               migration.version, migration.sha256)
        else:
            raise ConfigurationError(
                f"migration {migration.label} changed after it "
                "was applied; add a new migration instead of editing an old one"
            )
    for step in contract_steps(schema):
        sha = found.contract.get(step.version)
        if sha is not None and sha != step.sha256:
            raise ConfigurationError(
                f"contract step {step.label} changed after it was applied; add a new "
                "step instead of editing an old one")


async def apply_steps(
    conn: asyncpg.Connection, schema: Schema, table: str, todo: list[M],
    on_apply: Callable[[Migration | Routine], None] | None,
    *, contracted_by: Release | None = None,
) -> list[M]:
    """Apply migrations or contract steps, each in its own transaction with its record
    (and the forgetting of the routines it retires; for contract steps, the release that
    contracted the database, ``contracted_by``)."""
    done = []
    for step in todo:
        if on_apply is not None:
            on_apply(step)

        async def apply(step: M = step) -> None:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                # A migration whose statements all became routines is comments alone, which
                # the server answers with no command at all (asyncpg fails on that).
                if COMMENT.sub("", step.sql).strip():
                    await conn.execute(step.sql)
                await conn.execute(
                    f"INSERT INTO {table} (version, name, sha256) VALUES ($1, $2, $3)",
                    step.version, step.name, step.sha256)
                if step.retires and schema.routines is not None:
                    await conn.execute(
                        f"DELETE FROM {schema.routine_table} WHERE name = ANY ($1)",
                        list(step.retires))
                if contracted_by is not None and schema.release_table is not None:
                    await conn.execute(
                        f"INSERT INTO {schema.release_table} (release, contracted_at) "
                        "VALUES ($1, now()) "
                        "ON CONFLICT (release) DO UPDATE SET contracted_at = now()",
                        contracted_by.text)

        await _giving_way(step.label, apply)
        done.append(step)
    return done


async def due_routines(conn: asyncpg.Connection, schema: Schema, found: Recorded,
                       todo: list[Routine] | None = None) -> list[Routine]:
    """The routines (of ``todo``, else all) whose text differs from the one recorded or
    whose function, view or trigger the database lacks."""
    if schema.routines is None:
        return []
    return routines_due(found, await existing_objects(conn),
                        routines(schema) if todo is None else todo)


def routines_due(found: Recorded, existing: set[tuple[str, str]],
                 todo: list[Routine]) -> list[Routine]:
    return [r for r in todo
            if found.routines.get(r.name) != r.sha256 or not set(r.objects) <= existing]


async def _apply_routines(
    conn: asyncpg.Connection, schema: Schema, todo: list[Routine],
    on_apply: Callable[[Migration | Routine], None] | None, applied: Applied,
) -> None:
    """Apply those of ``todo`` that changed or lack an object. A record whose file is gone
    stays: a step of this code retires it (:func:`newer_than_code` refused the others)."""
    if schema.routines is None:
        return
    due = await due_routines(conn, schema, await recorded(conn, schema), todo)
    if not due:
        return
    shown: set[str] = set()  # each routine's progress line once, however many tries

    async def apply() -> None:
        async with conn.transaction():
            await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            # Bodies are checked when they run, not here: the files' order then matters only
            # where a statement needs another routine at once (a trigger's WHEN, a view).
            await conn.execute("SET LOCAL check_function_bodies = off")
            for routine in due:
                if on_apply is not None and routine.name not in shown:
                    shown.add(routine.name)
                    on_apply(routine)
                try:
                    await conn.execute(routine.sql)
                except _GIVE_WAY:
                    raise
                except asyncpg.PostgresError as exc:
                    raise ConfigurationError(
                        f"routine {routine.name}.sql could not be applied: {exc}") from exc
                await conn.execute(
                    f"INSERT INTO {schema.routine_table} (name, sha256) VALUES ($1, $2) "
                    "ON CONFLICT (name) DO UPDATE SET sha256 = EXCLUDED.sha256, "
                    "applied_at = now()",
                    routine.name, routine.sha256)

    await _giving_way("the routines", apply)
    applied.routines.extend(due)


async def pending(conn: asyncpg.Connection, schema: Schema = CELL) -> list[Migration]:
    table = schema.record_table
    exists = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", table)
    done: set[int] = set()
    if exists:
        done = {r["version"] for r in await conn.fetch(f"SELECT version FROM {table}")}
    return [m for m in available(schema) if m.version not in done]


async def missing_routines(conn: asyncpg.Connection, schema: Schema = CELL) -> list[Routine]:
    """Routines whose function, view or a trigger the database lacks: read from the
    catalog, so any role may ask. (A routine whose text changed is not among them: its
    sha256 does not say which release is the newer, and during a rolling upgrade the
    previous release runs on the next one's routines.)"""
    existing = await existing_objects(conn)
    return [r for r in routines(schema) if not set(r.objects) <= existing]
