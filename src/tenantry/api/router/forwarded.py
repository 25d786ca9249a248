"""A cell's answer passed on to the caller as it arrives, within the deadlines of ADR 0028
("Caps and deadlines"), holding its place under the caller's caps until it is done.

Two sides can stall a forwarded answer, and each would keep a connection to the cell:
the cell (nothing arrives: :meth:`Opened.body` ends or cuts it) and the caller (it stops
reading, so the router cannot write: each write must finish within the idle deadline).
A cut drops both sides — the cell's connection, and the caller's at once (``server.ABORT``)
so that a part of an answer never looks like a whole one."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from tenantry.api.router.server import ABORT
from tenantry.cells.caps import Hold
from tenantry.cells.forward import BodyCut, Deadlines, Opened, response_headers

log = logging.getLogger(__name__)

#: Seconds to wait, after dropping the caller's connection, for the server to notice (it
#: does on its next turn of the loop); past it the call ends anyway.
_DROP_NOTICED = 1.0


class Forwarded(StreamingResponse):
    """The cell's answer (``opened``) for one caller, ``hold`` released once it is done."""

    def __init__(self, opened: Opened, hold: Hold, deadlines: Deadlines) -> None:
        self._chunks = opened.body(deadlines)
        super().__init__(self._chunks, status_code=opened.status,
                         headers=response_headers(dict(opened.response.headers)))
        self._opened = opened
        self._hold = hold
        self._idle = deadlines.idle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = asyncio.ensure_future(_disconnected(receive))
        pump = asyncio.ensure_future(self._pass_on(send))
        try:
            try:
                await asyncio.wait({gone, pump}, return_when=asyncio.FIRST_COMPLETED)
                # The caller went away first: nothing more to pass on.
                cut = pump.result() if pump.done() else None
            finally:
                pump.cancel()
                await asyncio.gather(pump, return_exceptions=True)
                await self._opened.close()  # the cell's connection, whatever happened
                self._hold.release()
            if cut is not None:
                log.info("forwarded answer cut", extra={"cell": self._opened.cell.name,
                                                        "reason": cut.reason})
                abort = scope.get(ABORT)
                if abort is None:
                    raise cut  # the server closes the connection its own way
                abort()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_DROP_NOTICED):
                        await asyncio.shield(gone)
        finally:
            gone.cancel()
            await asyncio.gather(gone, return_exceptions=True)  # nothing left unretrieved

    async def _pass_on(self, send: Send) -> BodyCut | None:
        """Send the answer; the cut that ended it early (the cell's, or the caller's
        not reading for the idle deadline), or None when it was passed on whole."""
        try:
            await self._send(send, {"type": "http.response.start", "status": self.status_code,
                                    "headers": self.raw_headers})
            async with contextlib.aclosing(self._chunks) as chunks:
                async for chunk in chunks:
                    await self._send(send, {"type": "http.response.body", "body": chunk,
                                            "more_body": True})
            await self._send(send, {"type": "http.response.body", "body": b"",
                                    "more_body": False})
        except BodyCut as cut:
            return cut
        except TimeoutError:
            cell = self._opened.cell
            return BodyCut(f"the caller took nothing of cell {cell.name!r}'s answer for "
                           f"{self._idle:g}s", reason="slow_reader", cell=cell.name)
        return None

    async def _send(self, send: Send, message: Message) -> None:
        # The server's send waits while its buffer for this caller is full: a caller that
        # does not read holds the cell's connection for as long as this waits.
        async with asyncio.timeout(self._idle):
            await send(message)


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
