"""A cell's side of moving a tenant (ADR 0029): hold the tenant still, wait until none of
its runs holds a lease, and, once it lives elsewhere, delete its rows.

Every function takes a connection on the cell's owner login (the operator's, as
``tenantry migrate`` uses): it must see every tenant's rows and may switch triggers off
for the delete (``session_replication_role``). The states are migration 0031's."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

import asyncpg

from tenantry.db.queries import load
from tenantry.errors import TenantryError

Q = load(__package__, "freeze.sql")

#: How often a drain looks again while runs finish their steps.
POLL_SECONDS = 0.2


class Frozen(StrEnum):
    DRAINING = "draining"
    LOCKED = "locked"
    MOVED = "moved"
    ARRIVING = "arriving"


class MoveFailed(TenantryError):
    """A move cannot go on as asked (the cells differ, a copy does not match, a cell is
    not answering); the tenant still lives where the directory says."""

    type = "move_failed"
    status = 409
    title = "Move failed"


class MoveStalled(MoveFailed):
    """The tenant's runs did not all leave their leases in time (a step longer than the
    drain's patience); the move can be resumed, or rolled back."""

    type = "move_stalled"
    status = 409
    title = "Move stalled"


@dataclass(frozen=True, slots=True)
class Held:
    leased: int  # runs of the tenant under a lease
    cleaning: int  # a retention pass of the tenant in progress

    @property
    def still(self) -> bool:
        return self.leased == 0 and self.cleaning == 0


async def freeze(conn: asyncpg.Connection, tenant: str, move: uuid.UUID,
                 state: Frozen) -> datetime:
    """Put the tenant in ``state`` for this move; when it took effect. Refused if another
    move holds the tenant (two moves of one tenant never interleave)."""
    since: datetime | None = await conn.fetchval(Q.freeze, tenant, state.value, move)
    if since is None:
        raise MoveStalled(f"tenant {tenant} is held by another move on this cell")
    return since


async def state_of(conn: asyncpg.Connection, tenant: str) -> tuple[Frozen, uuid.UUID] | None:
    row = await conn.fetchrow(Q.frozen_state, tenant)
    return (Frozen(row["state"]), row["move_id"]) if row is not None else None


async def unfreeze(conn: asyncpg.Connection, tenant: str, move: uuid.UUID) -> None:
    """The tenant runs here again (its workers are woken by the delete's notification)."""
    await conn.execute(Q.unfreeze, tenant, move)


async def held(conn: asyncpg.Connection, tenant: str) -> Held:
    await conn.execute(Q.void_stale_leases, tenant)
    row = await conn.fetchrow(Q.still_held, tenant)
    assert row is not None  # two counts: always one row
    return Held(int(row["leased"]), int(row["cleaning"]))


async def drain(conn: asyncpg.Connection, tenant: str, move: uuid.UUID, *, within: float,
                on_progress: Callable[[Held], None] | None = None) -> None:
    """Freeze the tenant as draining, wait until nothing holds its rows, then lock it.

    The order matters: transactions that began before the freeze (a claim, an intake)
    may not have seen it, so they are waited out first; after that no claim can lease
    one of its runs, and each run in flight is handed back at its next step's commit."""
    since = await freeze(conn, tenant, move, Frozen.DRAINING)
    deadline = time.monotonic() + within
    while await conn.fetchval(Q.older_transactions, since) > 0:
        _check(deadline, tenant, "transactions older than the freeze")
        await asyncio.sleep(POLL_SECONDS / 4)
    while True:
        now = await held(conn, tenant)
        if on_progress is not None:
            on_progress(now)
        if now.still:
            break
        _check(deadline, tenant, f"{now.leased} runs under a lease, "
                                 f"{now.cleaning} retention passes")
        await asyncio.sleep(POLL_SECONDS)
    await freeze(conn, tenant, move, Frozen.LOCKED)
    # A claim that raced the count above failed against the lock (TR020); nothing can
    # hold a lease now. Said, not assumed:
    after = await held(conn, tenant)
    if not after.still:
        raise MoveStalled(f"tenant {tenant}: a run was leased while it was being locked")


def _check(deadline: float, tenant: str, what: str) -> None:
    if time.monotonic() > deadline:
        raise MoveStalled(f"tenant {tenant} did not drain in time: {what}; "
                          "resume the move to wait longer, or roll it back")


async def delete_tenant(conn: asyncpg.Connection, tenant: str) -> dict[str, int]:
    """Every row of the tenant on this cell, in one transaction; rows deleted per table.
    Triggers are off for it (as for the copy): the tenant's counters go with it, and no
    foreign key needs an order."""
    deleted: dict[str, int] = {}
    async with conn.transaction():
        await conn.execute("SET LOCAL session_replication_role = replica")
        await conn.execute(Q.capacity_shares_of_tenant, tenant)
        for row in await conn.fetch(Q.tenant_tables):
            status = await conn.execute(
                f"DELETE FROM {ident(row['name'])} WHERE tenant_id = $1", tenant)
            deleted[row["name"]] = int(status.rsplit(" ", 1)[1])
    return deleted


def ident(name: str) -> str:
    """A table name from the catalog, quoted as an identifier."""
    return '"' + name.replace('"', '""') + '"'
