"""The event-stream parser (:mod:`tenantry.sse`) as the outbound client's callers use it: a
stream past its cap is a :class:`ResponseTooLarge`, like any other body past its cap."""

from __future__ import annotations

from tenantry import sse
from tenantry.http1.errors import ResponseTooLarge
from tenantry.sse import SseEvent

__all__ = ["SseData", "SseEvent", "SseParser"]


class SseParser(sse.SseParser):
    __slots__ = ()
    too_large = ResponseTooLarge


class SseData(sse.SseData):
    __slots__ = ()
    parser = SseParser
