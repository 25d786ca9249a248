"""The previous release, read from git: its runtime SQL and a database as it left it.

Expand, then contract (docs/reference/architecture.md, "Changing the schema"): release
N's processes run on release N+1's schema during a rolling upgrade. The check that holds
this to account takes every named query block of the previous release's runtime ``.sql``
files (everything under ``src/tenantry`` but migrations, routines and contract steps) and
prepares it on the previous release's database migrated by this code — Parse and Describe,
which is what ``PREPARE`` does: every table, column and function signature is resolved and
every parameter's type inferred, nothing is run — and checks that every function that
release defined is still there with its arguments, result and grants.

The previous release is the newest ``v*`` tag reachable from HEAD (HEAD's own tag aside:
at the release commit the previous one is the tag before). Before the first tag (0.2.0)
it is :data:`BEFORE_ROUTINES`: the commit before the first commit of the routines
refactor on main (475925f, "Tests build a database of an earlier release from that
release's own migration files", ADR 0037) — main as 0.1.0 last ran, its functions still
defined by its migrations."""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from tenantry import __version__
from tenantry.db.migrate import migrate
from tenantry.db.queries import parse
from tenantry.db.release import Release
from tenantry.db.schema_files import CELL, Schema

REPOSITORY = Path(__file__).resolve().parents[2]
#: 475925f^: main before the routines refactor began (see the module).
BEFORE_ROUTINES = "75566d2c74762021eb44decae51db56680f79cde"
#: Each release's tagged commit (``v<version>``), for a checkout that has the history but not
#: the tags (a clone of one branch): the tag is the record, this its copy.
TAGGED: dict[str, str] = {"0.2.0": "1da7a03068ff6791929f1cd34d72f3f3fe816c83"}
#: Queries of the global directory's database (its own schema, tenantry.cells.migrations).
DIRECTORY_FILES = ("src/tenantry/cells/queries.sql", "src/tenantry/cells/moves.sql")
_NOT_RUNTIME = re.compile(r"/(migrations|routines|contract)/")
_VERSION = re.compile(r'^__version__ = "([^"]+)"', re.MULTILINE)


def git(*args: str) -> str:
    result = subprocess.run(["git", "-C", str(REPOSITORY), *args], capture_output=True,
                            encoding="utf-8", check=False)
    if result.returncode != 0:
        raise AssertionError(
            f"git {' '.join(args)} failed ({result.stderr.strip()}): this check reads the "
            "previous release from the repository's history and tags; a shallow clone "
            "lacks them (git fetch --unshallow --tags)")
    return result.stdout


def previous_release() -> str:
    """The newest ``v*`` tag reachable from HEAD that is not HEAD's own; in a checkout
    without tags, the newest release of :data:`TAGGED` HEAD descends from; before the
    first release, :data:`BEFORE_ROUTINES`."""
    head = git("rev-parse", "HEAD").strip()
    for tag in git("tag", "--merged", "HEAD", "--list", "v*", "--sort=-v:refname").split():
        if git("rev-list", "-n", "1", tag).strip() != head:
            return tag
    for version in sorted(TAGGED, key=Release.parse, reverse=True):
        commit = TAGGED[version]
        if commit != head and _descends_from(commit):
            return commit
    if Release.parse(__version__).line > (0, 2):
        raise AssertionError(f"release {__version__} but no earlier release found in the "
                             "history: fetch the tags and history (git fetch --tags "
                             "--unshallow)")
    return BEFORE_ROUTINES


def _descends_from(commit: str) -> bool:
    found = subprocess.run(["git", "-C", str(REPOSITORY), "merge-base", "--is-ancestor",
                            commit, "HEAD"], capture_output=True, check=False)
    return found.returncode == 0


def release_of(ref: str) -> str:
    found = _VERSION.search(git("show", f"{ref}:src/tenantry/__init__.py"))
    return found[1] if found else "0.1.0"


@dataclass(frozen=True, slots=True)
class Block:
    path: str  # in the repository
    name: str
    sql: str

    def __str__(self) -> str:
        return f"{self.path}: {self.name}"


def runtime_queries(ref: str) -> list[Block]:
    """Every named block of the runtime ``.sql`` files at ``ref``."""
    blocks = []
    for path in git("ls-tree", "-r", "--name-only", ref, "src/tenantry").split():
        if path.endswith(".sql") and not _NOT_RUNTIME.search(path):
            blocks += [Block(path, name, sql)
                       for name, sql in parse(git("show", f"{ref}:{path}")).items()]
    return blocks


def _extract(ref: str, folder: str, into: Path) -> Path | None:
    """``folder``'s files at ``ref``, written under ``into``; None if it had none."""
    listed = git("ls-tree", "--name-only", ref, f"{folder}/").split()
    if not listed:
        return None
    into.mkdir(parents=True)
    for path in listed:
        (into / Path(path).name).write_text(git("show", f"{ref}:{path}"), encoding="utf-8")
    return into


async def build_cell(conn: asyncpg.Connection, ref: str) -> None:
    """A database as the release at ``ref`` leaves it when it migrates an empty one: its
    own migrations, routines and contract steps (the migrator of this code applying them,
    which applies a release's files as that release's did)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        migrations = _extract(ref, "src/tenantry/db/migrations", root / "migrations")
        assert migrations is not None, f"no migrations at {ref}"
        schema = Schema(migrations, CELL.record_table, CELL.lock_key,
                        routines=_extract(ref, "src/tenantry/db/routines", root / "routines"),
                        release_table=CELL.release_table,
                        contract=_extract(ref, "src/tenantry/db/contract", root / "contract"))
        await migrate(conn, schema=schema, release=release_of(ref))


async def build_directory(conn: asyncpg.Connection, ref: str, schema: Schema) -> None:
    """The global directory's database as the release at ``ref`` leaves it."""
    with tempfile.TemporaryDirectory() as tmp:
        files = _extract(ref, "src/tenantry/cells/migrations", Path(tmp) / "migrations")
        assert files is not None, f"no directory migrations at {ref}"
        await migrate(conn, schema=Schema(files, schema.record_table, schema.lock_key),
                      release=release_of(ref))


async def unpreparable(conn: asyncpg.Connection, blocks: list[Block]) -> list[str]:
    """``block: the server's error`` for each block the database cannot prepare."""
    failed = []
    for block in blocks:
        try:
            await conn.prepare(block.sql)
        except asyncpg.PostgresError as exc:
            failed.append(f"{block}: {str(exc).splitlines()[0]}")
    return failed


# Every function of the schema (not an extension's), as a caller meets it: its arguments,
# its result, and which of the serving roles may call it.
_FUNCTIONS = """
SELECT p.oid::regprocedure::text AS signature, pg_get_function_result(p.oid) AS result,
       array_remove(ARRAY[
           CASE WHEN has_function_privilege('tenantry_app', p.oid, 'EXECUTE')
                THEN 'tenantry_app' END,
           CASE WHEN has_function_privilege('tenantry_console', p.oid, 'EXECUTE')
                THEN 'tenantry_console' END], NULL) AS callers
FROM pg_proc p
WHERE p.pronamespace = 'public'::regnamespace
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                  AND d.objid = p.oid AND d.deptype = 'e')
"""


async def functions(conn: asyncpg.Connection) -> dict[str, tuple[str, list[str]]]:
    """``signature -> (result, roles that may execute it)``."""
    return {r["signature"]: (r["result"], list(r["callers"]))
            for r in await conn.fetch(_FUNCTIONS)}


def lost(before: dict[str, tuple[str, list[str]]],
         after: dict[str, tuple[str, list[str]]]) -> list[str]:
    """What a caller of ``before``'s functions would find broken in ``after``."""
    broken = []
    for signature, (result, callers) in sorted(before.items()):
        if signature not in after:
            broken.append(f"function {signature}: gone (or its arguments changed)")
            continue
        now, allowed = after[signature]
        if now != result:
            broken.append(f"function {signature}: returns {now}, was {result}")
        missing = sorted(set(callers) - set(allowed))
        if missing:
            broken.append(f"function {signature}: {', '.join(missing)} may no longer call it")
    return broken
