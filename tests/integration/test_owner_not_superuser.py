"""The schema's owner need not be a superuser (docs/reference/database-roles.md): a role that
owns the database and may create roles migrates it whole, and the retention routines it
made still exempt their deletes from the immutability triggers for their call only."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tenantry.db.migrate import migrate, pending
from tenantry.db.roles import with_user
from tests.support.db import dsn_for


@pytest.fixture
async def owned_database(admin_dsn: str) -> AsyncIterator[str]:
    """A database owned by a new LOGIN CREATEROLE role (no superuser), as that role's DSN."""
    suffix = uuid.uuid4().hex[:10]
    owner, name = f"tenantry_owner_{suffix}", f"tenantry_owned_{suffix}"
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE ROLE "{owner}" LOGIN CREATEROLE')
        await admin.execute(f'CREATE DATABASE "{name}" OWNER "{owner}"')
        yield with_user(dsn_for(admin_dsn, name), owner)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'DROP ROLE IF EXISTS "{owner}"')
        await admin.close()


async def test_an_owner_that_is_not_a_superuser_migrates_the_whole_schema(
        owned_database: str) -> None:
    conn = await asyncpg.connect(owned_database)
    try:
        assert not await conn.fetchval(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        await migrate(conn)
        assert not await pending(conn)
        # The retention routines set the triggers' exemption for their call only: after one
        # returns, the caller's transaction is back to no exemption.
        async with conn.transaction():
            await conn.execute("SELECT set_config('tenantry.retention', 'off', true)")
            await conn.fetch("SELECT * FROM tenantry_retention_batch('t1', 'nobody', NULL, "
                             "now(), 10, 'test', gen_random_uuid())")
            assert await conn.fetchval("SELECT tenantry_retention_under_way()") is False
            assert await conn.fetchval("SELECT current_setting('tenantry.retention')") == "off"
    finally:
        await conn.close()
