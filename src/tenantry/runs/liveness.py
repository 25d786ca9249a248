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

from tenantry import __version__
from tenantry.db import DATABASE_DOWN
from tenantry.db.pool import connect_timeout, server_settings
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
        outcome = await conn.fetchval(Q.register_worker, worker, key, rejoin, __version__)
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


class SessionConnection:
    """A connection kept open for its holder's life with the holder's session lock on it
    (what the activity dispatcher holds; a worker loop shares its with LISTEN). ``ensure``
    (re)opens and registers it, never waiting on a taken key; the holder claims nothing
    while it is down. After a drop it registers again under the same id (``rejoin``)."""

    def __init__(self, dsn: str, worker: str, *, role: str | None = "tenantry_app",
                 new_id: Callable[[], str] | None = None) -> None:
        self._dsn = dsn
        self._role = role
        self._new_id = new_id
        self._failures: tuple[type[Exception], ...] = (
            *DATABASE_DOWN, asyncpg.PostgresError, RegistrationFailed)
        self.worker = worker
        self.session: Session | None = None
        self._conn: asyncpg.Connection | None = None
        self._failing = False

    @property
    def alive(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def ensure(self) -> bool:
        """True once the lock is held (as far as we know); False when it cannot be now."""
        if self.alive:
            return True
        self._conn = None
        conn: asyncpg.Connection | None = None
        try:
            conn = await asyncpg.connect(self._dsn, timeout=connect_timeout(self._dsn),
                                         server_settings=server_settings(self._role))
            session = await register(conn, self.worker, rejoin=self.session is not None,
                                     new_id=self._new_id)
        except BaseException as exc:
            if conn is not None:
                conn.terminate()
            if not isinstance(exc, self._failures):
                raise
            if not self._failing:  # once per outage, not once per poll
                logger.warning("no session connection, claiming nothing: %s", exc,
                               extra={"worker": self.worker})
            self._failing = True
            return False
        if self._failing or self.session is not None:
            logger.info("session lock taken", extra={"worker": session.worker,
                                                      "lock_key": session.key})
        self._failing = False
        self.worker, self.session, self._conn = session.worker, session, conn
        return True

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close(timeout=5)
            except Exception:  # closing anyway: Postgres drops the lock with the socket
                conn.terminate()
