"""A pool on a cell's multi-host URL (tenantry.db): when the node it is connected to stops
taking writes (a primary demoted to standby by a failover), the write fails as "database
unavailable" — a 503, never a 500 — that connection is closed rather than pooled again, and
the next request is served by whichever host is the writable primary now. Two clusters this
module owns; no process restarts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from tenantry.db import DATABASE_DOWN, Database
from tenantry.db.dsn import for_cluster
from tests.support.pgcluster import PgCluster
from tests.support.waiting import until


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[PgCluster, PgCluster]]:
    with PgCluster(tmp_path / "a") as first, PgCluster(tmp_path / "b") as second:
        yield first, second


async def test_a_demoted_node_hands_the_pool_to_the_new_primary(
    nodes: tuple[PgCluster, PgCluster],
) -> None:
    first, second = nodes
    url = for_cluster(f"postgresql://postgres@127.0.0.1:{first.port},"
                      f"127.0.0.1:{second.port}/postgres")
    db = await Database.connect(url, role=None, min_size=1, max_size=1)
    try:
        async with db.unscoped() as conn:
            assert await conn.fetchval("SELECT inet_server_port()") == first.port
            await conn.execute("CREATE TABLE IF NOT EXISTS t (x int)")
        # The first node stops taking writes, as a demoted primary does.
        admin = await asyncpg.connect(first.dsn())
        try:
            await admin.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            await admin.execute("SELECT pg_reload_conf()")
        finally:
            await admin.close()
        await second_takes_writes(second)

        async def reload_seen() -> bool:
            async with db.unscoped() as conn:
                return bool(await conn.fetchval("SHOW default_transaction_read_only") == "on")

        await until(reload_seen, "the pooled connection sees the node read-only", 10)
        with pytest.raises(DATABASE_DOWN) as refused:
            async with db.unscoped() as conn:
                await conn.execute("INSERT INTO t VALUES (1)")
        assert isinstance(refused.value, asyncpg.ReadOnlySQLTransactionError)
        async with db.unscoped() as conn:  # a new connection, to the writable node
            assert await conn.fetchval("SELECT inet_server_port()") == second.port
            await conn.execute("INSERT INTO t VALUES (2)")
    finally:
        await db.close()


async def second_takes_writes(second: PgCluster) -> None:
    conn = await asyncpg.connect(second.dsn())
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS t (x int)")
    finally:
        await conn.close()


async def test_a_connection_stuck_mid_operation_is_a_503_and_never_pooled_again(
    database_dsn: str,
) -> None:
    """A server that goes away mid-statement (a killed primary) can leave asyncpg's
    protocol stuck ("cannot switch to state …; another operation is in progress"): that is
    the database being away — a 503 to the API, an outage to a worker — and the connection
    is closed, so the next request gets a fresh one instead of the same error again."""
    db = await Database.connect(database_dsn, role=None, min_size=1, max_size=1)
    try:
        async with db.unscoped() as conn:
            stuck = await conn.fetchval("SELECT pg_backend_pid()")
        with pytest.raises(DATABASE_DOWN):
            await _stuck_on(db, stuck)
        async with db.unscoped() as conn:
            assert await conn.fetchval("SELECT pg_backend_pid()") != stuck
    finally:
        await db.close()


async def _stuck_on(db: Database, pid: int) -> None:
    async with db.unscoped() as conn:
        assert await conn.fetchval("SELECT pg_backend_pid()") == pid  # the pooled one
        raise asyncpg.InternalClientError(
            "cannot switch to state 11; another operation (2) is in progress")
