"""The schema snapshot (db/schema.sql, at the repository root): what the migrations and the
routines produce in a fresh database, as ``pg_dump --schema-only`` prints it, without the
lines that vary between runs and machines. tests/integration/test_migrations.py checks it
is current; ``make schema`` (``python -m tests.support.schema``) rewrites it."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import asyncpg

from tenantry.db.embedded import find_binaries
from tenantry.db.migrate import migrate
from tests.support.db import choose_admin_dsn, dsn_for

# Outside the package on purpose: nothing runs it (the migrations build every database); it
# is the reviewable picture of what they build, like Rails' db/schema.rb (ADR 0010).
SCHEMA_SQL = Path(__file__).resolve().parents[2] / "db" / "schema.sql"
REGENERATE = "make schema"

# pg_dump's session settings, its version lines and (since 15.14) a random \restrict key:
# none describes the schema, and they change from one dump or machine to the next.
_VARYING = re.compile(
    r"^(SET |SELECT pg_catalog\.set_config\(|\\(un)?restrict |-- Dumped (from|by) )")


HEADER = f"""\
-- The schema the migrations (src/tenantry/db/migrations/NNNN_*.sql) and the routines
-- (src/tenantry/db/routines/*.sql) produce in a fresh database: pg_dump --schema-only
-- --no-owner --no-privileges, less what varies. Written by `{REGENERATE}`;
-- tests/integration/test_migrations.py checks it. Edit migrations and routines, not this.
"""


def normalize(dump: str) -> str:
    lines = [line for line in dump.splitlines() if not _VARYING.match(line)]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines))
    return HEADER + "\n" + text.strip("\n") + "\n"


def pg_dump_for(server_major: int) -> Path:
    """A pg_dump of the server's own major version: another version prints the same schema
    differently (an older one refuses a newer server)."""
    candidates = [Path(f"/usr/lib/postgresql/{server_major}/bin/pg_dump"),
                  find_binaries() / "pg_dump"]
    for candidate in candidates:
        if candidate.exists():
            version = subprocess.run([str(candidate), "--version"], capture_output=True,
                                     text=True, check=True).stdout
            if re.search(rf"\) {server_major}\.", version):
                return candidate
    raise AssertionError(f"no pg_dump {server_major} for the test server (looked at "
                         f"{', '.join(map(str, candidates))}); install postgresql-client-"
                         f"{server_major}")


async def dump_schema(dsn: str, *, privileges: bool = False) -> str:
    """The schema of the database at ``dsn`` as the snapshot prints it; with
    ``privileges``, its owners and grants too (who may call a function is schema)."""
    conn = await asyncpg.connect(dsn)
    try:
        server_major = conn.get_server_version().major
    finally:
        await conn.close()
    leave_out = [] if privileges else ["--no-owner", "--no-privileges"]
    dumped = await asyncio.to_thread(
        subprocess.run, [str(pg_dump_for(server_major)), "--schema-only", *leave_out, dsn],
        capture_output=True, text=True, check=True)
    return normalize(dumped.stdout)


async def migrated_schema(admin_dsn: str) -> str:
    """Migrate a new empty database, dump its schema (normalized), drop the database."""
    name = f"tenantry_schema_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        dsn = dsn_for(admin_dsn, name)
        conn = await asyncpg.connect(dsn)
        try:
            await migrate(conn)
        finally:
            await conn.close()
        return await dump_schema(dsn)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        admin_dsn, embedded = choose_admin_dsn(Path(tmp))
        try:
            SCHEMA_SQL.write_text(asyncio.run(migrated_schema(admin_dsn)))
        finally:
            if embedded is not None:
                embedded.stop()
    print(f"wrote {SCHEMA_SQL}", file=sys.stderr)


if __name__ == "__main__":
    main()
