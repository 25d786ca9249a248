"""Server-sent events (text/event-stream, WHATWG HTML §9.2) parsed from body chunks as they
arrive: MCP's streamable HTTP answers a POST with one such stream, and holds another open
on GET for what the server sends unprompted."""

from __future__ import annotations

from dataclasses import dataclass

from tenantry.http1.errors import ResponseTooLarge


@dataclass(frozen=True, slots=True)
class SseEvent:
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
