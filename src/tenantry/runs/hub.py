"""Live tails without polling: one LISTEN connection per process fans Postgres
notifications out to the streams waiting on a run.

Each new event fires ``pg_notify('tenantry_events', '<tenant> <run uuid> <seq>')`` from a
trigger, at commit. A subscriber is only *woken*; it then reads the log itself, under its
own tenant, from the last seq it sent. So a lost or coalesced notification can delay a
stream but never reorder, duplicate or leak it.

Live model deltas (ADR 0030, runs/deltas.py) come the other way: the hub announces the runs
its subscribers want deltas of on ``tenantry_stream_listeners`` (at once for a new one,
all of them every few seconds and whenever a worker asks), and the workers send those
runs' deltas to this hub's own channel, where they are handed to the run's subscribers
directly — they are not in the log, so there is nothing to read back. The hub keeps the
text of each watched run's current call, so a stream opened mid-call starts with what it
missed.
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
from tenantry.db.pool import connect_timeout, server_settings
from tenantry.runs.deltas import (
    ANNOUNCE_SECONDS,
    DELTA_CHANNEL_PREFIX,
    LISTENERS_CHANNEL,
    ROLL_CALL_CHANNEL,
)

log = logging.getLogger(__name__)

CHANNEL = "tenantry_events"
#: The hub's connection in pg_stat_activity, with its release as every connection has it.
APPLICATION_NAME = server_settings(purpose="event hub")["application_name"]
#: Deltas one subscriber may have waiting (in characters): a client that does not read
#: its stream stops getting them past this.
MAX_PENDING_CHARS = 1_000_000
#: Bytes of one announcement notification (a payload must stay under 8000).
_ANNOUNCE_BYTES = 7500
#: A worker's roll call is answered at most this often.
_ROLL_CALL_SECONDS = 0.5

Key = tuple[str, uuid.UUID]


def _setter(event: asyncio.Event) -> Callable[[object], None]:
    return lambda _conn: event.set()


class Subscription:
    """One stream's view of a run: ``wake`` is set when there is news; ``durable`` says
    the log may have new events (read it), :meth:`take_deltas` what deltas came."""

    __slots__ = ("_chars", "_deltas", "durable", "wake")

    def __init__(self) -> None:
        self.wake = asyncio.Event()
        self.durable = False
        self._deltas: list[tuple[int, str]] = []
        self._chars = 0

    def news(self) -> None:
        self.durable = True
        self.wake.set()

    def delta(self, after_seq: int, text: str) -> None:
        if self._chars + len(text) > MAX_PENDING_CHARS:
            return
        self._chars += len(text)
        if self._deltas and self._deltas[-1][0] == after_seq:
            self._deltas[-1] = (after_seq, self._deltas[-1][1] + text)
        else:
            self._deltas.append((after_seq, text))
        self.wake.set()

    def take_deltas(self) -> list[tuple[int, str]]:
        taken, self._deltas, self._chars = self._deltas, [], 0
        return taken


class EventHub:
    def __init__(
        self, dsn: str, *, reconnect_delay: float = 1.0,
        extra: dict[str, Callable[..., None]] | None = None, outage: Outage | None = None,
        announce_seconds: float = ANNOUNCE_SECONDS,
    ) -> None:
        # The process's outage record: a reconnect loop failing every second during an
        # outage says so once, not every second.
        self._outage = outage or Outage()
        self._extra = dict(extra or {})
        self._dsn = dsn
        self._reconnect_delay = reconnect_delay
        self._waiters: dict[Key, set[Subscription]] = defaultdict(set)
        self._conn: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        # -- live deltas --
        self.delta_channel = f"{DELTA_CHANNEL_PREFIX}{uuid.uuid4().hex[:16]}"
        self._announce_seconds = announce_seconds
        self._watchers: dict[Key, set[Subscription]] = {}
        self._texts: dict[Key, tuple[int, str | None]] = {}  # the current call's text
        self._joined: set[Key] = set()
        self._left: set[Key] = set()
        self._announce_all = False
        self._announce = asyncio.Event()
        self._ready = False  # the connection LISTENs on everything: the announcer may use it
        self._conn_lock = asyncio.Lock()
        self._announcer: asyncio.Task[None] | None = None
        self.deltas_received = 0  # delta notifications, ever (tests, benchmarks)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="event-hub")
        self._announcer = asyncio.create_task(self._announce_loop(), name="stream-announcer")
        await self._connected.wait()

    async def close(self) -> None:
        for task in (self._announcer, self._task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._conn is not None and not self._conn.is_closed():
            await self._conn.close()

    @contextlib.asynccontextmanager
    async def subscribe(self, tenant: str, run: uuid.UUID, *,
                        deltas: bool = False) -> AsyncIterator[Subscription]:
        """A subscription woken whenever ``run`` may have new events (and, with
        ``deltas``, given the run's live model deltas). Subscribe *before* reading the
        backlog so nothing committed in between is missed."""
        sub = Subscription()
        key = (tenant, run)
        self._waiters[key].add(sub)
        if deltas:
            self._watch(key, sub)
        try:
            yield sub
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(sub)
                if not waiters:
                    del self._waiters[key]
            if deltas:
                self._unwatch(key, sub)

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        if not isinstance(payload, str):
            return
        try:
            tenant, run, _seq = payload.split(" ")
            key = (tenant, uuid.UUID(run))
        except ValueError:
            log.warning("ignoring malformed notification", extra={"payload": payload[:200]})
            return
        for sub in self._waiters.get(key, ()):
            sub.news()

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for sub in waiters:
                sub.news()

    # -- live deltas ----------------------------------------------------------------------

    def _watch(self, key: Key, sub: Subscription) -> None:
        watchers = self._watchers.get(key)
        if watchers is None:
            watchers = self._watchers[key] = set()
            self._left.discard(key)
            self._joined.add(key)
            self._announce.set()
        watchers.add(sub)
        current = self._texts.get(key)
        if current is not None and current[1]:
            sub.delta(current[0], current[1])  # what it missed of the call in progress

    def _unwatch(self, key: Key, sub: Subscription) -> None:
        watchers = self._watchers.get(key)
        if watchers is None:
            return
        watchers.discard(sub)
        if not watchers:
            del self._watchers[key]
            self._texts.pop(key, None)
            self._joined.discard(key)
            self._left.add(key)
            self._announce.set()

    def _on_delta(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        if not isinstance(payload, str):
            return
        try:
            tenant, run, after_text, n_text, text = payload.split(" ", 4)
            key = (tenant, uuid.UUID(run))
            after_seq, n = int(after_text), int(n_text)
        except ValueError:
            log.warning("ignoring a malformed model delta", extra={"payload": payload[:200]})
            return
        watchers = self._watchers.get(key)
        if not watchers:
            return
        self.deltas_received += 1
        current = self._texts.get(key)
        if n == 0:  # an attempt's text from its start (a retry starts again)
            self._texts[key] = (after_seq, text)
        elif current is not None and current[0] == after_seq and current[1] is not None:
            self._texts[key] = (after_seq, current[1] + text)
        else:  # some of it went missing (this connection dropped): no catch-up to give
            self._texts[key] = (after_seq, None)
        for sub in watchers:
            sub.delta(after_seq, text)

    def _on_roll_call(self, *_args: object) -> None:
        self._announce_all = True
        self._announce.set()

    async def _announce_loop(self) -> None:
        """Tell the workers which runs this process wants deltas of: new ones at once, the
        ones it stopped watching too, and all of them every ``announce_seconds`` (their
        records lapse) and when a worker asks."""
        loop = asyncio.get_running_loop()
        next_all = loop.time() + self._announce_seconds
        last_all = 0.0
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, next_all - loop.time())):
                    await self._announce.wait()
            self._announce.clear()
            now = loop.time()
            everything = now >= next_all or (
                self._announce_all and now - last_all >= _ROLL_CALL_SECONDS)
            if self._announce_all and not everything:
                # A roll call answered a moment ago: answer this one shortly.
                loop.call_later(_ROLL_CALL_SECONDS, self._announce.set)
            if everything:
                self._announce_all = False
                next_all, last_all = now + self._announce_seconds, now
                joined: set[Key] = set(self._watchers)
            else:
                joined = self._joined
            left = self._left
            self._joined, self._left = set(), set()
            if not (joined or left):
                continue
            lines = [f"+{tenant} {run}" for tenant, run in joined]
            lines += [f"-{tenant} {run}" for tenant, run in left]
            if not await self._send_announcements(lines):
                # Not sent (no connection): the next full announcement carries them.
                self._left |= left

    async def _send_announcements(self, lines: list[str]) -> bool:
        payloads, current, size = [], [self.delta_channel], len(self.delta_channel)
        for line in lines:
            if size + len(line) + 1 > _ANNOUNCE_BYTES:
                payloads.append("\n".join(current))
                current, size = [self.delta_channel], len(self.delta_channel)
            current.append(line)
            size += len(line) + 1
        payloads.append("\n".join(current))
        conn = self._conn
        if not self._ready or conn is None or conn.is_closed():
            return False
        try:
            async with self._conn_lock:
                # Not waiting for the WAL flush, as runs/deltas.py's NOTIFY_SQL says why.
                await conn.execute(
                    "SELECT count(pg_notify($1, p)) FROM set_config('synchronous_commit', "
                    "'off', true) AS s, unnest($2::text[]) AS p", LISTENERS_CHANNEL, payloads)
        except Exception as exc:  # the LISTEN loop reconnects and announces everything
            log.debug("stream announcement not sent: %s", exc)
            return False
        return True

    # -- the connection -----------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                self._conn = await asyncpg.connect(
                    self._dsn, timeout=connect_timeout(self._dsn),
                    server_settings={"application_name": APPLICATION_NAME})
                async with self._conn_lock:
                    await self._conn.add_listener(CHANNEL, self._on_notify)
                    await self._conn.add_listener(self.delta_channel, self._on_delta)
                    await self._conn.add_listener(ROLL_CALL_CHANNEL, self._on_roll_call)
                    for channel, callback in self._extra.items():
                        await self._conn.add_listener(channel, callback)
                        callback()  # whatever changed while we were not listening
                closed = asyncio.Event()
                self._conn.add_termination_listener(_setter(closed))
                self._ready = True
                self._connected.set()
                self._outage.answered()
                # Anything committed while we were not listening: let every stream re-read;
                # and the workers may have forgotten our streams meanwhile.
                self._wake_all()
                self._on_roll_call()
                await closed.wait()
                self._ready = False
                self._outage.failed("event hub", ConnectionError("LISTEN connection lost"))
            except DATABASE_DOWN as exc:
                self._ready = False
                self._outage.failed("event hub", exc)
            except asyncpg.PostgresError as exc:
                self._ready = False
                log.warning("event hub cannot listen: %s", exc)
            await asyncio.sleep(self._reconnect_delay)
