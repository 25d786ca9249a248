"""The server-sent-events parser (tenantry.http1.sse) on streams cut at awkward places."""

from __future__ import annotations

import pytest

from tenantry.http1 import ResponseTooLarge, SseEvent, SseParser

STREAM = (b": comment\r\nevent: message\r\nid: 7\r\nretry: 1500\r\ndata: {\"a\":\r\n"
          b"data:1}\r\n\r\ndata\r\n\r\nid: 8\ndata: x\n\nevent: other\rdata: y\r\r"
          b"id\r\n\r\n")
EVENTS = [SseEvent("message", '{"a":\n1}', "7", 1500), SseEvent("message", "", "7", None),
          SseEvent("message", "x", "8", None), SseEvent("other", "y", "8", None)]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_events_are_the_same_however_the_stream_is_cut(size: int) -> None:
    parser = SseParser()
    events: list[SseEvent] = []
    for start in range(0, len(STREAM), size):
        events += parser.feed(STREAM[start:start + size])
    assert events == EVENTS


def test_an_endless_event_is_refused() -> None:
    parser = SseParser(max_event=100)
    with pytest.raises(ResponseTooLarge):
        parser.feed(b"data: xxxxxxxxxx\n" * 20)
