"""A run's event stream: the Server-Sent Events parser, and the resumption that makes a
stream cut anywhere (between events, inside one, while idle) look like one stream with
no gap and no repeat.

The parser follows the SSE rules (WHATWG HTML, "Parsing an event stream"): lines end with
CRLF, LF or CR; ``:`` starts a comment (the platform's keepalives); ``data`` lines join
with newlines; a blank line ends an event; an event without data is dropped, and so is
whatever was left unterminated when the connection closed — a half-received event is
never delivered, its seq is asked for again.

Durable events carry ``id: <seq>`` and their JSON has the same ``seq``. The client tracks
the last seq it handed to the caller and reconnects with ``Last-Event-ID: <that seq>``; an
event at or below it is never handed out twice. Events without an ``id`` of their own are
ephemeral: ``model_delta`` becomes a :class:`ModelDelta` and any other kind this client
does not know is skipped; neither moves the resumption point. (WHATWG's parser keeps an id
for the events after it; the platform's ids rise with every durable event, so an event
whose id is not the one before it set its own.)
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

import httpx2
import orjson

from tenantry.client import _calls
from tenantry.client._closing import AsyncClosing, Closing
from tenantry.client.errors import ClientError
from tenantry.client.models import Event, ModelDelta, Run
from tenantry.sse import SseEvent, SseParser

if TYPE_CHECKING:
    from tenantry.client._retry import RetryPolicy
    from tenantry.client._transport import AsyncTransport, SyncTransport

__all__ = ["AsyncEventStream", "EventStream", "SseDecoder", "SseMessage", "StreamItem"]

#: What a run's stream yields.
StreamItem = Event | ModelDelta


class SseDecoder(SseParser):
    """The event-stream parser (:mod:`tenantry.sse`, shared with the server) as the SDK
    uses it: a line, or an event's data, past ``max_event`` bytes is a
    :class:`ClientError` (a stream that never ends its line is refused, not buffered). A
    new decoder (after a reconnect) forgets what the last connection left half-sent."""

    __slots__ = ()
    too_large = ClientError


#: One dispatched SSE event: ``id`` is the last id the stream set (WHATWG's last event ID).
SseMessage = SseEvent


def to_item(message: SseMessage) -> StreamItem | None:
    """The typed item for one SSE event, durable when its ``id`` is set (the caller passes
    None for an id that is only an earlier event's); None for an ephemeral kind this client
    does not know (or one it cannot read: ephemeral events are best effort)."""
    try:
        body: Any = orjson.loads(message.data)
    except orjson.JSONDecodeError:
        body = None
    if message.event == "model_delta" or (
            isinstance(body, dict) and body.get("type") == "model_delta"):
        if not isinstance(body, dict):
            return None
        try:
            return ModelDelta(int(body.get("after_seq", 0)), str(body.get("text", "")))
        except (TypeError, ValueError):
            return None
    if message.id is None:
        return None
    # A durable event: one this client cannot read would leave a gap, so it is an error.
    try:
        return Event.from_json(body)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ClientError(f"unreadable event (id {message.id}): {message.data[:200]!r}") \
            from exc


class Resumption:
    """Where a stream is: the last seq handed to the caller (``last_seq``), whether that
    was the run's last event (``ended``), and the current connection's decoder."""

    def __init__(self, after: int) -> None:
        self.last_seq = after
        self.ended = False
        self._decoder = SseDecoder()
        self._parsed = after  # the last seq read on this connection
        self._parsed_end = False
        self._last_id: str | None = None  # the id of the event before, on this connection

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream"}
        if self.last_seq > 0:
            headers["Last-Event-ID"] = str(self.last_seq)
        return headers

    def feed(self, chunk: bytes) -> list[StreamItem]:
        """The items this chunk completes, without repeats, up to the run's last event."""
        out: list[StreamItem] = []
        for message in self._decoder.feed(chunk):
            if self._parsed_end:
                break
            item = self.item(message)
            if item is None:
                continue
            if isinstance(item, Event):
                if item.seq <= self._parsed:
                    continue  # handed out before the connection dropped
                self._parsed = item.seq
                self._parsed_end = item.terminal
            out.append(item)
        return out

    def item(self, message: SseMessage) -> StreamItem | None:
        """:func:`to_item`, for the next event of this connection: one that repeats the id
        of the event before it did not set one."""
        own = message.id is not None and message.id != self._last_id
        self._last_id = message.id
        return to_item(message if own else message._replace(id=None))

    def handing(self, item: StreamItem) -> None:
        """``item`` goes to the caller now."""
        if isinstance(item, Event):
            self.last_seq = item.seq
            self.ended = item.terminal

    def reconnecting(self) -> None:
        """The connection is gone: what it left half-sent is dropped; the next one starts
        after the last event handed out."""
        self._decoder = SseDecoder()
        self._parsed = self.last_seq
        self._parsed_end = False
        self._last_id = None


class _Follow:
    """What the sync and async streams share: the run, where it is, whether the current
    connection brought anything, and how many connections in a row ended having brought
    nothing (for the backoff)."""

    def __init__(self, run_id: str, after: int, policy: RetryPolicy) -> None:
        self.run_id = run_id
        self.path = _calls.events_path(run_id)
        self.state = Resumption(after)
        self.policy = policy
        self.received = False
        self.empty_drops = 0

    def connecting(self) -> dict[str, str]:
        """A connection opens: the headers it asks with."""
        self.received = False
        return self.state.headers()

    def items(self, chunk: bytes) -> Iterator[StreamItem]:
        """The items ``chunk`` completes, each counted as handed out as the caller takes it."""
        self.received = self.received or bool(chunk)
        for item in self.state.feed(chunk):
            self.state.handing(item)
            yield item

    def may_have_ended(self, clean: bool) -> bool:
        """A connection that closed cleanly with nothing new: the run may have ended before
        ``after`` (read it, then ask :meth:`ended_before`)."""
        return clean and not self.received

    def ended_before(self, run: Run) -> bool:
        """Whether ``run`` (read after a connection closed cleanly with nothing new) had
        ended at or before the stream's position: nothing more will come."""
        return run.ended and run.last_seq <= self.state.last_seq

    def dropped(self) -> float:
        """A connection ended before the run's last event: the pause before the next one.
        0 when it brought something, else a backoff that grows with the empty drops in
        a row. Only opening a connection is bounded (the client's retries and deadline): a
        stream that opens is followed for as long as the run goes on."""
        self.state.reconnecting()
        self.empty_drops = 0 if self.received else self.empty_drops + 1
        return self.policy.backoff_for(self.empty_drops) if self.empty_drops else 0.0


TransportT = TypeVar("TransportT", "SyncTransport", "AsyncTransport")
ItemsT = TypeVar("ItemsT")


class _Stream(Generic[TransportT, ItemsT]):
    """What both streams hold: the transport, the run's position, and the generator of
    the items they hand out (``_run``, begun at once)."""

    def __init__(self, transport: TransportT, run_id: str, after: int = 0) -> None:
        self._transport: TransportT = transport
        self._follow = _Follow(run_id, after, transport.policy)
        self._items = self._run()

    @property
    def last_seq(self) -> int:
        """The seq of the last durable event handed out (``after`` before the first)."""
        return self._follow.state.last_seq

    def _run(self) -> ItemsT:
        raise NotImplementedError


class EventStream(_Stream["SyncTransport", Generator[StreamItem, None, None]], Closing,
                  Iterator[StreamItem]):
    """A run's events, live, as :class:`Event` (durable, in seq order, each once) and
    :class:`ModelDelta` (ephemeral). Reconnects by itself when the connection drops; ends
    after the run's last event. Close it (or use ``with``) to stop early."""

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> StreamItem:
        return next(self._items)

    def close(self) -> None:
        self._items.close()

    def _run(self) -> Generator[StreamItem, None, None]:
        follow, t = self._follow, self._transport
        while True:
            clean = True
            try:
                with t.stream(follow.path, follow.connecting()) as response:
                    for chunk in response.iter_bytes():
                        yield from follow.items(chunk)
                        if follow.state.ended:
                            return
            except httpx2.TransportError:
                clean = False  # reset, cut short, or silent too long
            if follow.may_have_ended(clean) and follow.ended_before(
                    t.call(_calls.get_run(follow.run_id))):
                return
            pause = follow.dropped()
            if pause:
                t.sleep(pause)


class AsyncEventStream(_Stream["AsyncTransport", AsyncGenerator[StreamItem, None]],
                       AsyncClosing, AsyncIterator[StreamItem]):
    """:class:`EventStream` for ``async for``; ``aclose()`` (or ``async with``) to stop
    early."""

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> StreamItem:
        return await anext(self._items)

    async def aclose(self) -> None:
        await self._items.aclose()

    async def _run(self) -> AsyncGenerator[StreamItem, None]:
        follow, t = self._follow, self._transport
        while True:
            clean = True
            try:
                async with t.stream(follow.path, follow.connecting()) as response, \
                        aclosing(response.aiter_bytes()) as chunks:
                    async for chunk in chunks:
                        for item in follow.items(chunk):
                            yield item
                        if follow.state.ended:
                            return
            except httpx2.TransportError:
                clean = False
            if follow.may_have_ended(clean) and follow.ended_before(
                    await t.call(_calls.get_run(follow.run_id))):
                return
            pause = follow.dropped()
            if pause:
                await t.sleep(pause)
