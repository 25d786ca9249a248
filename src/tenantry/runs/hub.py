"""Live tails without polling: one LISTEN connection per process fans Postgres
notifications out to the streams waiting on a run.

Each new event fires ``pg_notify('tenantry_events', '<tenant> <run uuid> <seq>')`` from a
trigger, at commit. A subscriber is only *woken*; it then reads the log itself, under its
own tenant, from the last seq it sent. So a lost or coalesced notification can delay a
stream but never reorder, duplicate or leak it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable

import asyncpg

from tenantry.db import DATABASE_DOWN
from tenantry.db.outage import Outage
from tenantry.db.pool import connect_timeout

log = logging.getLogger(__name__)

CHANNEL = "tenantry_events"


def _setter(event: asyncio.Event) -> Callable[[object], None]:
    return lambda _conn: event.set()


class EventHub:
    def __init__(
        self, dsn: str, *, reconnect_delay: float = 1.0,
        extra: dict[str, Callable[..., None]] | None = None, outage: Outage | None = None,
    ) -> None:
        # The process's outage record: a reconnect loop failing every second during an
        # outage says so once, not every second.
        self._outage = outage or Outage()
        self._extra = dict(extra or {})
        self._dsn = dsn
        self._reconnect_delay = reconnect_delay
        self._waiters: dict[tuple[str, uuid.UUID], set[asyncio.Event]] = defaultdict(set)
        self._conn: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="event-hub")
        await self._connected.wait()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._conn is not None and not self._conn.is_closed():
            await self._conn.close()

    @contextlib.asynccontextmanager
    async def subscribe(self, tenant: str, run: uuid.UUID) -> AsyncIterator[asyncio.Event]:
        """An event set whenever ``run`` may have new events. Subscribe *before* reading the
        backlog so nothing committed in between is missed."""
        wake = asyncio.Event()
        key = (tenant, run)
        self._waiters[key].add(wake)
        try:
            yield wake
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(wake)
                if not waiters:
                    del self._waiters[key]

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        if not isinstance(payload, str):
            return
        try:
            tenant, run, _seq = payload.split(" ")
            key = (tenant, uuid.UUID(run))
        except ValueError:
            log.warning("ignoring malformed notification", extra={"payload": payload[:200]})
            return
        for wake in self._waiters.get(key, ()):
            wake.set()

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for wake in waiters:
                wake.set()

    async def _run(self) -> None:
        while True:
            try:
                self._conn = await asyncpg.connect(self._dsn, timeout=connect_timeout(self._dsn))
                await self._conn.add_listener(CHANNEL, self._on_notify)
                for channel, callback in self._extra.items():
                    await self._conn.add_listener(channel, callback)
                    callback()  # whatever changed while we were not listening
                closed = asyncio.Event()
                self._conn.add_termination_listener(_setter(closed))
                self._connected.set()
                self._outage.answered()
                # Anything committed while we were not listening: let every stream re-read.
                self._wake_all()
                await closed.wait()
                self._outage.failed("event hub", ConnectionError("LISTEN connection lost"))
            except DATABASE_DOWN as exc:
                self._outage.failed("event hub", exc)
            except asyncpg.PostgresError as exc:
                log.warning("event hub cannot listen: %s", exc)
            await asyncio.sleep(self._reconnect_delay)
