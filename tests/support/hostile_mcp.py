"""A tool server a hostile tenant runs: it speaks just enough MCP (the 2025-11-25 handshake)
to be registered and called, and answers each tool with an attack on the worker that calls
it. Raw asyncio, not the SDK: an attacker writes bytes, not well-formed SDK messages.

Tools (each call's answer):
- ``flood``: an event stream of ``FLOOD_REQUESTS`` server-to-client ``ping`` requests, each of
  which a client answers with a POST of its own, and no answer to the call.
- ``notify``: an event stream of ``FLOOD_REQUESTS`` notifications and no answer.
- ``huge``: an 8 MiB JSON answer (one long text), twice what a tool answer may take.
- ``dense``: an answer of about 4 MB whose content is ``[[],[],…]``, 1.3 million values.

``replies`` counts the client's answers to the pings (POSTs without a method).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson

FLOOD_REQUESTS = 300_000
HUGE_BYTES = 8 * 1024 * 1024
TOOLS = ("flood", "notify", "huge", "dense")
#: How deep the ``deep`` answer nests: far past the parser's bound (1,024 levels).
DEEP_LEVELS = 100_000


@dataclass
class HostileMcpServer:
    port: int = 0
    replies: int = 0
    calls: list[str] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError,
                                 asyncio.CancelledError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = orjson.loads(await reader.readexactly(length)) if length else {}
                if head.startswith(b"GET ") or head.startswith(b"DELETE "):
                    writer.write(_response(405, b"", "text/plain"))
                else:
                    await self._answer(body, writer)
                await writer.drain()
        writer.close()

    async def _answer(self, message: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        method, rid = message.get("method"), message.get("id")
        if method is None or rid is None:  # a notification, or the client's reply
            if method is None:
                self.replies += 1
            writer.write(_response(202, b"", "text/plain"))
            return
        if method == "initialize":
            writer.write(_json(rid, {"protocolVersion": "2025-11-25", "capabilities": {
                "tools": {}}, "serverInfo": {"name": "hostile", "version": "1"}}))
        elif method == "tools/list":
            writer.write(_json(rid, {"tools": [
                {"name": name, "description": f"{name} attack",
                 "inputSchema": {"type": "object", "properties": {}}} for name in TOOLS]}))
        elif method == "tools/call":
            tool = str(message["params"]["name"])
            self.calls.append(tool)
            await _ATTACKS[tool](rid, writer)
        else:  # server/discover and the rest: not this server's generation
            writer.write(_error(rid, -32601, "method not found"))

    async def __aenter__(self) -> HostileMcpServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await self._server.wait_closed()


def _response(status: int, body: bytes, content_type: str, *, length: bool = True) -> bytes:
    head = f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n"
    head += f"Content-Length: {len(body)}\r\n" if length else "Connection: close\r\n"
    return head.encode() + b"\r\n" + body


def _json(rid: Any, result: dict[str, Any]) -> bytes:
    return _response(200, orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": result}),
                     "application/json")


def _error(rid: Any, code: int, message: str) -> bytes:
    return _response(200, orjson.dumps({"jsonrpc": "2.0", "id": rid,
                                        "error": {"code": code, "message": message}}),
                     "application/json")


async def _stream(writer: asyncio.StreamWriter, events: AsyncIterator[bytes]) -> None:
    """An event stream that ends when the client goes away (or the events do)."""
    writer.write(_response(200, b"", "text/event-stream", length=False))
    async for chunk in events:
        writer.write(chunk)
        await writer.drain()
    writer.close()


async def _flood(rid: Any, writer: asyncio.StreamWriter) -> None:
    async def pings() -> AsyncIterator[bytes]:
        for start in range(0, FLOOD_REQUESTS, 1000):
            yield b"".join(b'event: message\ndata: {"jsonrpc":"2.0","id":%d,"method":"ping"}\n\n'
                           % i for i in range(start, start + 1000))
    await _stream(writer, pings())


async def _notify(rid: Any, writer: asyncio.StreamWriter) -> None:
    line = (b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message",'
            b'"params":{"level":"info","data":"x"}}\n\n')

    async def notes() -> AsyncIterator[bytes]:
        for _ in range(0, FLOOD_REQUESTS, 1000):
            yield line * 1000
    await _stream(writer, notes())


async def _huge(rid: Any, writer: asyncio.StreamWriter) -> None:
    writer.write(_json(rid, {"content": [{"type": "text", "text": "x" * HUGE_BYTES}]}))


async def _dense(rid: Any, writer: asyncio.StreamWriter) -> None:
    writer.write(_json(rid, {"content": [{"type": "text", "text": "dense"}],
                             "structuredContent": {"v": [[]] * 1_300_000}}))


async def _deep(rid: Any, writer: asyncio.StreamWriter) -> None:
    """Small, but nested past any sane depth: a recursive parser's stack, not its heap.
    Spaced so it is not refused for density first (one value per 9 bytes)."""
    nested = b"[       " * DEEP_LEVELS + b"]" * DEEP_LEVELS
    body = (b'{"jsonrpc":"2.0","id":' + orjson.dumps(rid) + b',"result":{"content":[{"type":'
            b'"text","text":"deep"}],"structuredContent":{"v":' + nested + b"}}}")
    writer.write(_response(200, body, "application/json"))


#: ``deep``: not in TOOLS (the listed attacks), called by name by its own test.
_ATTACKS = {"flood": _flood, "notify": _notify, "huge": _huge, "dense": _dense, "deep": _deep}
