"""One HTTP/1.1 connection as an asyncio protocol: a receive buffer, the response heads, and
the body framings (Content-Length, chunked, until close) read incrementally from what has
arrived, so a caller can tell without waiting whether a body has ended. The grammar they
are read with, strictly, is in ``_framing``; a framing error aborts the connection there
and then, so it can never go back to a pool."""

from __future__ import annotations

import asyncio

from tenantry.http1._framing import MAX_CHUNK_DIGITS, chunk_size, framing, parse_head, trailer_line
from tenantry.http1.errors import ConnectionLost, HttpError, ProtocolError, ResponseTooLarge

__all__ = ["Answer", "Body", "Connection"]

_HIGH_WATER = 1 << 20  # stop reading the socket past this much unread data...
_LOW_WATER = 1 << 18  # ...and go on below this
#: A chunk line (size and extensions) or a trailer line is at most this long...
LINE_LIMIT = 4096
#: ...and all of one body's chunk extensions and trailer lines together at most this much
#: (they are not body bytes, so the body cap does not bound them).
METADATA_LIMIT = 64 * 1024
#: Interim (1xx) answers skipped before the final one; a real server sends one or two.
MAX_INTERIM = 16
_HEX = b"0123456789abcdefABCDEF"


class Connection(asyncio.Protocol):
    """A socket's bytes as they arrive. ``wait()`` parks one reader until more come."""

    __slots__ = (
        "_buf",
        "_checked",
        "_eof",
        "_interim",
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
        self._checked = 0  # how far a head being read has been checked for bare CR / LF
        self._interim = 0  # interim (1xx) answers to the current request so far
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

    def head_nowait(self, limit: int) -> bytes | None:
        """The bytes of one response head (without its blank line) if it has arrived whole,
        else None. Refuses a head past ``limit`` bytes, and bytes that can never become a
        head (a bare LF or CR) as soon as they arrive rather than when the limit is hit."""
        buf = self._buf
        checked = self._checked
        end = buf.find(b"\r\n\r\n", checked - 3 if checked > 3 else 0)
        if end >= 0:
            if end + 4 > limit:
                raise ProtocolError(f"response head larger than {limit} bytes")
            self._checked = 0
            return self.take(end + 4)[:-4]
        if self._eof:
            raise ConnectionLost(f"connection closed by the server{_why(self._lost)}")
        size = len(buf)
        if size > limit:
            raise ProtocolError(f"response head larger than {limit} bytes")
        # Only what arrived since the last look; a CR last may be half of a CRLF.
        if buf.count(b"\n", checked, size) != buf.count(b"\r\n", max(checked - 1, 0), size):
            raise ProtocolError("bare LF in the response head (lines must end in CRLF)")
        if buf.count(b"\r", checked, size - 1) != buf.count(b"\r\n", checked, size):
            raise ProtocolError("bare CR in the response head")
        self._checked = max(size - 1, 0)
        return None

    def answer_nowait(self, method: str, head_limit: int, max_body: int) -> Answer | None:
        """The answer to the request just sent, once its head has arrived (else None):
        interim (1xx) heads skipped, at most :data:`MAX_INTERIM` of them; the final head
        parsed and its body's framing decided (``_framing.framing``), the body to be read
        from the returned :class:`Body`. Any error aborts the connection."""
        try:
            while True:
                raw = self.head_nowait(head_limit)
                if raw is None:
                    return None
                status, reason, headers, http10 = parse_head(raw)
                if 100 <= status < 200 and status != 101:
                    # 100 Continue, 103 Early Hints: the real answer follows.
                    self._interim += 1
                    if self._interim > MAX_INTERIM:
                        raise ProtocolError(f"more than {MAX_INTERIM} interim (1xx) answers")
                    continue
                self._interim = 0
                if http10:
                    headers.setdefault("connection", "close")
                length, chunked, reusable = framing(status, headers, http10, method)
                return status, reason, headers, Body(self, length=length, chunked=chunked,
                                                     limit=max_body, reusable=reusable)
        except HttpError:
            self.abort()
            raise

    async def read_answer(self, method: str, head_limit: int, max_body: int) -> Answer:
        """:meth:`answer_nowait`, waiting for the head to arrive."""
        while (answer := self.answer_nowait(method, head_limit, max_body)) is None:
            await self.wait()
        return answer

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


Answer = tuple[int, str, dict[str, str], "Body"]  # status, reason, headers, body


class Body:
    """The framing of one response body, read from a :class:`Connection` as it arrives.

    ``next_nowait()`` returns what can be read now (``b""`` if nothing, ``None`` once the
    body is complete); ``next()`` waits for data. ``limit`` caps the body's total size: a
    length or chunk size that says more is refused before its bytes are read. An error is
    final: the connection is aborted and every later read raises it again (what follows a
    broken framing is never read as more of the body). ``reusable`` is False when the
    response, though readable, must not leave its connection to another request.
    """

    __slots__ = (
        "_chunked",
        "_conn",
        "_declared",
        "_error",
        "_length",
        "_limit",
        "_metadata",
        "_remaining",
        "_reusable",
        "_seen",
        "_state",
        "done",
    )

    def __init__(self, conn: Connection, *, length: int | None, chunked: bool,
                 limit: int, reusable: bool = True) -> None:
        if length is not None and length > limit:
            raise ResponseTooLarge(f"response body of {length} bytes, more than {limit}")
        self._conn = conn
        self._length = length
        self._chunked = chunked
        self._state = "size"  # chunked: size | data | crlf | trailer
        self._remaining = length if length is not None else 0
        self._limit = limit
        self._seen = 0
        self._declared = 0  # chunked: the sizes of the chunks so far
        self._metadata = 0  # chunked: bytes of extensions and trailers so far
        self._error: HttpError | None = None
        self._reusable = reusable
        self.done = length == 0 and not chunked

    @property
    def until_close(self) -> bool:
        return self._length is None and not self._chunked

    @property
    def failed(self) -> bool:
        return self._error is not None

    @property
    def reusable(self) -> bool:
        """Ended where its framing said, and nothing says its connection is unsafe."""
        return self.done and self._error is None and self._reusable and not self.until_close

    def next_nowait(self) -> bytes | None:
        if self.done:
            return None
        if self._error is not None:
            raise self._error
        conn = self._conn
        try:
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
        except HttpError as exc:
            self._error = exc
            conn.abort()
            raise
        return None if self.done else b""

    def _chunked_nowait(self) -> bytes:
        # One pass over what has arrived, by index, and one cut of the buffer at the end: a
        # streamed answer arrives as many small chunks (a provider's tokens), and taking
        # each size line, data and CRLF off the buffer in turn was most of its cost.
        conn = self._conn
        buf = conn.peek()
        size_of = len(buf)
        if not size_of:  # the common call after a read that ended on a chunk's end
            if conn.at_eof:
                raise ConnectionLost("connection closed before the whole body arrived")
            return b""
        pos = 0
        spans: list[tuple[int, int]] = []
        declared = self._declared  # locals in the loop, stored once at the end
        limit = self._limit
        try:
            while True:
                state = self._state
                if state == "size":
                    end = buf.find(b"\r\n", pos)
                    if end < 0:
                        if pos < size_of:
                            _unended(buf, pos, "chunk")
                        break
                    if 0 < end - pos <= MAX_CHUNK_DIGITS and not (line := buf[pos:end]).strip(_HEX):
                        size = int(line, 16)  # the common case: hex digits only
                    else:
                        if end - pos > LINE_LIMIT:
                            raise ProtocolError(f"chunk line longer than {LINE_LIMIT} bytes")
                        size, extensions = chunk_size(buf[pos:end])
                        self._add_metadata(extensions)
                    declared += size
                    if declared > limit:
                        raise ResponseTooLarge(f"response body larger than {limit} bytes "
                                               "(by its chunk sizes)")
                    pos = end + 2
                    if size == 0:
                        self._state = "trailer"
                    elif size_of - pos >= size + 2:  # the whole chunk is here
                        spans.append((pos, pos + size))
                        pos += size
                        if buf[pos:pos + 2] != b"\r\n":
                            raise ProtocolError("chunk data not followed by CRLF")
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
                        if size_of > pos and buf[pos] != 0x0D:  # not even the CR of a CRLF
                            raise ProtocolError("chunk data not followed by CRLF")
                        break
                    if buf[pos:pos + 2] != b"\r\n":
                        raise ProtocolError("chunk data not followed by CRLF")
                    pos += 2
                    self._state = "size"
                else:  # trailer fields, until a blank line
                    end = buf.find(b"\r\n", pos)
                    if end < 0:
                        if pos < size_of:
                            _unended(buf, pos, "trailer")
                        break
                    if end == pos:
                        pos += 2
                        self.done = True
                        break
                    if end - pos > LINE_LIMIT:
                        raise ProtocolError(f"trailer line longer than {LINE_LIMIT} bytes")
                    trailer_line(buf[pos:end])
                    self._add_metadata(end + 2 - pos)
                    pos = end + 2
            data = b"".join([buf[a:b] for a, b in spans]) if len(spans) != 1 else \
                bytes(buf[spans[0][0]:spans[0][1]])
        finally:
            self._declared = declared
            conn.consume(pos)
        if not data and not self.done and conn.at_eof:  # what is left can never complete
            raise ConnectionLost("connection closed before the whole body arrived")
        return data

    def _add_metadata(self, n: int) -> None:
        self._metadata += n
        if self._metadata > METADATA_LIMIT:
            raise ProtocolError(f"chunk extensions and trailers larger than {METADATA_LIMIT} "
                                "bytes")

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
            except HttpError:
                return False
            if not data:
                break
        return self.done


def _unended(buf: bytearray, pos: int, what: str) -> None:
    """A chunk or trailer line has not ended yet: refuse now what it can never become."""
    # No CRLF from ``pos`` on, so any LF is bare, and so is any CR but a last one.
    if buf.find(b"\n", pos) >= 0:
        raise ProtocolError(f"bare LF in a {what} line (lines must end in CRLF)")
    if 0 <= buf.find(b"\r", pos) < len(buf) - 1:
        raise ProtocolError(f"bare CR in a {what} line")
    if len(buf) - pos - (buf[-1] == 0x0D) > LINE_LIMIT:  # as whole lines are measured
        raise ProtocolError(f"{what} line longer than {LINE_LIMIT} bytes")
