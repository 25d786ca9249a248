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
applied to each other by mistake."""

from __future__ import annotations

import hashlib
import heapq
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Literal

import asyncpg

from tenantry.errors import ConfigurationError

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_ROUTINE_FILE = re.compile(r"^([a-z0-9_]+)\.sql$")
#: Migrations rewritten in place, with the sha256 of the text a database may have applied.
_REWRITTEN = "rewritten.txt"


@dataclass(frozen=True, slots=True)
class Schema:
    """One series of migrations and routines: where their files are (a package name, or a
    directory), where a database records them, and the advisory lock that serialises two
    processes migrating it at once."""

    package: str | Path
    record_table: str
    lock_key: int
    routines: str | Path | None = None
    routine_table: str = "schema_routines"


# Any lock constant works; it only has to be the same for every Tenantry process.
CELL = Schema("tenantry.db.migrations", "schema_migrations", 0x7E_4A_47_12,
              routines="tenantry.db.routines")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def sha256(self) -> str:
        return _sha256(self.sql)


Kind = Literal["function", "view", "trigger"]


@dataclass(frozen=True, slots=True)
class Routine:
    """A routine file: the function or view it defines (``tenantry_`` + its name, or its
    name), and the triggers it creates, each ``(kind, name)`` as the catalog has them (a
    trigger's name is ``table.trigger``)."""

    name: str
    sql: str
    objects: tuple[tuple[Kind, str], ...]
    requires: tuple[str, ...] = ()
    early: bool = False

    @property
    def sha256(self) -> str:
        return _sha256(self.sql)

    @property
    def kind(self) -> Kind:
        return self.objects[0][0]


@dataclass(slots=True)
class Applied:
    """What :func:`migrate` applied, in order."""

    migrations: list[Migration] = field(default_factory=list)
    routines: list[Routine] = field(default_factory=list)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _files(where: str | Path) -> Traversable:
    return where if isinstance(where, Path) else resources.files(where)


def available(schema: Schema = CELL) -> list[Migration]:
    found = []
    for entry in _files(schema.package).iterdir():
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


def _rewritten(schema: Schema) -> dict[int, str]:
    """``version -> sha256`` of the original text of each migration rewritten in place."""
    entry = _files(schema.package).joinpath(_REWRITTEN)
    if not entry.is_file():
        return {}
    shas = {}
    for line in entry.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            version, sha = line.split()
            shas[int(version)] = sha
    return shas


# What a routine's text says, read outside its bodies and comments.
_BODY = re.compile(r"\$([A-Za-z_]*)\$.*?\$\1\$", re.DOTALL)
_COMMENT = re.compile(r"--[^\n]*")
_CREATES = re.compile(
    r"\bCREATE\s+(OR\s+REPLACE\s+)?(?:(FUNCTION|VIEW)|TRIGGER)\s+(?:public\.)?(\w+)"
    r"(?(2)|[^;]*?\bON\s+(?:public\.)?(\w+))", re.IGNORECASE)
_DIRECTIVE = re.compile(r"^--\s*(requires|phase):\s*(.*?)\s*$")


def parse_routine(name: str, sql: str) -> Routine:
    """A routine file's objects and directives; a one-line error when it breaks a rule."""
    requires: list[str] = []
    early = False
    for line in sql.splitlines():
        if line.strip() and not line.startswith("--"):
            break  # the directives are in the leading comment
        directive = _DIRECTIVE.match(line)
        if directive and directive[1] == "requires":
            requires += [r.strip() for r in directive[2].split(",") if r.strip()]
        elif directive:
            if directive[2] != "early":
                raise ConfigurationError(
                    f"routine {name}: unknown phase {directive[2]!r} (only 'early')")
            early = True
    text = _BODY.sub("$$", _COMMENT.sub("", sql))
    objects: list[tuple[Kind, str]] = []
    for match in _CREATES.finditer(text):
        what = (match[2] or "trigger").lower()
        if not match[1]:
            # Applied again whenever it changes: a plain CREATE would fail the second time.
            raise ConfigurationError(
                f"routine {name}: CREATE {what.upper()} {match[3]} needs OR REPLACE")
        if what == "trigger":
            objects.append(("trigger", f"{match[4]}.{match[3]}"))
        else:
            objects.append(("function" if what == "function" else "view", match[3]))
    defined = [o for o in objects if o[0] != "trigger"]
    if len(defined) != 1 or defined[0][1].removeprefix("tenantry_") != name:
        raise ConfigurationError(
            f"routine {name}: a routine file defines one function or view, named after "
            f"the file (tenantry_{name} or {name}); found {[n for _, n in defined]}")
    if defined[0][0] == "view" and len(objects) > 1:
        raise ConfigurationError(f"routine {name}: a view's file creates no trigger")
    ordered = tuple(defined + [o for o in objects if o[0] == "trigger"])
    return Routine(name, sql, ordered, tuple(requires), early)


def routines(schema: Schema = CELL) -> list[Routine]:
    """The schema's routines in the order they are applied: each after those it requires,
    functions before views, then by name."""
    if schema.routines is None:
        return []
    found = {}
    for entry in _files(schema.routines).iterdir():
        match = _ROUTINE_FILE.match(entry.name)
        if match:
            found[match[1]] = parse_routine(match[1], entry.read_text(encoding="utf-8"))
    for routine in found.values():
        unknown = [r for r in routine.requires if r not in found]
        if unknown:
            raise ConfigurationError(
                f"routine {routine.name} requires {', '.join(unknown)}: no such routine")
    _refuse_lingering(schema, found)
    return _in_order(found)


_DROPS = re.compile(
    r"\bDROP\s+(?:(FUNCTION)|TRIGGER)\s+(?:IF\s+EXISTS\s+)?(?:public\.)?(\w+)"
    r"(?(1)|\s+ON\s+(?:public\.)?(\w+))", re.IGNORECASE)


def _refuse_lingering(schema: Schema, found: dict[str, Routine]) -> None:
    """A migration that drops a routine's function or trigger while its file stays would
    see it made again by the routines step right after: the file must go with it (and a
    changed signature is a new name). Views are exempt: a migration drops one to change a
    column it reads, and the view's routine brings it back. Migrations rewritten in place
    (rewritten.txt) keep the drops of signatures that changed before routines existed."""
    owner = {obj: r.name for r in found.values() for obj in r.objects}
    rewritten = _rewritten(schema)
    for migration in available(schema):
        if migration.version in rewritten:
            continue
        for match in _DROPS.finditer(_BODY.sub("$$", _COMMENT.sub("", migration.sql))):
            obj: tuple[Kind, str] = (("function", match[2]) if match[1]
                                     else ("trigger", f"{match[3]}.{match[2]}"))
            if obj in owner:
                raise ConfigurationError(
                    f"migration {migration.version:04d}_{migration.name} drops {obj[0]} "
                    f"{match[2]}, which routines/{owner[obj]}.sql makes again: delete the "
                    f"file with it (a changed signature is a new name: {owner[obj]}_v2)")


def _in_order(found: dict[str, Routine]) -> list[Routine]:
    waiting = {name: set(r.requires) for name, r in found.items()}
    ready = [(r.kind == "view", name) for name, r in found.items() if not r.requires]
    heapq.heapify(ready)
    ordered: list[Routine] = []
    while ready:
        _, name = heapq.heappop(ready)
        ordered.append(found[name])
        del waiting[name]
        for other, needs in waiting.items():
            if name in needs:
                needs.discard(name)
                if not needs:
                    heapq.heappush(ready, (found[other].kind == "view", other))
    if waiting:
        raise ConfigurationError(
            f"routines require each other in a cycle: {', '.join(sorted(waiting))}")
    return ordered


# Functions, views and (table-level) triggers of the schema migrations create objects in.
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


async def _existing(conn: asyncpg.Connection) -> set[tuple[str, str]]:
    return {(r["kind"], r["name"]) for r in await conn.fetch(_OBJECTS)}


async def migrate(
    conn: asyncpg.Connection,
    on_apply: Callable[[Migration | Routine], None] | None = None,
    *,
    schema: Schema = CELL,
) -> Applied:
    """Apply the early routines that changed, every pending migration, then every routine
    that changed or whose objects are missing; return what was applied. ``on_apply`` hears
    of each just before it is applied."""
    await conn.execute("SELECT pg_advisory_lock($1)", schema.lock_key)
    try:
        await _create_record_tables(conn, schema)
        known = available(schema)
        todo = routines(schema)
        done = await _check_applied(conn, schema, known)  # refuses before anything is applied
        applied = Applied()
        await _apply_routines(conn, schema, [r for r in todo if r.early], on_apply, applied)
        await _apply_migrations(conn, schema, [m for m in known if m.version not in done],
                                on_apply, applied)
        await _apply_routines(conn, schema, todo, on_apply, applied, last=True)
        return applied
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", schema.lock_key)


async def _create_record_tables(conn: asyncpg.Connection, schema: Schema) -> None:
    await conn.execute(
        f"""
        CREATE TABLE IF NOT EXISTS {schema.record_table} (
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


async def _check_applied(
    conn: asyncpg.Connection, schema: Schema, known: list[Migration],
) -> set[int]:
    """The versions the database has applied, once each is known to be this code's."""
    table = schema.record_table
    done = {r["version"]: r["sha256"]
            for r in await conn.fetch(f"SELECT version, sha256 FROM {table}")}
    unknown = sorted(set(done) - {m.version for m in known})
    if unknown:
        raise ConfigurationError(
            f"database has migrations this code does not know: {unknown}; "
            "is an older Tenantry pointed at a newer database?"
        )
    originals = _rewritten(schema)
    for migration in known:
        sha = done.get(migration.version)
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
                f"migration {migration.version:04d}_{migration.name} changed after it "
                "was applied; add a new migration instead of editing an old one"
            )
    return set(done)


async def _apply_migrations(
    conn: asyncpg.Connection, schema: Schema, todo: list[Migration],
    on_apply: Callable[[Migration | Routine], None] | None, applied: Applied,
) -> None:
    for migration in todo:
        if on_apply is not None:
            on_apply(migration)
        async with conn.transaction():
            # A migration whose statements all became routines is comments alone, which the
            # server answers with no command at all (asyncpg fails on that).
            if _COMMENT.sub("", migration.sql).strip():
                await conn.execute(migration.sql)
            await conn.execute(
                f"INSERT INTO {schema.record_table} (version, name, sha256) "
                "VALUES ($1, $2, $3)",
                migration.version,
                migration.name,
                migration.sha256,
            )
        applied.migrations.append(migration)


async def _apply_routines(
    conn: asyncpg.Connection, schema: Schema, todo: list[Routine],
    on_apply: Callable[[Migration | Routine], None] | None, applied: Applied,
    *, last: bool = False,
) -> None:
    """Apply those of ``todo`` that changed or lack an object; ``last``: ``todo`` is every
    routine, so a record whose file is gone goes too."""
    if schema.routines is None:
        return
    table = schema.routine_table
    recorded = {r["name"]: r["sha256"]
                for r in await conn.fetch(f"SELECT name, sha256 FROM {table}")}
    existing = await _existing(conn)
    due = [r for r in todo
           if recorded.get(r.name) != r.sha256 or not set(r.objects) <= existing]
    gone = sorted(set(recorded) - {r.name for r in todo}) if last else []
    if not due and not gone:
        return
    async with conn.transaction():
        # Bodies are checked when they run, not here: the files' order then matters only
        # where a statement needs another routine at once (a trigger's WHEN, a view).
        await conn.execute("SET LOCAL check_function_bodies = off")
        for routine in due:
            if on_apply is not None:
                on_apply(routine)
            try:
                await conn.execute(routine.sql)
            except asyncpg.PostgresError as exc:
                raise ConfigurationError(
                    f"routine {routine.name}.sql could not be applied: {exc}") from exc
            await conn.execute(
                f"INSERT INTO {table} (name, sha256) VALUES ($1, $2) "
                "ON CONFLICT (name) DO UPDATE SET sha256 = EXCLUDED.sha256, applied_at = now()",
                routine.name, routine.sha256)
            applied.routines.append(routine)
        # A routine whose file is gone was dropped by a migration: its record goes too.
        if gone:
            await conn.execute(f"DELETE FROM {table} WHERE name = ANY ($1)", gone)


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
    existing = await _existing(conn)
    return [r for r in routines(schema) if not set(r.objects) <= existing]
