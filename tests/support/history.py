"""A database as an earlier release of Tenantry left it, built from the repository's history.

Migrations 0001-0040 were rewritten as DDL only when their functions, triggers and views
became routines (ADR 0037). An installation that ran a release before that holds the
schema the *original* files built — every function as its migrations left it, no
``schema_routines`` table — and its ``schema_migrations`` records their original sha256s.
Tests that upgrade "a database of the previous release" build that database here, from the
original files as git has them, exactly as the migrator of that time applied them: in order,
each in its own transaction, recorded with its sha256.

``ORIGINALS`` is the commit the rewrite started from (main before it): every migration file
there is original, and none changed before it, so any prefix of them is a database some
release really left. A checkout without history (a shallow clone) cannot build one; the
error says so.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import asyncpg

#: The last commit whose migrations are the originals (main when ADR 0037's rewrite began).
ORIGINALS = "31ee69e0c75d7929d3dc8bb356db98b15bcf0bb8"

REPOSITORY = Path(__file__).resolve().parents[2]
MIGRATIONS = "src/tenantry/db/migrations"
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


def _git(*args: str) -> str:
    result = subprocess.run(["git", "-C", str(REPOSITORY), *args], capture_output=True,
                            encoding="utf-8", check=False)
    if result.returncode != 0:
        raise AssertionError(
            f"git {' '.join(args)} failed ({result.stderr.strip()}): these tests read the "
            f"original migrations from the repository's history, commit {ORIGINALS[:12]}; "
            "a shallow clone lacks it (fetch the history: git fetch --unshallow)")
    return result.stdout


def original_migrations(upto: int | None = None) -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` of each original migration, in order (at most ``upto``)."""
    found = []
    for path in _git("ls-tree", "--name-only", f"{ORIGINALS}:{MIGRATIONS}").split():
        match = _FILE.match(path)
        if match and (upto is None or int(match[1]) <= upto):
            found.append((int(match[1]), match[2],
                          _git("show", f"{ORIGINALS}:{MIGRATIONS}/{path}")))
    found.sort()
    return found


async def migrate_originals(conn: asyncpg.Connection, upto: int | None = None) -> None:
    """Apply the original migrations (up to ``upto``) as the migrator of their release did."""
    await conn.execute(
        """
        CREATE TABLE IF NOT EXISTS schema_migrations (
            version    integer PRIMARY KEY,
            name       text NOT NULL,
            sha256     text NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    for version, name, sql in original_migrations(upto):
        async with conn.transaction():
            await conn.execute(sql)
            await conn.execute(
                "INSERT INTO schema_migrations (version, name, sha256) VALUES ($1, $2, $3)",
                version, name, hashlib.sha256(sql.encode()).hexdigest())
