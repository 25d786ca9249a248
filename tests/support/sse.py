"""A small Server-Sent Events reader for tests (real HTTP streaming)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx2
import orjson


@dataclass(frozen=True)
class SseEvent:
    id: int | None  # None: a live model delta (no id: it is not in the log)
    event: str
    data: dict[str, object]


async def read_sse(response: httpx2.Response, *,
                   deltas: bool = False) -> AsyncIterator[SseEvent]:
    """The stream's events; the live ``model_delta`` ones only with ``deltas``."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line == "":
            if "data" in fields and ("id" in fields or deltas):
                yield SseEvent(int(fields["id"]) if "id" in fields else None,
                               fields.get("event", "message"), orjson.loads(fields["data"]))
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
