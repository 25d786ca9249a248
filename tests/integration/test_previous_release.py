"""The previous release's database calls run on this code's schema (docs/reference/
architecture.md, "Changing the schema"): during a rolling upgrade its API and workers run
on the schema this release's `tenantry migrate` leaves, until its contract steps.

A database is built as the previous release leaves it (tests/support/previous_release.py
says which release that is: the newest v* tag, else 75566d2, main before the routines
refactor), upgraded by this code's migrate (no contract step), and then every named query
block of that release's runtime SQL must prepare on it, and every function it defined must
be there with the same arguments, result and callers. A failure names the query or the
function: move its removal to a contract step, or give the change a new name (_v2)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import pytest

from tenantry.cells.directory import DIRECTORY
from tenantry.db.migrate import migrate
from tests.support.db import dsn_for, scratch_database
from tests.support.previous_release import (
    DIRECTORY_FILES,
    Block,
    build_cell,
    build_directory,
    functions,
    lost,
    previous_release,
    runtime_queries,
    unpreparable,
)


@dataclass(frozen=True, slots=True)
class Upgraded:
    ref: str
    cell: str  # the cell's database: the previous release's, migrated by this code
    directory: str  # likewise the global directory's
    cell_queries: list[Block]
    directory_queries: list[Block]
    before: dict[str, tuple[str, list[str]]]  # the previous release's functions


@pytest.fixture(scope="module")
async def upgraded(admin_dsn: str) -> AsyncIterator[Upgraded]:
    ref = previous_release()
    queries = runtime_queries(ref)
    assert {b.path for b in queries} >= set(DIRECTORY_FILES), "the directory's files moved"
    cell_queries = [b for b in queries if b.path not in DIRECTORY_FILES]
    directory_queries = [b for b in queries if b.path in DIRECTORY_FILES]
    async with scratch_database(admin_dsn, "tenantry_previous") as cell, \
            scratch_database(admin_dsn, "tenantry_previous_dir") as directory:
        conn = await asyncpg.connect(cell)
        try:
            await build_cell(conn, ref)
            # The harness reads that release's SQL as it ran: all of it prepares on its own
            # database (else a failure below would not be this code's).
            assert await unpreparable(conn, cell_queries) == []
            before = await functions(conn)
            await migrate(conn)
        finally:
            await conn.close()
        conn = await asyncpg.connect(directory)
        try:
            await build_directory(conn, ref, DIRECTORY)
            assert await unpreparable(conn, directory_queries) == []
            await migrate(conn, schema=DIRECTORY)
        finally:
            await conn.close()
        yield Upgraded(ref, cell, directory, cell_queries, directory_queries, before)


async def test_the_previous_releases_queries_prepare_on_this_schema(upgraded: Upgraded) -> None:
    failed = []
    for dsn, blocks in ((upgraded.cell, upgraded.cell_queries),
                        (upgraded.directory, upgraded.directory_queries)):
        conn = await asyncpg.connect(dsn)
        try:
            failed += await unpreparable(conn, blocks)
        finally:
            await conn.close()
    assert failed == [], (
        f"the queries of {upgraded.ref[:12]} (the previous release) fail on this schema:\n"
        + "\n".join(failed))
    assert len(upgraded.cell_queries) > 200 and upgraded.directory_queries


async def test_the_previous_releases_functions_keep_their_signatures(
    upgraded: Upgraded,
) -> None:
    conn = await asyncpg.connect(upgraded.cell)
    try:
        broken = lost(upgraded.before, await functions(conn))
    finally:
        await conn.close()
    assert broken == [], (
        f"functions of {upgraded.ref[:12]} (the previous release) broken by this schema:\n"
        + "\n".join(broken))
    assert "tenantry_register_worker(text,integer,boolean)" in upgraded.before


async def test_the_check_names_what_a_removal_in_a_migration_would_break(
    admin_dsn: str, upgraded: Upgraded,
) -> None:
    """What the two checks say of a migration that drops the function the previous release
    registers its workers through and renames a column it reads (what a contract step would
    do, too early)."""
    registration = next(b for b in upgraded.cell_queries if b.name == "register_worker")
    called = re.search(r"\b(tenantry_register_worker\w*)\(", registration.sql)
    assert called is not None, registration.sql
    signature = next(f for f in upgraded.before if f.startswith(f"{called[1]}("))
    arguments = signature[signature.index("(") + 1:-1].split(",")
    name = upgraded.cell.rsplit("/", 1)[1]
    async with scratch_database(admin_dsn, "tenantry_broken", template=name) as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f"DROP FUNCTION {signature}")
            await conn.execute("ALTER TABLE approvals RENAME COLUMN expires_at TO due_at")
            failed = await unpreparable(conn, upgraded.cell_queries)
            broken = lost(upgraded.before, await functions(conn))
        finally:
            await conn.close()
    unknowns = ", ".join(["unknown"] * len(arguments))
    assert ("src/tenantry/runs/queries.sql: register_worker: function "
            f"{called[1]}({unknowns}) does not exist") in failed, failed
    assert any(f.endswith('column "expires_at" does not exist') for f in failed), failed
    assert broken == [f"function {signature}: gone (or its arguments changed)"]
    assert dsn_for(admin_dsn, name) == upgraded.cell
