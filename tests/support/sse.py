"""A small Server-Sent Events reader for tests (real HTTP streaming)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx2
import orjson


@dataclass(frozen=True)
class SseEvent:
    id: int
    event: str
    data: dict[str, object]


async def read_sse(response: httpx2.Response) -> AsyncIterator[SseEvent]:
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line == "":
            if "data" in fields:
                yield SseEvent(int(fields["id"]), fields["event"], orjson.loads(fields["data"]))
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
