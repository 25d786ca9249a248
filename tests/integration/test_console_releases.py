"""The console's home says which releases share the database (docs/how-to/upgrade.md), read
through the console role's definer function: that role reads neither worker_sessions nor
other sessions' details itself."""

from __future__ import annotations

import html
import re

import asyncpg
import httpx2
import pytest

from tenantry import __version__
from tenantry.db import Database
from tenantry.db.release import Release
from tests.support.api import OPERATOR_TOKEN, Api
from tests.support.db import console_login_dsn

CODE = Release.parse(__version__)
OLDER = f"{CODE.major}.{CODE.minor - 1}.9" if CODE.minor else f"{CODE.major - 1}.9.0"


async def _runs_page(api: Api) -> str:
    """The releases line of the console's home, as a browser logged in sees it."""
    async with httpx2.AsyncClient(base_url=api.base_url, timeout=10) as browser:
        form = await browser.get("/console/login")
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', form.text)
        assert csrf, form.text
        login = await browser.post("/console/login",
                                   data={"csrf": csrf[1], "token": OPERATOR_TOKEN})
        assert login.status_code == 303, login.text
        page = await browser.get("/console/runs")
    assert page.status_code == 200, page.text
    line = re.search(r'<p class="muted releases">(.*?)</p>', page.text)
    assert line, page.text
    return html.unescape(line[1])


async def test_the_runs_page_says_which_releases_are_connected(
    api: Api, database_dsn: str, admin_conn: asyncpg.Connection,
) -> None:
    old = await asyncpg.connect(database_dsn,
                                server_settings={"application_name": f"tenantry/{OLDER}"})
    try:
        assert await old.fetchval("SELECT tenantry_register_worker_v2($1, $2, false, $3)",
                                  "worker-old", 7, OLDER) == "registered"
        line = await _runs_page(api)
    finally:
        await old.close()

    # This process's pools and event hub are of this release; the old worker is counted
    # both as a session and as a worker; the test's own superuser session names nothing.
    assert line.startswith(f"Release {__version__}; schema {__version__}'s, current. "
                           f"Connected: {__version__} ("), line
    assert f"; {OLDER} (1 connection(s), 1 worker(s)); 1 other connection(s) naming no " \
           "Tenantry release. Contract: no step due." in line, line


async def test_the_console_role_reads_the_releases_only_through_its_function(
    database_dsn: str,
) -> None:
    console = await Database.connect(console_login_dsn(database_dsn), role="tenantry_console",
                                     min_size=1, max_size=1)
    try:
        async with console.unscoped() as conn:
            kinds = {r["kind"] for r in await conn.fetch(
                "SELECT kind FROM tenantry_console_releases()")}
            assert {"connection", "migration", "routine", "release"} <= kinds
            for table in ("worker_sessions", "schema_routines", "schema_releases"):
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.fetch(f"SELECT * FROM {table}")
            # Other sessions' query text stays hidden from it.
            assert await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                "AND query <> '<insufficient privilege>' AND datname = current_database()"
            ) == 0
    finally:
        await console.close()
