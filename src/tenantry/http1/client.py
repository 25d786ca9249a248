"""A lean HTTP/1.1 client for the platform's own outbound calls (MCP tool servers, model
providers): keep-alive connections pooled per origin, TLS through the process's shared
context, no redirects, timeouts and a body-size cap. ADR 0022 says why it exists: a general
client's per-request machinery (connection-pool scans, an anyio backend, per-request
objects by the dozen) was a large share of the worker's CPU per step.

One client is used from one event loop. Per origin it opens at most ``max_per_origin``
connections, one per request in flight; a finished request's connection goes back on the
origin's idle stack (the last one released is the next one used: the warmest, and the
others age out) and is closed once idle for ``idle_timeout`` seconds — shorter than the
common servers' keep-alive (uvicorn's and node's 5 s), so we rarely reuse a connection the
server is closing at that very moment. Requests are sent once: never retried, never
redirected (a 3xx is an answer like any other).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

from tenantry import tls
from tenantry.http1._wire import Body, Connection
from tenantry.http1.errors import (
    ConnectFailed,
    ConnectionLost,
    ConnectTimeout,
    HttpError,
    RequestTimeout,
)

__all__ = ["ConnectTo", "HttpClient", "Response", "StreamedResponse", "Target", "target"]

_HEAD_LIMIT = 64 * 1024


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed URL: the pool's origin key, where to connect, the request target."""

    origin: str
    tls: bool
    host: str
    port: int
    host_header: str
    path: str


@functools.lru_cache(maxsize=4096)
def target(url: str) -> Target:
    """Parse ``url`` once (the same few URLs are called over and over)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url[:100]!r}")
    if parts.username is not None or parts.password is not None:
        raise ValueError("credentials in a URL are not sent; use a header")
    host = parts.hostname
    default = 443 if scheme == "https" else 80
    port = parts.port or default
    bracketed = f"[{host}]" if ":" in host else host
    host_header = bracketed if port == default else f"{bracketed}:{port}"
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    _check_header_value(path)
    return Target(f"{scheme}://{host_header}", scheme == "https", host, port, host_header, path)


class _Head:
    """What every answer has: status, reason, headers (lower-case names), and the time
    this request spent opening its connection (TCP + TLS; 0 on a pooled one)."""

    __slots__ = ("connect_ms", "headers", "reason", "status")

    def __init__(self, status: int, reason: str, headers: dict[str, str],
                 connect_ms: float) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.connect_ms = connect_ms

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class Response(_Head):
    """A complete answer: its head and the body."""

    __slots__ = ("content",)

    def __init__(self, status: int, reason: str, headers: dict[str, str], content: bytes,
                 connect_ms: float) -> None:
        super().__init__(status, reason, headers, connect_ms)
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return orjson.loads(self.content)


class StreamedResponse(_Head):
    """An answer whose body is read as it arrives (``chunks()``, ``read()``). Leaving the
    ``stream()`` block returns the connection to the pool if the body was read to its end
    (or has already arrived whole), else closes it."""

    __slots__ = ("_body",)

    def __init__(self, status: int, reason: str, headers: dict[str, str], body: Body,
                 connect_ms: float) -> None:
        super().__init__(status, reason, headers, connect_ms)
        self._body = body

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").partition(";")[0].strip().lower()

    async def chunks(self) -> AsyncIterator[bytes]:
        while (data := await self._body.next()) is not None:
            yield data

    async def read(self) -> bytes:
        return await self._body.read_all()


@dataclass(slots=True)
class _Origin:
    idle: list[Connection] = field(default_factory=list)  # a stack: the top is the warmest
    active: int = 0
    waiters: deque[asyncio.Future[None]] = field(default_factory=deque)


#: ``(host, port) -> addresses`` to connect to instead of the host: a caller's own
#: resolution and vetting (tools/destinations.py); it raises ConnectFailed to refuse.
ConnectTo = Callable[[str, int], Awaitable[list[str]]]


class HttpClient:
    """Pooled HTTP/1.1 requests. ``headers`` go on every request (per-request ones win);
    ``max_body`` caps a response body (buffered or streamed) in bytes. ``connect_to``:
    each new connection goes to one of the addresses it gives (in order), never to a
    resolution of its own; TLS still checks the certificate against the URL's host."""

    def __init__(
        self,
        *,
        headers: Mapping[str, str] | None = None,
        max_per_origin: int = 100,
        idle_timeout: float = 4.0,
        connect_timeout: float = 10.0,
        max_body: int = 32 * 1024 * 1024,
        ssl_context: ssl.SSLContext | None = None,
        connect_to: ConnectTo | None = None,
    ) -> None:
        if max_per_origin < 1:
            raise ValueError("max_per_origin must be >= 1")
        defaults = dict(headers or {})
        if not any(k.lower() == "accept-encoding" for k in defaults):
            # No compressed bodies: without this header a server may pick any coding.
            defaults["Accept-Encoding"] = "identity"
        self._default_headers = _header_block(defaults)
        self._default_names = frozenset(k.lower() for k in defaults)
        self._max_per_origin = max_per_origin
        self._idle_timeout = idle_timeout
        self._connect_timeout = connect_timeout
        self._max_body = max_body
        self._ssl = ssl_context
        self._connect_to = connect_to
        self._origins: dict[str, _Origin] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False
        self._draining: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ public

    async def request(
        self,
        method: str,
        url: str | Target,
        *,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
        body: bytes = b"",
        timeout: float = 30.0,  # noqa: ASYNC109 - the whole request's budget
    ) -> Response:
        """Send one request and read its whole answer within ``timeout`` seconds."""
        where = url if isinstance(url, Target) else target(url)
        try:
            async with asyncio.timeout(timeout):
                conn, connect_ms = await self._send(method, where, headers, body)
                try:
                    status, reason, fields, body_reader = await self._read_head(conn, method)
                    content = await body_reader.read_all()
                except BaseException:
                    self._discard(conn)
                    raise
                self._release(conn, fields, body_reader)
        except TimeoutError:
            raise RequestTimeout(f"{method} {where.origin}: no answer within {timeout:g}s") \
                from None
        return Response(status, reason, fields, content, connect_ms)

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        url: str | Target,
        *,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
        body: bytes = b"",
        timeout: float | None = 30.0,  # noqa: ASYNC109 - until the response head arrives
        drain: float = 0.0,
    ) -> AsyncIterator[StreamedResponse]:
        """Send one request and yield its answer once its head has arrived (within
        ``timeout`` seconds; None: the caller bounds it); the caller bounds reading the
        body. A body left unfinished goes on being read in the background for up to
        ``drain`` seconds (a server that sent what we wanted and is about to end its stream)
        so that its connection can be reused; else the connection is closed."""
        where = url if isinstance(url, Target) else target(url)
        try:
            async with asyncio.timeout(timeout):
                conn, connect_ms = await self._send(method, where, headers, body)
                try:
                    status, reason, fields, body_reader = await self._read_head(conn, method)
                except BaseException:
                    self._discard(conn)
                    raise
        except TimeoutError:
            if timeout is None:
                raise
            raise RequestTimeout(f"{method} {where.origin}: no answer within {timeout:g}s") \
                from None
        settled = False
        try:
            yield StreamedResponse(status, reason, fields, body_reader, connect_ms)
            if body_reader.finished_nowait():
                self._release(conn, fields, body_reader)
                settled = True
            elif drain > 0 and not body_reader.until_close and not body_reader.failed:
                task = asyncio.get_running_loop().create_task(
                    self._drain(conn, fields, body_reader, drain))
                self._draining.add(task)
                task.add_done_callback(self._draining.discard)
                settled = True
        finally:
            if not settled:
                self._discard(conn)

    async def _drain(self, conn: Connection, fields: dict[str, str], body: Body,
                     limit_s: float) -> None:
        try:
            async with asyncio.timeout(limit_s):
                while await body.next() is not None:
                    pass
        except (HttpError, TimeoutError, asyncio.CancelledError):
            self._discard(conn)
            return
        self._release(conn, fields, body)

    @property
    def open_connections(self) -> int:
        return sum(o.active + len(o.idle) for o in self._origins.values())

    async def aclose(self) -> None:
        self._closed = True
        for task in list(self._draining):
            task.cancel()
        await asyncio.gather(*self._draining, return_exceptions=True)
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for origin in self._origins.values():
            for conn in origin.idle:
                conn.close()
            origin.idle.clear()
            for waiter in origin.waiters:
                if not waiter.done():
                    waiter.set_exception(ConnectionLost("the HTTP client was closed"))
        self._origins.clear()

    # ------------------------------------------------------------------ internals

    async def _send(self, method: str, where: Target,
                    headers: Mapping[str, str] | Iterable[tuple[str, str]],
                    body: bytes) -> tuple[Connection, float]:
        if self._closed:
            raise ConnectionLost("the HTTP client is closed")
        conn, connect_ms = await self._acquire(where)
        try:
            conn.write(self._encode(method, where, headers, body))
        except BaseException:
            self._discard(conn)
            raise
        return conn, connect_ms

    def _encode(self, method: str, where: Target,
                headers: Mapping[str, str] | Iterable[tuple[str, str]], body: bytes) -> bytes:
        items = headers.items() if isinstance(headers, Mapping) else headers
        lines = [f"{method} {where.path} HTTP/1.1\r\nHost: {where.host_header}\r\n"]
        names: set[str] = set()
        for name, value in items:
            _check_header_name(name)
            _check_header_value(value)
            names.add(name.lower())
            lines.append(f"{name}: {value}\r\n")
        default = self._default_headers
        if names & self._default_names:
            default = "".join(f"{k}: {v}\r\n" for k, v in _default_items(default)
                              if k.lower() not in names)
        lines.append(default)
        if body or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body)}\r\n")
        lines.append("\r\n")
        head = "".join(lines).encode("latin-1")
        return head + body if body else head

    async def _read_head(self, conn: Connection,
                         method: str) -> tuple[int, str, dict[str, str], Body]:
        # Strictly (RFC 9112, ``_framing``): an ambiguous framing is a ProtocolError and
        # aborts the connection, which then never goes back to the pool.
        return await conn.read_answer(method, _HEAD_LIMIT, self._max_body)

    async def _acquire(self, where: Target) -> tuple[Connection, float]:
        origin = self._origins.get(where.origin)
        if origin is None:
            origin = self._origins[where.origin] = _Origin()
        while True:
            idle = origin.idle
            while idle:
                conn = idle.pop()
                if conn.reusable_when_idle and \
                        time.monotonic() - conn.idle_since < self._idle_timeout:
                    origin.active += 1
                    return conn, 0.0
                conn.close()
            if origin.active < self._max_per_origin:
                break
            waiter = asyncio.get_running_loop().create_future()
            origin.waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter in origin.waiters:
                    origin.waiters.remove(waiter)
                elif not waiter.cancelled():
                    self._wake(origin)  # pass on the turn we were given
                raise
        origin.active += 1
        try:
            return await self._connect(where)
        except BaseException:
            origin.active -= 1
            self._wake(origin)
            raise

    async def _connect(self, where: Target) -> tuple[Connection, float]:
        loop = asyncio.get_running_loop()
        context = (self._ssl or tls.client_context()) if where.tls else None
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self._connect_timeout):
                hosts = ([where.host] if self._connect_to is None
                         else await self._connect_to(where.host, where.port))
                for i, host in enumerate(hosts):
                    try:
                        _, conn = await loop.create_connection(
                            lambda: Connection(where.origin), host, where.port, ssl=context,
                            server_hostname=where.host if context is not None else None)
                        break
                    except (OSError, ssl.SSLError):
                        if i == len(hosts) - 1:
                            raise  # the last address: its error is the connection's
                else:
                    raise ConnectFailed(f"{where.origin}: no address to connect to")
        except TimeoutError:
            raise ConnectTimeout(f"{where.origin}: connect timed out after "
                                f"{self._connect_timeout:g}s") from None
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"{where.origin}: cannot connect: {type(exc).__name__}: {exc}") \
                from exc
        sock = conn.transport.get_extra_info("socket") if conn.transport else None
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, (time.perf_counter() - started) * 1000

    def _release(self, conn: Connection, fields: Mapping[str, str], body: Body) -> None:
        origin = self._origins.get(conn.origin)
        if origin is None:  # the client was closed meanwhile
            conn.close()
            return
        origin.active -= 1
        keep = (body.reusable and not self._closed
                and "close" not in fields.get("connection", "").lower()
                and conn.reusable_when_idle)
        if keep:
            conn.idle_since = time.monotonic()
            origin.idle.append(conn)
            self._schedule_sweep()
        else:
            conn.close()
        self._wake(origin)

    def _discard(self, conn: Connection) -> None:
        """A request that did not finish cleanly: its connection's state is unknown."""
        conn.abort()
        origin = self._origins.get(conn.origin)
        if origin is not None:
            origin.active -= 1
            self._wake(origin)

    @staticmethod
    def _wake(origin: _Origin) -> None:
        while origin.waiters:
            waiter = origin.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _schedule_sweep(self) -> None:
        if self._sweeper is None:
            loop = asyncio.get_running_loop()
            self._sweeper = loop.call_later(self._idle_timeout, self._sweep)

    def _sweep(self) -> None:
        """Close connections idle past the timeout. The stack's bottom is the oldest."""
        self._sweeper = None
        cutoff = time.monotonic() - self._idle_timeout
        remaining = False
        for key, origin in list(self._origins.items()):
            idle = origin.idle
            stale = 0
            while stale < len(idle) and idle[stale].idle_since <= cutoff:
                idle[stale].close()
                stale += 1
            del idle[:stale]
            if idle:
                remaining = True
            elif origin.active == 0 and not origin.waiters:
                del self._origins[key]
        if remaining:
            self._schedule_sweep()


def _default_items(block: str) -> Iterable[tuple[str, str]]:
    for line in block.split("\r\n"):
        if line:
            name, _, value = line.partition(": ")
            yield name, value


def _header_block(headers: Mapping[str, str]) -> str:
    for name, value in headers.items():
        _check_header_name(name)
        _check_header_value(value)
    return "".join(f"{k}: {v}\r\n" for k, v in headers.items())


_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _check_header_name(name: str) -> None:
    if not name or not _TOKEN.issuperset(name):
        raise ValueError(f"invalid header name {name[:40]!r}")


def _check_header_value(value: str) -> None:
    # A CR or LF would let a value (a tenant's credential, a URL) inject header lines.
    if "\r" in value or "\n" in value or "\0" in value:
        raise ValueError("header value with a line break")

