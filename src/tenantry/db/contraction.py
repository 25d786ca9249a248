"""Contract steps: removing what an older release uses, once none of it is connected
(``tenantry migrate --contract``; docs/reference/architecture.md, "Changing the schema").

Release M's migrations keep everything release M-1 uses, because M-1's processes run on
M's schema until the rolling upgrade replaces them. What M no longer needs of it — a
column, a table, a function M-1 calls that M replaced with a ``_v2`` — goes in a contract
step, which waits until no process of a release before M is connected: the step is refused
(one line naming those releases, nothing changed) while one is. The steps are applied
under the migrations' advisory lock, each in its own transaction, recorded in
``schema_contract_steps``; they follow the migrations and routines of the same release, so
they are refused while those are pending. The release that applied them is recorded as
having contracted the database (``schema_releases.contracted_at``): from then on a process
of an older release refuses to start on it, rather than fail on what is gone."""

from __future__ import annotations

from collections.abc import Callable

import asyncpg

from tenantry import __version__
from tenantry.db.fleet import read_fleet
from tenantry.db.migrate import (
    apply_steps,
    check_applied,
    create_record_tables,
    due_routines,
    recorded,
    refuse_newer,
)
from tenantry.db.release import Release, describe_all, line_text
from tenantry.db.schema_files import (
    CELL,
    ContractStep,
    Migration,
    Routine,
    Schema,
    available,
    contract_steps,
)
from tenantry.errors import ConfigurationError


async def contract(
    conn: asyncpg.Connection,
    on_apply: Callable[[Migration | Routine], None] | None = None,
    *,
    schema: Schema = CELL,
    release: str = __version__,
) -> list[ContractStep]:
    """Apply the contract steps not applied yet; return them. Refused, before anything is
    applied: a database of a newer release, migrations or routines still pending, an
    edited step, and any process of a release before ``release``'s line connected."""
    code = Release.parse(release)
    await conn.execute("SELECT pg_advisory_lock($1)", schema.lock_key)
    try:
        await create_record_tables(conn, schema)
        found = await recorded(conn, schema)
        refuse_newer(found, schema, code)
        await check_applied(conn, schema, available(schema), found)
        due = [s for s in contract_steps(schema) if s.version not in found.contract]
        if not due:
            return []
        labels = ", ".join(s.label for s in due)
        behind = ([m for m in available(schema) if m.version not in found.migrations]
                  or await due_routines(conn, schema, found))
        if behind:
            raise ConfigurationError(
                f"contract step(s) {labels} not applied: the schema is not release "
                f"{code}'s yet ({len(behind)} migration(s) or routine(s) pending); run "
                "'tenantry migrate' first")
        older = (await read_fleet(conn)).older_than(code.line)
        if older:
            raise ConfigurationError(
                f"contract step(s) {labels} not applied: {describe_all(older)} connected, "
                f"and the steps remove what releases before {line_text(code.line)} use; "
                "stop those processes, then run 'tenantry migrate --contract' again")
        return await apply_steps(conn, schema, schema.contract_table, due, on_apply,
                                 contracted_by=code)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", schema.lock_key)
