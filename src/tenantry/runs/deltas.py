"""Live model deltas, the worker's side (ADR 0030): a streamed reply's text goes to the
run's SSE listeners as it arrives, never to the log.

API and worker are different processes, so the text crosses through Postgres
notifications, and only for runs somebody is watching right now:

- an API process announces the runs it has open event streams for on
  :data:`LISTENERS_CHANNEL` (``<its delta channel>`` then ``+<tenant> <run>`` lines; ``-``
  when its last stream of a run closes), again every few seconds while they stay open
  (runs/hub.py);
- every worker keeps those announcements for :data:`LISTENER_TTL_SECONDS` (so a stream
  whose API process died stops costing anything soon after), and asks the API processes to
  announce everything again (:data:`ROLL_CALL_CHANNEL`) whenever its LISTEN connection is
  (re)opened;
- a model call of a watched run sends its text to each announcing process's own channel:
  ``pg_notify(<channel>, '<tenant> <run> <after_seq> <n> <text>')``, ``n`` counting that
  channel's payloads of this attempt at the call from 0 — a payload ``n = 0`` carries the
  attempt's text from its start (a process that began watching mid-call gets what it
  missed), and starts again after a retry (:meth:`LiveCall.restart`).

The first text of an attempt goes out at once (the latency that matters to a person
watching); after it, what arrives is coalesced and sent at most every
:data:`FLUSH_SECONDS` per worker, in one statement for every watched call, each payload at
most :data:`MAX_TEXT_BYTES` of text (a notification holds < 8000 bytes). Before the step's
commit the call's last text is sent (:meth:`LiveCall.settle`): a listener gets every delta
of a call before its ``ModelReplied``. The notifications go out on the worker's session
connection (runs/worker.py), which does nothing else once the session lock is taken.

Deltas are best effort: while a connection is down they are lost (the durable
``ModelReplied`` is not). Runs nobody watches cost one dictionary look-up per piece of
text, and no notification at all."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import asyncpg

log = logging.getLogger(__name__)

#: API processes → workers: the runs they hold event streams open for.
LISTENERS_CHANNEL = "tenantry_stream_listeners"
#: Workers → API processes: "announce your streams again" (a worker (re)connected).
ROLL_CALL_CHANNEL = "tenantry_stream_roll_call"
#: Each API process's own channel for the deltas of the runs it watches starts so.
DELTA_CHANNEL_PREFIX = "tenantry_deltas_"
#: An API process announces its streams this often...
ANNOUNCE_SECONDS = 5.0
#: ...and a worker forgets an announcement this long after it came.
LISTENER_TTL_SECONDS = 3 * ANNOUNCE_SECONDS
#: After an attempt's first text, what follows is sent at most this often.
FLUSH_SECONDS = 0.02
#: Text per notification, in UTF-8 bytes (a payload must stay under 8000 bytes).
MAX_TEXT_BYTES = 7000
#: How long a step waits for its call's last deltas to be sent before it commits.
SETTLE_SECONDS = 1.0

# Committed without waiting for the WAL flush: a NOTIFY's commit takes the cluster-wide
# notification lock until it has committed, so a synchronous one would hold every step's
# commit (their events NOTIFY too) for an fsync, and wait for theirs. Nothing durable is
# written; the notifications are delivered at commit all the same.
NOTIFY_SQL = ("SELECT count(pg_notify(c, p)) "
              "FROM set_config('synchronous_commit', 'off', true) AS s, "
              "unnest($1::text[], $2::text[]) AS x(c, p)")

Key = tuple[str, str]  # (tenant, run uuid)


def delta_payload(tenant: str, run: str, after_seq: int, n: int, text: str) -> str:
    return f"{tenant} {run} {after_seq} {n} {text}"


def split_text(text: str, limit: int = MAX_TEXT_BYTES) -> list[str]:
    """``text`` in pieces of at most ``limit`` UTF-8 bytes, cut between characters."""
    raw = text.encode()
    if len(raw) <= limit:
        return [text]
    pieces, start = [], 0
    while start < len(raw):
        end = min(start + limit, len(raw))
        while end < len(raw) and raw[end] & 0xC0 == 0x80:  # inside a character
            end -= 1
        pieces.append(raw[start:end].decode())
        start = end
    return pieces


class LiveCall:
    """One model call of a run, as its provider client streams it (the client's
    :class:`~tenantry.models.types.DeltaSink`)."""

    __slots__ = ("after_seq", "closed", "counts", "key", "parts", "publisher", "sent",
                 "wanted")

    def __init__(self, publisher: DeltaPublisher, key: Key, after_seq: int, *,
                 wanted: bool = False) -> None:
        self.publisher = publisher
        self.key = key
        self.after_seq = after_seq
        # The run asked to stream: the call streams even before a listener is heard of,
        # and a listener announced mid-call is sent the text so far.
        self.wanted = wanted
        self.parts: list[str] = []  # the attempt's text so far
        self.sent: dict[str, int] = {}  # channel -> parts it was sent
        self.counts: dict[str, int] = {}  # channel -> payloads it was sent (its next n)
        self.closed = False

    # -- DeltaSink ------------------------------------------------------------------

    @property
    def live(self) -> bool:
        return self.wanted or self.key in self.publisher.listeners

    def restart(self) -> None:
        self.parts.clear()
        self.sent.clear()
        self.counts.clear()

    def text(self, chunk: str) -> None:
        self.parts.append(chunk)
        publisher = self.publisher
        if self.key in publisher.listeners:
            # The attempt's first text for a channel goes out at once; later text waits
            # for the next flush.
            publisher.mark(self, urgent=not self.sent)

    # -- the step ---------------------------------------------------------------------

    def unsent(self) -> bool:
        """Text some live listener has not been sent."""
        return any(self.sent.get(channel, 0) < len(self.parts)
                   for channel in self.publisher.channels(self.key))

    async def settle(self, within: float = SETTLE_SECONDS) -> None:
        """Return once every listener has been sent the call's whole text (at most
        ``within`` seconds: a commit is not held up by a slow notification)."""
        await self.publisher.settle(self, within)

    def close(self) -> None:
        self.closed = True
        if self.publisher.calls.get(self.key) is self:
            del self.publisher.calls[self.key]


class DeltaPublisher:
    """One per engine (a worker process's run loop): which runs are watched, the model
    calls in progress, and the task that sends their text."""

    def __init__(self, *, flush_seconds: float = FLUSH_SECONDS,
                 ttl_seconds: float = LISTENER_TTL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.flush_seconds = flush_seconds
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        # (tenant, run) -> {channel: when its announcement lapses}
        self.listeners: dict[Key, dict[str, float]] = {}
        self.calls: dict[Key, LiveCall] = {}
        self._dirty: set[LiveCall] = set()
        self._in_flight: set[LiveCall] = set()
        self._urgent = False
        self._roll_call = False
        self._wake = asyncio.Event()
        self._hurry = asyncio.Event()
        self._flushed = asyncio.Event()
        self._conn: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._last_flush = 0.0
        self._next_sweep = 0.0
        self.sent_deltas = 0  # delta notifications sent, ever (tests, benchmarks)

    # -- the session connection (runs/worker.py) ---------------------------------------

    def attach(self, conn: asyncpg.Connection) -> None:
        """Send on ``conn`` from now on (the worker's session connection, once it
        LISTENs on :data:`LISTENERS_CHANNEL`), and ask the API processes to announce
        their streams: this worker may have missed announcements while not listening."""
        self._conn = conn
        self._roll_call = True
        self._urgent = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(),
                                                                name="model-deltas")
        self._wake.set()
        self._hurry.set()

    def detach(self, conn: asyncpg.Connection | None = None) -> None:
        if conn is None or self._conn is conn:
            self._conn = None

    async def stop(self) -> None:
        self._conn = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._flushed.set()  # nobody waits for a flush that will not come

    # -- announcements (a LISTEN callback) -----------------------------------------------

    def on_listeners(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        if not isinstance(payload, str):
            return
        channel, _, body = payload.partition("\n")
        if not channel.startswith(DELTA_CHANNEL_PREFIX):
            log.warning("ignoring a malformed stream announcement",
                        extra={"payload": payload[:200]})
            return
        now = self._clock()
        lapses = now + self.ttl_seconds
        for line in body.split("\n"):
            tenant, _, run = line[1:].partition(" ")
            if not run:
                continue
            key = (tenant, run)
            if line[0] == "+":
                watchers = self.listeners.setdefault(key, {})
                new = channel not in watchers
                watchers[channel] = lapses
                call = self.calls.get(key)
                if new and call is not None and call.parts:
                    self.mark(call, urgent=True)  # what it missed of the call, at once
            elif line[0] == "-":
                known = self.listeners.get(key)
                if known is not None:
                    known.pop(channel, None)
                    if not known:
                        del self.listeners[key]
        if now >= self._next_sweep:
            self._sweep(now)

    def _sweep(self, now: float) -> None:
        self._next_sweep = now + self.ttl_seconds
        for key in [k for k, w in self.listeners.items() if max(w.values()) <= now]:
            del self.listeners[key]

    def channels(self, key: Key) -> list[str]:
        """The channels of the processes watching ``key`` now."""
        watchers = self.listeners.get(key)
        if not watchers:
            return []
        now = self._clock()
        live = [channel for channel, lapses in watchers.items() if lapses > now]
        if len(live) != len(watchers):
            for channel in [c for c in watchers if c not in live]:
                del watchers[channel]
            if not watchers:
                del self.listeners[key]
        return live

    # -- calls -----------------------------------------------------------------------------

    def open(self, tenant: str, run: str, after_seq: int, *, wanted: bool = False) -> LiveCall:
        """The delta sink of a model call of ``run`` made after event ``after_seq``
        (``wanted``: the run asked to stream, listener or not)."""
        call = LiveCall(self, (tenant, run), after_seq, wanted=wanted)
        self.calls[call.key] = call
        return call

    def mark(self, call: LiveCall, *, urgent: bool) -> None:
        self._dirty.add(call)
        if urgent:
            self._urgent = True
            self._hurry.set()
        self._wake.set()

    async def settle(self, call: LiveCall, within: float) -> None:
        if not (call in self._in_flight or call.unsent()):
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                while (self._task is not None and not self._task.done()
                       and (call in self._in_flight or call.unsent())):
                    self.mark(call, urgent=True)
                    self._flushed.clear()
                    await self._flushed.wait()

    # -- sending ---------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            if not self._urgent:
                delay = self._last_flush + self.flush_seconds - loop.time()
                if delay > 0:
                    self._hurry.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await self._hurry.wait()
            self._wake.clear()
            self._urgent = False
            self._last_flush = loop.time()
            try:
                await self._flush()
            finally:
                self._flushed.set()

    async def _flush(self) -> None:
        channels: list[str] = []
        payloads: list[str] = []
        if self._roll_call:
            self._roll_call = False
            channels.append(ROLL_CALL_CHANNEL)
            payloads.append("")
        batch, self._dirty = self._dirty, set()
        for call in batch:
            if call.closed:
                continue
            tenant, run = call.key
            for channel in self.channels(call.key):
                start = call.sent.get(channel, 0)
                if start >= len(call.parts):
                    continue
                text = "".join(call.parts[start:]).replace("\0", "")  # no NUL in a payload
                call.sent[channel] = len(call.parts)
                for piece in split_text(text) if text else ():
                    n = call.counts.get(channel, 0)
                    call.counts[channel] = n + 1
                    channels.append(channel)
                    payloads.append(delta_payload(tenant, run, call.after_seq, n, piece))
        conn = self._conn
        if not payloads or conn is None or conn.is_closed():
            return  # nothing to send, or nowhere to send it: lost (deltas are best effort)
        self._in_flight = batch
        try:
            await conn.execute(NOTIFY_SQL, channels, payloads)
            self.sent_deltas += sum(1 for c in channels if c != ROLL_CALL_CHANNEL)
        except Exception as exc:  # the session connection broke: the worker reconnects
            log.debug("model deltas not sent: %s", exc)
        finally:
            self._in_flight = set()
