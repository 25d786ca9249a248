"""The test databases: where the admin Postgres is, a database's DSN, what was written."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from tenantry.db.embedded import EmbeddedPostgres
from tenantry.db.roles import CONSOLE_LOGIN_ROLE, LOGIN_ROLE, with_user

LOCAL_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


def choose_admin_dsn(tmp_root: Path) -> tuple[str, EmbeddedPostgres | None]:
    """TENANTRY_TEST_DATABASE_URL, else the local server on 5432 (what CI uses), else an
    embedded Postgres for this session, so `make test` works on a fresh machine too."""
    configured = os.environ.get("TENANTRY_TEST_DATABASE_URL")
    if configured:
        return configured, None
    with socket.socket() as probe:
        probe.settimeout(1)
        if probe.connect_ex(("127.0.0.1", 5432)) == 0:
            return LOCAL_DSN, None
    embedded = EmbeddedPostgres(tmp_root / "pg")
    return embedded.start(create=True), embedded


def dsn_for(admin_dsn: str, database: str) -> str:
    parts = urlsplit(admin_dsn)
    return urlunsplit(parts._replace(path="/" + database))


@asynccontextmanager
async def scratch_database(
    admin_dsn: str, prefix: str, *, template: str | None = None,
    prepare: Callable[[asyncpg.Connection], Awaitable[object]] | None = None,
) -> AsyncIterator[str]:
    """A new database on the admin server for one test or module — a copy of ``template``,
    or empty and then given to ``prepare`` (a migration) — dropped afterwards; its DSN."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"'
                            + (f' TEMPLATE "{template}"' if template else ""))
        dsn = dsn_for(admin_dsn, name)
        if prepare is not None:
            conn = await asyncpg.connect(dsn)
            try:
                await prepare(conn)
            finally:
                await conn.close()
        yield dsn
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def login_dsn(database_dsn: str, login: str = LOGIN_ROLE) -> str:
    """``database_dsn`` logging in as a serving login of migration 0015 (the tenant pool's,
    or the console's), as the platform's processes do: on the trusted local server and
    the embedded one a test exercises the real roles. A configured
    TENANTRY_TEST_DATABASE_URL keeps its own user (its server may want a password)."""
    if os.environ.get("TENANTRY_TEST_DATABASE_URL"):
        return database_dsn
    return with_user(database_dsn, login)


def console_login_dsn(database_dsn: str) -> str:
    return login_dsn(database_dsn, CONSOLE_LOGIN_ROLE)


TABLES = ("tenants", "api_keys", "agents", "agent_versions", "runs", "run_events",
          "model_accounts", "tool_servers", "secrets", "tenant_policies", "approvals")


async def row_counts(conn: asyncpg.Connection) -> dict[str, int]:
    """Rows per table, read as the superuser (no RLS): what was really written."""
    return {t: await conn.fetchval(f"SELECT count(*) FROM {t}") for t in TABLES}


async def run_statuses(conn: asyncpg.Connection, runs: list[str]) -> dict[str, int]:
    """How many of these runs (API ids) are in each status, read as the superuser."""
    rows = await conn.fetch(
        "SELECT status, count(*) AS n FROM runs "
        "WHERE 'run_' || replace(run_id::text, '-', '') = ANY($1) GROUP BY status", runs)
    return {r["status"]: r["n"] for r in rows}
