"""http1_parsing: CPU of the HTTP/1.1 client's parsers on the hot path, with no socket.

A streamed model reply arrives as many small chunks, one SSE event each (a provider's
token deltas): its cost per event is the chunked framing (``_wire.Body``, one pass over
what has arrived) and the event parser (``SseData`` for providers, ``SseParser`` for MCP).
Every request also parses one response head. Figures are nanoseconds per chunk, event or
head, the best of alternating rounds (a busy machine only ever adds time):

- ``chunked_1_ns``: one chunk per socket read; ``chunked_20_ns``: twenty per read;
- ``sse_data_ns`` / ``sse_parser_ns``: per event, twenty events per fed piece;
- ``head_ns``: a 10-field response head.

It uses only what the client has had since ADR 0022 (``Connection``, ``Body``,
``_wire.parse_head``), so the same script measures another commit's tree:

    .venv/bin/python benchmarks/http1_parsing.py   # one JSON line last
    PYTHONPATH=<other tree>/src .venv/bin/python benchmarks/http1_parsing.py
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

from tenantry.http1 import SseData, SseParser
from tenantry.http1._wire import Body, Connection, parse_head

ROUNDS = int(os.environ.get("HTTP1_PARSING_ROUNDS", "15"))
EVENTS = 2000
EVENT = b'data: {"choices":[{"index":0,"delta":{"content":" token"}}]}\n\n'
CHUNK = b"%x\r\n%s\r\n" % (len(EVENT), EVENT)
HEAD = (b"HTTP/1.1 200 OK\r\ndate: Tue, 01 Dec 2026 10:00:00 GMT\r\nserver: uvicorn\r\n"
        b"content-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n"
        b"cache-control: no-cache\r\nx-request-id: req_0123456789abcdef\r\n"
        b"x-ratelimit-remaining-requests: 499\r\nx-ratelimit-remaining-tokens: 149000\r\n"
        b"openai-processing-ms: 12\r\nconnection: keep-alive")


class _Transport:
    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False


def chunked(per_read: int) -> Callable[[], int]:
    reads = [CHUNK * per_read] * (EVENTS // per_read)

    def run() -> int:
        conn = Connection("http://bench")
        conn.connection_made(_Transport())  # type: ignore[arg-type]
        body = Body(conn, length=None, chunked=True, limit=1 << 40)
        for data in reads:
            conn.data_received(data)
            while body.next_nowait():
                pass
        return EVENTS

    return run


def events(parser: Callable[[], SseData | SseParser]) -> Callable[[], int]:
    pieces = [EVENT * 20] * (EVENTS // 20)

    def run() -> int:
        sse = parser()
        for piece in pieces:
            sse.feed(piece)
        return EVENTS

    return run


def heads() -> int:
    for _ in range(EVENTS):
        parse_head(HEAD)
    return EVENTS


def main() -> None:
    cases: dict[str, Callable[[], int]] = {
        "chunked_1_ns": chunked(1), "chunked_20_ns": chunked(20),
        "sse_data_ns": events(SseData), "sse_parser_ns": events(SseParser),
        "head_ns": heads,
    }
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(ROUNDS):
        for name, case in cases.items():
            started = time.perf_counter_ns()
            count = case()
            best[name] = min(best[name], (time.perf_counter_ns() - started) / count)
    print(json.dumps({name: round(ns) for name, ns in best.items()}))


if __name__ == "__main__":
    main()
