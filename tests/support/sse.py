"""The events of a run's stream for tests (real HTTP streaming), read with the platform's
one event-stream parser (tenantry/sse.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx2
import orjson

from tenantry.sse import SseParser


@dataclass(frozen=True)
class SseEvent:
    id: int | None  # None: a live model delta (no id: it is not in the log)
    event: str
    data: dict[str, object]


async def read_sse(response: httpx2.Response, *,
                   deltas: bool = False) -> AsyncIterator[SseEvent]:
    """The stream's events; the live ``model_delta`` ones only with ``deltas``. An event
    sets an id of its own when it is not the one before it (durable events' ids rise; the
    parser, as WHATWG's, keeps an id for the events after it)."""
    parser, last = SseParser(), None
    async for chunk in response.aiter_bytes():
        for event in parser.feed(chunk):
            own = event.id is not None and event.id != last
            last = event.id
            if own or deltas:
                yield SseEvent(int(event.id) if own and event.id else None, event.event,
                               orjson.loads(event.data))
