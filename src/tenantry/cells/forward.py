"""Forwarding one request to a cell's API and streaming its answer back (ADR 0028).

The router's own HTTP/1.1 client (``tenantry.http1``, ADR 0022) opens the request and
hands the answer back as soon as its head has arrived; the body is passed on chunk by chunk
as it comes, so an event stream (SSE) flows through with no buffering. Nothing is retried:
a request the cell may have acted on is the client's to repeat (with its Idempotency-Key).

Reading the body is bounded (:class:`Deadlines`): a cell that sends nothing for the idle
deadline, or an answer that is not an event stream and has not ended by the body deadline,
is cut (:class:`BodyCut`) and its connection dropped; an event stream is ended cleanly,
between two events, once its lifetime is up (clients resume it with Last-Event-ID).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Iterable
from dataclasses import dataclass
from typing import cast

from tenantry.cells.directory import Cell
from tenantry.errors import CellUnavailable, ValidationFailed
from tenantry.http1 import HttpClient, HttpError, StreamedResponse, target

#: Seconds a client is told to wait when the tenant's cell does not answer.
CELL_RETRY_AFTER = 5
#: Until the cell's answer head arrives (a long poll, a slow create): then the body streams
#: for as long as the cell sends it.
HEAD_TIMEOUT_SECONDS = 60.0
#: Per connection, never forwarded (RFC 9110 §7.6.1), plus what the client sets itself.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
    "upgrade", "proxy-authenticate", "proxy-authorization",
})
_SET_BY_CLIENT = frozenset({"host", "content-length", "accept-encoding"})
_MAX_TARGET = 8192
#: The endings of an SSE event (a line end, then an empty line): a stream cut right after
#: one has lost nothing half-sent.
_EVENT_ENDS = (b"\n\n", b"\r\r", b"\r\n\r\n")


@dataclass(frozen=True, slots=True)
class Deadlines:
    """How long a forwarded answer's body may take (seconds): ``idle`` without a byte from
    the cell (also, at the router's side, without the client taking one); ``body`` in all,
    from its head, for an answer that is not an event stream; ``stream_lifetime`` for an
    event stream, which then ends between two events."""

    idle: float
    body: float
    stream_lifetime: float


class BodyCut(CellUnavailable):
    """The cell's answer did not arrive whole within its deadlines, or the connection broke
    mid-body: the part already passed on must not look complete. ``reason``: ``idle``,
    ``deadline`` or ``network``."""

    def __init__(self, detail: str, *, reason: str, **extra: object) -> None:
        super().__init__(detail, **extra)
        self.reason = reason


def request_headers(raw: Iterable[tuple[str, str]], *, authorization: str | None = None,
                    client: str | None = None) -> list[tuple[str, str]]:
    """The caller's headers as the cell should get them: hop-by-hop ones (and any named
    in ``Connection``) dropped, ``Authorization`` replaced when given (an operator call is
    sent with the cell's own token), ``X-Forwarded-For`` extended. A header the wire cannot
    carry (a NUL, a line break) is a 400."""
    items = list(raw)
    named = {n.strip().lower() for name, value in items if name.lower() == "connection"
             for n in value.split(",")}
    out: list[tuple[str, str]] = []
    forwarded_for: str | None = None
    for name, value in items:
        low = name.lower()
        if low in HOP_BY_HOP or low in _SET_BY_CLIENT or low in named:
            continue
        if "\x00" in value or "\r" in value or "\n" in value:
            raise ValidationFailed(f"header {name[:40]!r}: control characters are not allowed")
        if low == "authorization" and authorization is not None:
            continue
        if low == "x-forwarded-for":
            forwarded_for = value
            continue
        out.append((name, value))
    if authorization is not None:
        out.append(("Authorization", authorization))
    if client:
        out.append(("X-Forwarded-For", f"{forwarded_for}, {client}" if forwarded_for
                    else client))
    return out


def response_headers(headers: dict[str, str]) -> dict[str, str]:
    named = {n.strip().lower() for n in headers.get("connection", "").split(",")}
    return {k: v for k, v in headers.items() if k not in HOP_BY_HOP and k not in named}


def request_target(raw_path: bytes, query: bytes) -> str:
    """The path and query as the caller sent them (still percent-encoded): printable ASCII
    without spaces, else 400."""
    whole = raw_path + (b"?" + query if query else b"")
    if not raw_path.startswith(b"/") or len(whole) > _MAX_TARGET or any(
            b <= 0x20 or b >= 0x7F for b in whole):
        raise ValidationFailed("the request target must be printable ASCII, at most "
                               f"{_MAX_TARGET} bytes")
    return whole.decode("ascii")


@dataclass(slots=True)
class Opened:
    """A cell's answer whose head has arrived; :meth:`body` streams the rest and closes
    it (or :meth:`close`, if the body is not wanted)."""

    cell: Cell
    response: StreamedResponse
    _stack: contextlib.AsyncExitStack

    @property
    def status(self) -> int:
        return self.response.status

    @property
    def is_stream(self) -> bool:
        return self.response.content_type == "text/event-stream"

    async def body(self, deadlines: Deadlines) -> AsyncGenerator[bytes, None]:
        """The body's chunks as they arrive, within ``deadlines``. An event stream ends
        when its lifetime is up or the cell is silent for ``idle`` — cleanly, between two
        events, where the client resumes with Last-Event-ID (a silent cell caught
        mid-event is a cut). Any other body raises :class:`BodyCut` past either deadline;
        any body does when the connection breaks. The connection is released (or dropped)
        at the end, however it comes."""
        loop = asyncio.get_running_loop()
        stream = self.is_stream
        end = loop.time() + (deadlines.stream_lifetime if stream else deadlines.body)
        between_events = True  # a stream with nothing of an event half-sent
        try:
            # chunks() is an async generator (typed as an iterator): closed on the way out.
            generator = cast("AsyncGenerator[bytes, None]", self.response.chunks())
            async with contextlib.aclosing(generator) as chunks:
                while True:
                    left = end - loop.time()
                    if left <= 0 and not stream:
                        raise self._cut("deadline", f"not whole within {deadlines.body:g}s")
                    if left <= 0 and between_events:
                        return  # the stream's lifetime is up
                    # A timeout ends the read (the chunks cannot be taken up again), so a
                    # stream mid-event waits for the event's end, bounded by idle alone.
                    wait = deadlines.idle if stream and not between_events else \
                        min(deadlines.idle, left)
                    try:
                        async with asyncio.timeout(wait):
                            chunk = await anext(chunks, None)
                    except TimeoutError:
                        if stream and between_events:
                            return  # lifetime up, or the cell silent: resumable here
                        if loop.time() >= end and not stream:
                            raise self._cut("deadline", "not whole within "
                                            f"{deadlines.body:g}s") from None
                        raise self._cut("idle", f"nothing for {deadlines.idle:g}s") \
                            from None
                    except HttpError as exc:
                        raise self._cut("network", exc.reason) from None
                    if chunk is None:
                        return
                    between_events = not stream or chunk.endswith(_EVENT_ENDS)
                    yield chunk
        finally:
            await self._stack.aclose()

    async def read(self, deadlines: Deadlines) -> bytes:
        """The whole body, within ``deadlines`` (:class:`BodyCut` if not)."""
        async with contextlib.aclosing(self.body(deadlines)) as chunks:
            return b"".join([chunk async for chunk in chunks])

    async def close(self) -> None:
        await self._stack.aclose()

    def _cut(self, reason: str, why: str) -> BodyCut:
        cell = self.cell
        return BodyCut(f"cell {cell.name!r} (region {cell.region}): its answer was cut: {why}",
                       reason=reason, cell=cell.name, retry_after=CELL_RETRY_AFTER)


class Forwarder:
    """One per router process: a pooled HTTP/1.1 client per the router's event loop."""

    def __init__(self, client: HttpClient | None = None, *,
                 connections_per_cell: int = 1000) -> None:
        # No cap on a streamed body's size: an event stream lasts as long as its run (its
        # time is bounded by Deadlines instead).
        self.client = client or HttpClient(max_body=1 << 62,
                                           max_per_origin=connections_per_cell)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def open(self, cell: Cell, method: str, path: str,
                   headers: list[tuple[str, str]], body: bytes = b"") -> Opened:
        """Send the request to ``cell``; :class:`CellUnavailable` naming the cell when it
        cannot be reached or does not answer in time (never another cell)."""
        try:
            where = target(cell.api_url + path)
        except ValueError:
            raise ValidationFailed("the request target cannot be forwarded") from None
        stack = contextlib.AsyncExitStack()
        try:
            response = await stack.enter_async_context(self.client.stream(
                method, where, headers=headers, body=body, timeout=HEAD_TIMEOUT_SECONDS))
        except HttpError as exc:
            await stack.aclose()
            raise CellUnavailable(
                f"cell {cell.name!r} (region {cell.region}) is not answering: {exc.reason}; "
                "retry shortly", cell=cell.name, retry_after=CELL_RETRY_AFTER) from None
        except ValueError as exc:  # a header or target the wire cannot carry
            await stack.aclose()
            raise ValidationFailed(f"cannot be forwarded: {exc}") from None
        except BaseException:
            await stack.aclose()
            raise
        return Opened(cell, response, stack)
