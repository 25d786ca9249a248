"""Real loopback proxies to put between a client and the API, for what a network does to
it: ``TcpProxy`` cuts connections (every one after a number of SSE events, half-way into
the next one, or all at once on ``kill()``); ``HttpProxy`` refuses requests with a chosen
answer, or forwards one and loses the answer, and records each request it saw and when.

Both serve on 127.0.0.1 only, and close every socket they opened when their block ends."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close a socket with a reset (no FIN, no goodbye)."""
    writer.transport.abort()


@dataclass(eq=False)
class TcpProxy:
    """Bytes both ways between a client and ``upstream_port``. With ``cut_after_events``,
    each connection's answer is cut after that many SSE events (their blank-line ends),
    half-way into what follows (or right at that end when nothing
    follows yet), alternately with a reset and with a plain close."""

    upstream_port: int
    cut_after_events: int | None = None
    port: int = 0
    connections: int = 0
    cuts: int = 0
    #: Cuts that left the client half an event (not at an event's end).
    mid_event_cuts: int = 0
    #: Connections cut by ``kill()``.
    kills: int = 0
    _pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = field(default_factory=set)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> int:
        """Cut every open connection now (resets); how many were cut."""
        pairs = list(self._pairs)
        for client, upstream in pairs:
            _abort(client)
            _abort(upstream)
        self._pairs.clear()
        self.kills += len(pairs)
        return len(pairs)

    def _cut(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.cuts += 1
        self._pairs.discard((client, upstream))
        _abort(upstream)
        if self.cuts % 2:
            _abort(client)
        else:
            client.close()  # a FIN in the middle of a chunked body

    async def _pipe_up(self, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(OSError, ConnectionError, RuntimeError):
            writer.write_eof()

    async def _pipe_down(self, reader: asyncio.StreamReader, client: asyncio.StreamWriter,
                         upstream: asyncio.StreamWriter) -> None:
        seen = b""  # the answer so far (headers and body), to count event ends in
        events = 0
        try:
            while data := await reader.read(65536):
                if self.cut_after_events is None:
                    client.write(data)
                    await client.drain()
                    continue
                start = len(seen)
                seen += data
                body = seen.find(b"\r\n\r\n")
                cut_at = None
                if body >= 0:
                    pos = max(start - 1, body + 4) - 1  # a blank line split in two
                    while (pos := seen.find(b"\n\n", pos + 1)) >= 0:
                        events += 1
                        if events >= self.cut_after_events:
                            # Into the next event: half of what came of it, at least a byte.
                            cut_at = pos + 2 + max(1, (len(seen) - pos - 2) // 2)
                            break
                if cut_at is None:
                    client.write(data)
                    await client.drain()
                    continue
                if cut_at < len(seen):
                    self.mid_event_cuts += 1
                client.write(seen[start:min(cut_at, len(seen))])
                await client.drain()
                self._cut(client, upstream)
                return
        except (OSError, ConnectionError):
            pass
        with contextlib.suppress(OSError, ConnectionError, RuntimeError):
            client.close()

    async def _serve(self, client_r: asyncio.StreamReader,
                     client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            _abort(client_w)
            return
        pair = (client_w, up_w)
        self._pairs.add(pair)
        try:
            await asyncio.gather(self._pipe_up(client_r, up_w),
                                 self._pipe_down(up_r, client_w, up_w))
        finally:
            self._pairs.discard(pair)
            for writer in pair:
                writer.close()

    def _track(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self._serve(client_r, client_w))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


@asynccontextmanager
async def tcp_proxy(upstream_port: int, *,
                    cut_after_events: int | None = None) -> AsyncIterator[TcpProxy]:
    proxy = TcpProxy(upstream_port, cut_after_events)
    server = await asyncio.start_server(proxy._track, "127.0.0.1", 0)
    proxy.port = server.sockets[0].getsockname()[1]
    try:
        yield proxy
    finally:
        server.close()
        proxy.kill()
        for task in list(proxy._tasks):
            task.cancel()
        await asyncio.gather(*proxy._tasks, return_exceptions=True)
        await server.wait_closed()


@dataclass(frozen=True)
class Seen:
    """A request the HTTP proxy received: when (monotonic seconds), what, its headers
    (lower-case names), and what became of it."""

    at: float
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    outcome: str  # "refused", "forwarded", "answer lost"
    upstream_status: int | None = None
    upstream_body: bytes = b""


#: A rule: given (method, path, how many such requests came before), the answer to refuse
#: with (status, headers, body), "lose" (forward it, drop the answer), or None (forward).
Rule = Callable[[str, str, int], "tuple[int, dict[str, str], bytes] | str | None"]


@dataclass(eq=False)
class HttpProxy:
    """An HTTP/1.1 proxy for plain (not streamed) requests with a Content-Length body."""

    upstream_port: int
    rule: Rule
    port: int = 0
    seen: list[Seen] = field(default_factory=list)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests(self, method: str, path: str) -> list[Seen]:
        return [s for s in self.seen if s.method == method and s.path.split("?")[0] == path]

    async def _forward(self, head: bytes, body: bytes) -> tuple[int, bytes]:
        """Send the request upstream on its own connection; the whole raw answer."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        try:
            writer.write(head + body)
            await writer.drain()
            answer = await reader.read()
        finally:
            writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()
        status = int(answer.split(b" ", 2)[1])
        return status, answer

    async def _one(self, reader: asyncio.StreamReader,
                   writer: asyncio.StreamWriter) -> bool:
        """Serve one request; False when the connection is done."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return False
        at = time.monotonic()
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        before = len(self.requests(method, path))
        decision = self.rule(method, path, before)
        if isinstance(decision, tuple):
            status, extra, content = decision
            self.seen.append(Seen(at, method, path, headers, body, "refused"))
            fields = {"content-length": str(len(content)), **extra}
            writer.write(f"HTTP/1.1 {status} Refused\r\n".encode() + b"".join(
                f"{k}: {v}\r\n".encode() for k, v in fields.items()) + b"\r\n" + content)
            await writer.drain()
            return True
        # Forwarded on a connection of its own, closed after its answer.
        upstream_head = b"\r\n".join(
            line.encode("latin-1") for line in lines[:1] + [
                line for line in lines[1:-2] if not line.lower().startswith("connection:")]
        ) + b"\r\nconnection: close\r\n\r\n"
        status, answer = await self._forward(upstream_head, body)
        lost = decision == "lose"
        self.seen.append(Seen(at, method, path, headers, body,
                              "answer lost" if lost else "forwarded", status,
                              answer.split(b"\r\n\r\n", 1)[-1]))
        if lost:
            _abort(writer)
            return False
        # The upstream answer as it came, but this connection stays open for the next.
        answer = answer.replace(b"connection: close\r\n", b"").replace(
            b"Connection: close\r\n", b"")
        writer.write(answer)
        await writer.drain()
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while await self._one(reader, writer):
                pass
        except (OSError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()


@asynccontextmanager
async def http_proxy(upstream_port: int, rule: Rule) -> AsyncIterator[HttpProxy]:
    proxy = HttpProxy(upstream_port, rule)
    server = await asyncio.start_server(proxy._serve, "127.0.0.1", 0)
    proxy.port = server.sockets[0].getsockname()[1]
    try:
        yield proxy
    finally:
        server.close()
        for writer in list(proxy._writers):
            _abort(writer)
        await server.wait_closed()


def refuse(status: int, problem_type: str | None, *, retry_after: int | None = None,
           ) -> tuple[int, dict[str, str], bytes]:
    """A refusal: a problem+json of ``problem_type`` (None: a plain-text answer, as a
    proxy's own would be), with ``Retry-After`` when given."""
    import orjson

    headers: dict[str, str] = {}
    if retry_after is not None:
        headers["retry-after"] = str(retry_after)
    if problem_type is None:
        headers["content-type"] = "text/plain"
        return status, headers, b"Service Unavailable"
    headers["content-type"] = "application/problem+json"
    body = {"type": problem_type, "title": "Refused by the test proxy", "status": status,
            "detail": "refused by the test proxy"}
    if retry_after is not None:
        body["retry_after"] = retry_after
    return status, headers, orjson.dumps(body)
