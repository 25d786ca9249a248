"""Shared fixtures: a real Postgres (template database migrated once per session, a fresh
database per test), a real S3 engine (one SeaweedFS per session, a bucket per test) and the
real HTTP app served by uvicorn on a loopback port."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from tenantry.db import Database
from tenantry.db.migrate import migrate
from tenantry.runs.worker import Worker
from tenantry.testing.fake_model import FakeModelServer
from tenantry.testing.mcp_server import EffectsMcpServer
from tests.support.api import Api, serving_api
from tests.support.db import choose_admin_dsn, dsn_for, login_dsn, scratch_database
from tests.support.oidc import Provider, oidc_provider
from tests.support.worker import Fakes, running_worker

#: The session's real sandbox drivers, shared by tests/integration/sandbox and tests/chaos;
#: its real S3 engine (``s3_server``, ``s3_bucket``, ``s3_objects``); the billing tests' fake
#: providers with usage reports (``providers``).
pytest_plugins = ["tests.support.sandbox_fixtures", "tests.support.object_store_fixtures",
                  "tests.support.billing_fixtures"]


#: The longest files (minutes each, most of it waiting on emulated microVMs, image builds
#: and killed processes), handed out first when pytest-xdist spreads files over processes
#: (`make test`): a long file handed out last would leave the other process idle meanwhile.
LONGEST_FIRST = (
    "tests/integration/sandbox/test_browser.py",
    "tests/e2e/test_container_image.py",
    "tests/e2e/test_docs_examples.py",
    "tests/chaos/test_activity_chaos.py",
    "tests/chaos/test_rolling_upgrade.py",
    "tests/chaos/test_retention_chaos.py",
    "tests/integration/sandbox/test_activity_dispatcher.py",
    "tests/integration/sandbox/test_activity_usage.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist only: the same order in every process (a stable sort), so each
    agrees on what it collected."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    root = config.rootpath

    def first(item: pytest.Item) -> int:
        return rank.get(item.path.relative_to(root).as_posix(), len(rank))

    items.sort(key=first)


#: Serialises the template migrations of concurrent test processes (see ``template_db``).
TEMPLATE_LOCK = 0x7465_6E61_6E74


@pytest.fixture(scope="session")
def admin_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    dsn, embedded = choose_admin_dsn(tmp_path_factory.mktemp("embedded"))
    yield dsn
    if embedded is not None:
        embedded.stop()


@pytest.fixture(scope="session")
async def template_db(admin_dsn: str) -> AsyncIterator[str]:
    name = f"tenantry_tmpl_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        conn = await asyncpg.connect(dsn_for(admin_dsn, name))
        # The schema's roles are the cluster's: pytest-xdist's workers migrate their
        # templates one at a time (an advisory lock in the admin database is cluster-wide
        # for everyone connected to it), or two would create the same role at once.
        await admin.execute("SELECT pg_advisory_lock($1)", TEMPLATE_LOCK)
        try:
            await migrate(conn)
        finally:
            await admin.execute("SELECT pg_advisory_unlock($1)", TEMPLATE_LOCK)
            await conn.close()
        yield name
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@pytest.fixture
async def database_dsn(admin_dsn: str, template_db: str) -> AsyncIterator[str]:
    """A fresh, migrated database for this test only (copied from the template)."""
    async with scratch_database(admin_dsn, "tenantry_t", template=template_db) as dsn:
        yield dsn


@pytest.fixture
async def admin_conn(database_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """A superuser connection to the test database: for checking what was (not) written."""
    conn = await asyncpg.connect(database_dsn)
    yield conn
    await conn.close()


@pytest.fixture
async def db(database_dsn: str) -> AsyncIterator[Database]:
    # The tenant pool's login (owns nothing; may become tenantry_app), as in production.
    database = await Database.connect(login_dsn(database_dsn), min_size=1, max_size=5)
    yield database
    await database.close()


@pytest.fixture
async def api(database_dsn: str) -> AsyncIterator[Api]:
    """The real app on a real loopback port, on this test's database."""
    async with serving_api(database_dsn) as served:
        yield served


@pytest.fixture
def oidc() -> Iterator[Provider]:
    """A real OpenID Connect provider on loopback (tests/support/oidc.py)."""
    with oidc_provider() as running:
        yield running


@pytest.fixture
async def oidc_api(database_dsn: str, oidc: Provider) -> AsyncIterator[Api]:
    """The app as ``api``, its tenant console signing people in with ``oidc`` too."""
    async with serving_api(database_dsn, **oidc.settings()) as served:
        yield served


# -- the run engine -------------------------------------------------------------------------


@pytest.fixture
async def fakes() -> AsyncIterator[Fakes]:
    """A fake OpenAI-compatible model server and an MCP server that counts effects, both
    real HTTP servers on loopback."""
    async with FakeModelServer() as model, EffectsMcpServer() as mcp:
        yield Fakes(model, mcp)


@pytest.fixture
async def worker(database_dsn: str, fakes: Fakes) -> AsyncIterator[Worker]:
    async with running_worker(database_dsn, fakes.model.base_url) as w:
        yield w
