"""`tenantry migrate --status` and `--contract` as an operator runs them
(docs/how-to/upgrade.md): the code's release, the schema's, the releases connected (by
application_name and live worker sessions), what is pending and whether applying it is
safe; nothing changed by asking."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from tenantry import __version__
from tenantry.db.release import Release, served_text
from tenantry.db.schema_files import available, routines
from tenantry.runs import liveness
from tenantry.runs.worker import Worker
from tests.support.api import Api
from tests.support.db import scratch_database
from tests.support.harness import tenantry_command
from tests.support.waiting import until

CODE = Release.parse(__version__)
OLDER = f"{CODE.major}.{CODE.minor - 1}.9" if CODE.minor else f"{CODE.major - 1}.9.0"


def tenantry_migrate(dsn: str, data_dir: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENANTRY_")}
    env.update(TENANTRY_DATA_DIR=str(data_dir), TENANTRY_DATABASE_URL=dsn)
    return subprocess.run([*tenantry_command(), "migrate", *flags], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
async def processes(database_dsn: str) -> AsyncIterator[list[asyncpg.Connection]]:
    """Connections standing for processes; closed at the end."""
    opened: list[asyncpg.Connection] = []
    yield opened
    for conn in opened:
        await conn.close()


async def process_of(dsn: str, release: str, opened: list[asyncpg.Connection]
                     ) -> asyncpg.Connection:
    conn = await asyncpg.connect(dsn, server_settings={"application_name": f"tenantry/{release}"})
    opened.append(conn)
    return conn


async def test_status_names_the_releases_connected_and_whether_migrating_is_safe(
    database_dsn: str, admin_conn: asyncpg.Connection, processes: list[asyncpg.Connection],
    tmp_path: Path,
) -> None:
    await process_of(database_dsn, __version__, processes)  # an API process's pool
    worker = await process_of(database_dsn, __version__, processes)
    await liveness.register(worker, "worker-1")
    await process_of(database_dsn, OLDER, processes)  # not upgraded yet
    # A routine whose text the database does not have: this release's migrate would apply it.
    await admin_conn.execute("UPDATE schema_routines SET sha256 = 'x' WHERE name = 'queue_depth'")

    result = await asyncio.to_thread(tenantry_migrate, database_dsn, tmp_path, "--status")

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"code: release {__version__}",
        # Migrated from empty, so with its contract steps (contract/0001).
        f"schema: release {__version__}'s (the newest release that migrated it); contracted "
        f"by {__version__}: serves no release before {CODE.major}.{CODE.minor}",
        f"connected: {__version__} (2 connection(s), 1 worker(s)); {OLDER} (1 connection(s)); "
        "1 other connection(s) naming no Tenantry release",
        "pending: 1 routine(s) (queue_depth)",
        f"migrate: safe with what is connected (release {__version__}'s schema serves "
        f"releases {served_text(CODE)}): run 'tenantry migrate'",
        "contract: no step due",
    ]
    # Asking changed nothing.
    assert await admin_conn.fetchval(
        "SELECT sha256 FROM schema_routines WHERE name = 'queue_depth'") == "x"


async def test_status_of_a_database_never_migrated_changes_nothing(
    admin_dsn: str, tmp_path: Path,
) -> None:
    async with scratch_database(admin_dsn, "tenantry_status") as dsn:
        result = await asyncio.to_thread(tenantry_migrate, dsn, tmp_path, "--status")
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[1:3] == ["schema: never migrated", "connected: nothing"]
        assert lines[3] == (
            f"pending: {len(available())} migration(s) ({', '.join(m.label for m in available())}"
            f"), {len(routines())} routine(s) ({', '.join(r.name for r in routines())})")
        conn = await asyncpg.connect(dsn)
        try:
            assert await conn.fetchval(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == 0
        finally:
            await conn.close()


async def test_contract_with_no_step_due_says_so_and_status_with_contract_is_refused(
    database_dsn: str, tmp_path: Path,
) -> None:
    result = await asyncio.to_thread(tenantry_migrate, database_dsn, tmp_path, "--contract")
    assert (result.returncode, result.stdout.strip()) == (0, "no contract step due")
    both = await asyncio.to_thread(tenantry_migrate, database_dsn, tmp_path, "--status",
                                   "--contract")
    assert both.returncode == 2
    assert both.stderr.strip() == "error: --status and --contract: one or the other"


async def test_every_connection_of_a_running_api_and_worker_names_its_release(
    api: Api, worker: Worker, admin_conn: asyncpg.Connection,
) -> None:
    """What --status counts: the pools' connections, the event hub's, the worker's session
    connection (its lock and LISTEN) all say tenantry/<version>."""
    async def registered() -> bool:
        return bool(await admin_conn.fetchval("SELECT count(*) FROM worker_sessions"))

    await until(registered, "the worker registers its session", 30)
    rows = await admin_conn.fetch(
        "SELECT application_name, usename FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()")
    names = sorted({r["application_name"] for r in rows})
    assert names == [f"tenantry/{__version__}", f"tenantry/{__version__} event hub"], rows
    assert await admin_conn.fetchval("SELECT release FROM worker_sessions") == __version__
