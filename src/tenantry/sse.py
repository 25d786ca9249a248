"""Server-sent events (text/event-stream, WHATWG HTML §9.2) parsed from body chunks as they
arrive: the one parser of the code base. MCP's streamable HTTP answers a POST with such a
stream (``http1.SseParser``), a model provider streams its tokens in one (``http1.SseData``,
the short way below), and the client SDK follows a run's events in one
(``client.SseDecoder``). It imports nothing of tenantry, so the SDK, which may not import the
server (contract ``client-alone`` in pyproject.toml), shares it; each caller names the error
a stream too large for it raises (``too_large``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, NamedTuple, Protocol


class EventTooLarge(ValueError):
    """An event, or one line, went past the parser's ``max_event`` bytes."""


class SseEvent(NamedTuple):
    # A tuple, not a frozen dataclass: one is built for every token a model provider
    # streams, and a tuple is built in a third of the time.
    event: str
    data: str
    id: str | None = None  # the last id the stream set, this event's or an earlier one's
    retry: int | None = None


_BOM = b"\xef\xbb\xbf"
#: A ``retry`` of more digits is ignored: it would not fit 64 bits (nor Python's int()).
_MAX_RETRY_DIGITS = 18


class _Opening(Protocol):
    _parts: list[bytes]  # what has come and is not yet a whole line (or event)
    _start: bool  # a byte order mark may still come


class _Holding(_Opening, Protocol):
    _held: int  # the bytes in _parts
    _max: int

    def _refused(self) -> Exception: ...


def _after_bom(stream: _Opening, chunk: bytes) -> bytes:
    """``chunk`` without the stream's leading byte order mark; while too few bytes have
    come to tell, they are held (in ``_parts``) and ``_start`` stays True."""
    data = b"".join([*stream._parts, chunk]) if stream._parts else chunk
    if len(data) < len(_BOM) and _BOM.startswith(data):
        stream._parts = [data] if data else []
        return b""
    stream._start = False
    stream._parts = []
    return data[len(_BOM):] if data.startswith(_BOM) else data


def _to_read(stream: _Holding, chunk: bytes,
             within: Callable[[bytes, bytes], bool]) -> bytes | None:
    """What ``chunk`` completes, joined with what the stream held before it: None while
    the stream's opening is still unclear or ``within(last held part, chunk)`` says the
    chunk only continues what is held (then it is held too, as one more part: joined once,
    when what it belongs to ends)."""
    if stream._start:
        chunk = _after_bom(stream, chunk)
        if stream._start:
            return None
    parts = stream._parts
    if not parts:
        return chunk
    if within(parts[-1], chunk):
        parts.append(chunk)
        stream._held += len(chunk)
        if stream._held > stream._max:
            raise stream._refused()
        return None
    parts.append(chunk)
    return b"".join(parts)


def _hold(stream: _Holding, pending: bytes) -> None:
    """Keep ``pending`` (what follows the last end the stream has read) for the next
    chunk."""
    if len(pending) > stream._max:
        raise stream._refused()
    stream._parts = [pending] if pending else []
    stream._held = len(pending)


def _in_line(last: bytes, chunk: bytes) -> bool:
    """:class:`SseParser`'s unit: ``chunk`` only continues the line held (a CR held last
    may be half of a CRLF, so the chunk may end that line)."""
    return b"\n" not in chunk and b"\r" not in chunk and not last.endswith(b"\r")


def _in_event(last: bytes, chunk: bytes) -> bool:
    """:class:`SseData`'s unit: ``chunk`` only continues the event held (no CR, and no
    blank line in it or across the two)."""
    return (b"\r" not in chunk and b"\n\n" not in chunk
            and not (last.endswith(b"\n") and chunk.startswith(b"\n")))


class SseParser:
    """Feed it body chunks; it returns the events they complete. ``max_event`` caps the bytes
    one event may take, and one line (a server streaming one endless event or line is
    refused, not buffered).

    It follows WHATWG's rules: lines end in CRLF, LF or CR; one leading byte order mark is
    dropped; ``:`` starts a comment; an ``id`` with NUL is ignored and an id lasts until the
    next one; a ``retry`` that is not ASCII digits (or past 18 of them) is ignored. A line
    arriving in many small pieces is kept as the pieces and joined once, when it ends: a
    server trickling a long line cannot make each piece cost the whole line again. What
    follows the last line end when the stream closes is never an event (no ``flush``)."""

    #: What a stream past ``max_event`` raises, built from a message (a subclass names its
    #: caller's error class).
    too_large: ClassVar[Callable[[str], Exception]] = EventTooLarge

    __slots__ = ("_data", "_event", "_held", "_id", "_max", "_parts", "_retry", "_size",
                 "_start")

    def __init__(self, *, max_event: int = 16 * 1024 * 1024) -> None:
        self._parts: list[bytes] = []  # the line not yet ended, as it arrived
        self._held = 0  # their bytes
        self._start = True  # a byte order mark may still come
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None
        self._size = 0
        self._max = max_event

    def feed(self, chunk: bytes) -> list[SseEvent]:
        buf = _to_read(self, chunk, _in_line)
        if buf is None:
            return []
        if b"\r" in buf:
            # CRLF and lone CR end lines too; a CR at the very end may be half of a CRLF.
            keep_cr = buf.endswith(b"\r")
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if keep_cr:
                buf = buf[:-1]
                lines = buf.split(b"\n")
                pending = lines.pop() + b"\r"
            else:
                lines = buf.split(b"\n")
                pending = lines.pop()
        else:
            lines = buf.split(b"\n")
            pending = lines.pop()
        _hold(self, pending)
        events: list[SseEvent] = []
        for raw in lines:
            if not raw:
                if self._data:
                    events.append(SseEvent(self._event or "message", "\n".join(self._data),
                                           self._id, self._retry))
                self._data = []
                self._event = ""
                self._retry = None
                self._size = 0
                continue
            line = raw.decode("utf-8", "replace")
            name, colon, value = line.partition(":")
            if not name:
                continue  # a comment (keep-alive)
            if colon and value.startswith(" "):
                value = value[1:]
            if name == "data":
                self._size += len(raw)
                if self._size > self._max:
                    raise self._refused()
                self._data.append(value)
            elif name == "event":
                self._event = value
            elif name == "id":
                if "\0" not in value:
                    self._id = value
            elif (name == "retry" and value.isascii() and value.isdigit()
                  and len(value) <= _MAX_RETRY_DIGITS):
                self._retry = int(value)
        return events

    def _refused(self) -> Exception:
        return type(self).too_large(f"server-sent event larger than {self._max} bytes")



class SseData:
    """:class:`SseParser` for a stream of many small events of which only the name and the
    data matter (a model provider's stream: one event per token): it returns each completed
    event as ``(event, data bytes)`` and takes a short way through the common shapes — an
    event that is one ``data:`` line, optionally after one ``event:`` line — without
    building an :class:`SseEvent` per event. Anything else (comments, ``id``, several data
    lines, CR line ends) goes through an :class:`SseParser`, with the same results (the
    short way hands over the data's bytes as they came: where they are not UTF-8, the
    parser's have U+FFFD instead)."""

    #: The general parser it hands the rest to (and whose error it raises).
    parser: ClassVar[type[SseParser]] = SseParser

    __slots__ = ("_general", "_held", "_max", "_parts", "_slow", "_start")

    def __init__(self, *, max_event: int = 16 * 1024 * 1024) -> None:
        self._parts: list[bytes] = []  # the event not yet ended, as it arrived
        self._held = 0
        self._start = True
        self._max = max_event
        self._general = self.parser(max_event=max_event)
        self._general._start = False  # it is fed from inside the stream, past any BOM
        self._slow = False  # the stream has CR line ends: the general parser reads it all

    def feed(self, chunk: bytes) -> list[tuple[str, bytes]]:
        if self._slow:
            return [(e.event, e.data.encode()) for e in self._general.feed(chunk)]
        buf = _to_read(self, chunk, _in_event)
        if buf is None:
            return []
        if b"\r" in buf:
            self._slow, self._parts, self._held = True, [], 0
            return [(e.event, e.data.encode()) for e in self._general.feed(buf)]
        out: list[tuple[str, bytes]] = []
        start = 0
        while (end := buf.find(b"\n\n", start)) >= 0:
            block = buf[start:end]
            start = end + 2
            if len(block) > self._max:
                raise self._general._refused()
            if block.startswith(b"data:"):
                if b"\n" not in block:
                    out.append(("message", block[6:] if block[5:6] == b" " else block[5:]))
                    continue
            elif block.startswith(b"event:"):
                line_end = block.find(b"\n")
                data = block[line_end + 1:]
                if line_end > 0 and data.startswith(b"data:") and b"\n" not in data:
                    name = block[7:line_end] if block[6:7] == b" " else block[6:line_end]
                    out.append((name.decode("utf-8", "replace") or "message",
                                data[6:] if data[5:6] == b" " else data[5:]))
                    continue
            out += [(e.event, e.data.encode()) for e in self._general.feed(block + b"\n\n")]
        _hold(self, buf[start:])
        return out

    def _refused(self) -> Exception:
        return self._general._refused()
