"""A worker loop's liveness, as Postgres sees it (ADR 0018).

The loop holds a session-level advisory lock, ``(LOCK_CLASS, key)``, on a connection it
keeps open for its life, and records ``worker id -> key`` in ``worker_sessions``. Postgres
releases the lock the moment the process dies or the connection drops; the claim
(``tenantry_claim_runs``) probes the registered keys and re-leases at once the running runs
of a worker whose lock nobody holds. A frozen worker still holds its lock: its runs move
only when its lease expires, and the epoch fences what it writes afterwards."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from tenantry.db.queries import load
from tenantry.errors import TenantryError

Q = load(__package__)
logger = logging.getLogger(__name__)

#: The class (first int) of the two-int advisory keys of worker sessions: b"TWRK". Fixed in
#: migration 0026's functions; two-int keys never meet the one-bigint keys (migrations').
LOCK_CLASS = 1415008843
#: Keys and ids tried before giving up: a collision needs a live or registered worker on
#: the same random 31-bit key, so a second try is already rare.
ATTEMPTS = 16


class RegistrationFailed(TenantryError):
    """No free key or id after :data:`ATTEMPTS` tries (never expected; says what to check)."""


def random_key() -> int:
    return secrets.randbelow(2**31 - 1) + 1


@dataclass(frozen=True, slots=True)
class Session:
    worker: str  # may differ from the id asked for, if that one was taken
    key: int


async def register(
    conn: asyncpg.Connection, worker: str, *, rejoin: bool = False,
    keys: Callable[[], int] = random_key, new_id: Callable[[], str] | None = None,
) -> Session:
    """Take a session lock on ``conn`` and record ``worker`` under it. ``rejoin``: the worker
    registered before and its lock connection dropped; it keeps its id (its row is kept or
    made again). A key a live session holds, or a registered worker owns, is never waited
    for: another is tried. A taken id (only on a first registration) is replaced by
    ``new_id()``; without ``new_id`` it is an error."""
    key = keys()
    for _ in range(ATTEMPTS):
        outcome = await conn.fetchval(Q.register_worker, worker, key, rejoin)
        if outcome == "registered":
            return Session(worker, key)
        if outcome == "key_taken":
            logger.info("worker session key taken, trying another", extra={"key": key})
            key = keys()
        elif new_id is not None and not rejoin:
            logger.warning("worker id taken, taking another", extra={"worker": worker})
            worker = new_id()
        else:
            raise RegistrationFailed(f"worker id {worker} is registered by another worker")
    raise RegistrationFailed(f"no free worker session key after {ATTEMPTS} tries; is "
                             "worker_sessions full of rows no claim deletes?")
