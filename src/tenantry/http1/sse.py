"""Server-sent events (text/event-stream, WHATWG HTML §9.2) parsed from body chunks as they
arrive: MCP's streamable HTTP answers a POST with one such stream, and holds another open
on GET for what the server sends unprompted."""

from __future__ import annotations

from typing import NamedTuple

from tenantry.http1.errors import ResponseTooLarge


class SseEvent(NamedTuple):
    # A tuple, not a frozen dataclass: one is built for every token a model provider
    # streams, and a tuple is built in a third of the time.
    event: str
    data: str
    id: str | None
    retry: int | None


class SseParser:
    """Feed it body chunks; it returns the events they complete. ``max_event`` caps the bytes
    one event may take (a server streaming one endless event is refused, not buffered)."""

    __slots__ = ("_data", "_event", "_id", "_max", "_pending", "_retry", "_size")

    def __init__(self, *, max_event: int = 16 * 1024 * 1024) -> None:
        self._pending = b""
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None
        self._size = 0
        self._max = max_event

    def feed(self, chunk: bytes) -> list[SseEvent]:
        buf = self._pending + chunk if self._pending else chunk
        if b"\r" in buf:
            # CRLF and lone CR end lines too; a CR at the very end may be half of a CRLF.
            keep_cr = buf.endswith(b"\r")
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if keep_cr:
                buf = buf[:-1]
                lines = buf.split(b"\n")
                self._pending = lines.pop() + b"\r"
            else:
                lines = buf.split(b"\n")
                self._pending = lines.pop()
        else:
            lines = buf.split(b"\n")
            self._pending = lines.pop()
        if len(self._pending) > self._max:
            raise ResponseTooLarge(f"server-sent event larger than {self._max} bytes")
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
                    raise ResponseTooLarge(f"server-sent event larger than {self._max} bytes")
                self._data.append(value)
            elif name == "event":
                self._event = value
            elif name == "id":
                if "\0" not in value:
                    self._id = value
            elif name == "retry" and value.isdigit():
                self._retry = int(value)
        return events


class SseData:
    """:class:`SseParser` for a stream of many small events of which only the name and the
    data matter (a model provider's stream: one event per token): it returns each completed
    event as ``(event, data bytes)`` and takes a short way through the common shapes — an
    event that is one ``data:`` line, optionally after one ``event:`` line — without
    building an :class:`SseEvent` per event. Anything else (comments, ``id``, several data
    lines, CR line ends) goes through an :class:`SseParser`, with the same results."""

    __slots__ = ("_general", "_max", "_pending", "_slow")

    def __init__(self, *, max_event: int = 16 * 1024 * 1024) -> None:
        self._pending = b""
        self._max = max_event
        self._general = SseParser(max_event=max_event)
        self._slow = False  # the stream has CR line ends: the general parser reads it all

    def feed(self, chunk: bytes) -> list[tuple[str, bytes]]:
        if self._slow:
            return [(e.event, e.data.encode()) for e in self._general.feed(chunk)]
        buf = self._pending + chunk if self._pending else chunk
        if b"\r" in buf:
            self._slow, self._pending = True, b""
            return [(e.event, e.data.encode()) for e in self._general.feed(buf)]
        out: list[tuple[str, bytes]] = []
        start = 0
        while (end := buf.find(b"\n\n", start)) >= 0:
            block = buf[start:end]
            start = end + 2
            if len(block) > self._max:
                raise ResponseTooLarge(f"server-sent event larger than {self._max} bytes")
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
        self._pending = buf[start:]
        if len(self._pending) > self._max:
            raise ResponseTooLarge(f"server-sent event larger than {self._max} bytes")
        return out
