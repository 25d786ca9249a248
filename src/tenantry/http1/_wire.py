"""One HTTP/1.1 connection as an asyncio protocol: a receive buffer, the response head, and
the body framings (Content-Length, chunked, until close) read incrementally from what has
arrived, so a caller can tell without waiting whether a body has ended."""

from __future__ import annotations

import asyncio

from tenantry.http1.errors import ConnectionLost, ProtocolError, ResponseTooLarge

_HIGH_WATER = 1 << 20  # stop reading the socket past this much unread data...
_LOW_WATER = 1 << 18  # ...and go on below this


class Connection(asyncio.Protocol):
    """A socket's bytes as they arrive. ``wait()`` parks one reader until more come."""

    __slots__ = (
        "_buf",
        "_eof",
        "_lost",
        "_paused",
        "_waiter",
        "idle_since",
        "origin",
        "transport",
    )

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._eof = False
        self._lost: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self.idle_since = 0.0

    # ----------------------------------------------------------- protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if len(self._buf) > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._lost = exc
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    # ----------------------------------------------------------- reading

    @property
    def reusable_when_idle(self) -> bool:
        """Open, nothing unread: an idle keep-alive connection the server has not closed."""
        transport = self.transport
        return (not self._eof and not self._buf and transport is not None
                and not transport.is_closing())

    async def wait(self) -> None:
        """Until more bytes arrive or the peer closes; raises if it has closed."""
        if self._eof:
            raise ConnectionLost(f"connection closed by the server{_why(self._lost)}")
        waiter = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None

    def take(self, n: int) -> bytes:
        data = bytes(self._buf[:n])
        del self._buf[:n]
        if self._paused and len(self._buf) < _LOW_WATER and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    def peek(self) -> bytearray:
        """The unread bytes themselves (read them, then :meth:`consume` what was used)."""
        return self._buf

    def consume(self, n: int) -> None:
        """Drop the first ``n`` unread bytes (read through :meth:`peek`)."""
        if n:
            del self._buf[:n]
            if self._paused and len(self._buf) < _LOW_WATER and self.transport is not None:
                self._paused = False
                self.transport.resume_reading()

    @property
    def buffered(self) -> int:
        return len(self._buf)

    @property
    def at_eof(self) -> bool:
        return self._eof

    def find(self, sep: bytes) -> int:
        return self._buf.find(sep)

    async def read_head(self, limit: int) -> bytes:
        """The bytes of one response head, up to and without its blank line."""
        while True:
            end = self._buf.find(b"\r\n\r\n")
            if end >= 0:
                head = self.take(end + 4)
                return head[:-4]
            if len(self._buf) > limit:
                raise ProtocolError(f"response head larger than {limit} bytes")
            await self.wait()

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def close(self) -> None:
        self._eof = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self._eof = True
        if self.transport is not None:
            self.transport.abort()


def _why(exc: BaseException | None) -> str:
    return f" ({type(exc).__name__}: {exc})" if exc is not None else ""


def parse_head(head: bytes) -> tuple[int, str, dict[str, str], bool]:
    """(status, reason, headers with lower-case names, HTTP/1.0?) of a response head.
    Repeated fields are joined with ", " (RFC 9110 §5.3)."""
    lines = head.split(b"\r\n")
    status_line = lines[0]
    try:
        version, code, *rest = status_line.split(b" ", 2)
        status = int(code)
    except ValueError:
        raise ProtocolError(f"bad status line {status_line[:80]!r}") from None
    if not version.startswith(b"HTTP/1.") or not 100 <= status <= 999:
        raise ProtocolError(f"bad status line {status_line[:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name[-1:] in (b" ", b"\t"):
            raise ProtocolError(f"bad header line {line[:80]!r}")
        key = name.decode("latin-1").lower()
        text = value.strip(b" \t").decode("latin-1")
        previous = headers.get(key)
        headers[key] = text if previous is None else f"{previous}, {text}"
    reason = rest[0].decode("latin-1") if rest else ""
    return status, reason, headers, version == b"HTTP/1.0"


class Body:
    """The framing of one response body, read from a :class:`Connection` as it arrives.

    ``next_nowait()`` returns what can be read now (``b""`` if nothing, ``None`` once the
    body is complete); ``next()`` waits for data. ``limit`` caps the body's total size.
    """

    __slots__ = (
        "_chunked",
        "_conn",
        "_length",
        "_limit",
        "_remaining",
        "_seen",
        "_state",
        "done",
    )

    def __init__(self, conn: Connection, *, length: int | None, chunked: bool,
                 limit: int) -> None:
        self._conn = conn
        self._length = length
        self._chunked = chunked
        self._state = "size"  # chunked: size | data | crlf | trailer
        self._remaining = length if length is not None else 0
        self._limit = limit
        self._seen = 0
        self.done = length == 0 and not chunked

    @property
    def until_close(self) -> bool:
        return self._length is None and not self._chunked

    def next_nowait(self) -> bytes | None:
        if self.done:
            return None
        conn = self._conn
        if self._chunked:
            data = self._chunked_nowait()
        elif self._length is not None:
            n = min(self._remaining, conn.buffered)
            data = conn.take(n) if n else b""
            self._remaining -= n
            if self._remaining == 0:
                self.done = True
            elif not data and conn.at_eof:
                raise ConnectionLost("connection closed before the whole body arrived")
        else:
            data = conn.take(conn.buffered) if conn.buffered else b""
            if not data and conn.at_eof:
                self.done = True
        if data:
            self._seen += len(data)
            if self._seen > self._limit:
                raise ResponseTooLarge(f"response body larger than {self._limit} bytes")
            return data
        return None if self.done else b""

    def _chunked_nowait(self) -> bytes:
        # One pass over what has arrived, by index, and one cut of the buffer at the end: a
        # streamed answer arrives as many small chunks (a provider's tokens), and taking
        # each size line, data and CRLF off the buffer in turn was most of its cost.
        conn = self._conn
        buf = conn.peek()
        size_of = len(buf)
        pos = 0
        spans: list[tuple[int, int]] = []
        try:
            while True:
                state = self._state
                if state == "size":
                    end = buf.find(b"\r\n", pos)
                    if end < 0:
                        if size_of - pos > 4096:
                            raise ProtocolError("chunk size line too long")
                        break
                    try:
                        size = int(buf[pos:end], 16)  # the common case: hex digits only
                    except ValueError:
                        size = _chunk_size(buf, pos, end)
                    if size < 0:
                        raise ProtocolError(f"bad chunk size {bytes(buf[pos:end])[:40]!r}")
                    pos = end + 2
                    if size == 0:
                        self._state = "trailer"
                    elif size_of - pos >= size + 2:  # the whole chunk is here
                        spans.append((pos, pos + size))
                        pos += size
                        if buf[pos:pos + 2] != b"\r\n":
                            raise ProtocolError("chunk not followed by CRLF")
                        pos += 2
                    else:
                        self._remaining = size
                        self._state = "data"
                elif state == "data":
                    n = min(self._remaining, size_of - pos)
                    if n == 0:
                        break
                    spans.append((pos, pos + n))
                    pos += n
                    self._remaining -= n
                    if self._remaining:
                        break
                    self._state = "crlf"
                elif state == "crlf":
                    if size_of - pos < 2:
                        break
                    if buf[pos:pos + 2] != b"\r\n":
                        raise ProtocolError("chunk not followed by CRLF")
                    pos += 2
                    self._state = "size"
                else:  # trailer fields, until a blank line
                    end = buf.find(b"\r\n", pos)
                    if end < 0:
                        if size_of - pos > 4096:
                            raise ProtocolError("chunk trailer line too long")
                        break
                    blank = end == pos
                    pos = end + 2
                    if blank:
                        self.done = True
                        break
            data = b"".join([buf[a:b] for a, b in spans]) if len(spans) != 1 else \
                bytes(buf[spans[0][0]:spans[0][1]])
        finally:
            conn.consume(pos)
        if not data and not self.done and conn.at_eof and not conn.buffered:
            raise ConnectionLost("connection closed before the whole body arrived")
        return data

    async def next(self) -> bytes | None:
        """The next bytes of the body (waiting for them), or ``None`` at its end."""
        while True:
            data = self.next_nowait()
            if data is None or data:
                return data
            await self._conn.wait()

    async def read_all(self) -> bytes:
        parts: list[bytes] = []
        while (data := await self.next()) is not None:
            parts.append(data)
        return b"".join(parts)

    def finished_nowait(self) -> bool:
        """Read what has already arrived without waiting; whether the body has ended
        (then its connection may go back to the pool). Bytes read here are dropped."""
        while not self.done:
            try:
                data = self.next_nowait()
            except (ConnectionLost, ProtocolError, ResponseTooLarge):
                return False
            if not data:
                break
        return self.done


def _chunk_size(buf: bytearray, start: int, end: int) -> int:
    line = bytes(buf[start:end])
    try:
        size = int(line.split(b";", 1)[0].strip(), 16)
    except ValueError:
        raise ProtocolError(f"bad chunk size {line[:40]!r}") from None
    if size < 0:
        raise ProtocolError(f"bad chunk size {line[:40]!r}")
    return size
