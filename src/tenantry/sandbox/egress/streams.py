"""One sandbox's egress channel on the host, as streams (``proxy.py`` serves them): the
channel's writer shared by its streams (:class:`Mux`, one write per frame), each guest
connection's stream with its flow control (:class:`Stream`: the guest may send a window's
worth, we send what it credits us; the rules are in ``guest/relay.py``), and one
connection's byte count against its cap (:class:`Traffic`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from tenantry.sandbox.egress.frames import (
    CLOSE,
    DATA,
    INITIAL_WINDOW,
    MAX_PAYLOAD,
    encode_frame,
    encode_window,
)


class ProtocolViolation(Exception):
    """The guest broke the frame protocol: the whole channel is closed."""


class CapReached(Exception):
    """A connection went past its byte cap (``EgressLimits.max_stream_bytes``)."""


class Mux:
    """One serve() call: the channel's writer and the live streams."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.streams: dict[int, Stream] = {}
        self.last_id = 0
        self.tasks: set[asyncio.Task[None]] = set()

    async def send(self, frame: bytes) -> None:
        # One write() per frame: frames from concurrent streams never interleave.
        self.writer.write(frame)
        await self.writer.drain()

    def send_nowait(self, frame: bytes) -> None:
        with contextlib.suppress(Exception):  # cleanup paths: the channel may be gone
            if not self.writer.is_closing():
                self.writer.write(frame)


class Stream:
    def __init__(self, mux: Mux, sid: int, head_limit: int) -> None:
        self.mux = mux
        self.sid = sid
        self.inbound = asyncio.StreamReader(limit=head_limit)
        self.received = 0  # guest bytes taken in, not yet credited back
        self.credit = INITIAL_WINDOW  # what we may still send the guest
        self.credit_changed = asyncio.Event()
        self.guest_closed = False
        self.host_closed = False
        self.guest_reset = False
        self.task: asyncio.Task[None] | None = None

    def on_data(self, payload: bytes) -> None:
        if self.guest_closed or self.received + len(payload) > INITIAL_WINDOW:
            raise ProtocolViolation(f"stream {self.sid}: data past its window or its end")
        self.received += len(payload)
        self.inbound.feed_data(payload)

    async def consumed(self, count: int) -> None:
        """``count`` guest bytes were handed on: the guest may send that many more."""
        if count and not self.guest_closed:
            self.received -= count
            await self.mux.send(encode_window(self.sid, count))

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            while self.credit <= 0:
                self.credit_changed.clear()
                await self.credit_changed.wait()
            size = min(len(view), self.credit, MAX_PAYLOAD)
            self.credit -= size
            await self.mux.send(encode_frame(DATA, self.sid, bytes(view[:size])))
            view = view[size:]

    async def close(self) -> None:
        if not self.host_closed:
            self.host_closed = True
            await self.mux.send(encode_frame(CLOSE, self.sid))


class Traffic:
    def __init__(self, cap: int) -> None:
        self.up = 0
        self.down = 0
        self._cap = cap
        self.touch: Callable[[], None] = lambda: None  # pushes the idle deadline back

    def add(self, count: int, *, up: bool) -> None:
        if self.up + self.down + count > self._cap:
            raise CapReached
        if up:
            self.up += count
        else:
            self.down += count
        self.touch()


async def both(first: Awaitable[None], second: Awaitable[None]) -> None:
    """Run both to completion; the first failure cancels the other and is raised."""
    tasks = [asyncio.ensure_future(first), asyncio.ensure_future(second)]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            error = None if task.cancelled() else task.exception()
            if error is not None:
                raise error
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
