"""The server-sent-events parser (tenantry.http1.sse) on streams cut at awkward places."""

from __future__ import annotations

import pytest

from tenantry.http1 import ResponseTooLarge, SseData, SseEvent, SseParser

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


# Provider-shaped streams (one data line per event, with or without an event line), and
# the shapes that take the general way: a comment, an id, several data lines, no space.
PROVIDER = (b'data: {"a":1}\n\nevent: message_start\ndata: {"b":2}\n\n: ping\n\n'
            b'id: 9\ndata: x\n\ndata: one\ndata: two\n\nevent:e\ndata:{}\n\n'
            b'event: only\n\ndata: [DONE]\n\n')
PROVIDER_EVENTS = [("message", b'{"a":1}'), ("message_start", b'{"b":2}'),
                   ("message", b"x"), ("message", b"one\ntwo"), ("e", b"{}"),
                   ("message", b"[DONE]")]


@pytest.mark.parametrize("size", [1, 2, 5, 13, 1000])
def test_sse_data_reads_what_the_parser_reads_however_cut(size: int) -> None:
    for stream, expected in ((PROVIDER, PROVIDER_EVENTS),
                             (STREAM, [(e.event, e.data.encode()) for e in EVENTS])):
        parser = SseData()
        found: list[tuple[str, bytes]] = []
        for start in range(0, len(stream), size):
            found += parser.feed(stream[start:start + size])
        assert found == expected


def test_sse_data_refuses_an_endless_event() -> None:
    parser = SseData(max_event=100)
    with pytest.raises(ResponseTooLarge):
        parser.feed(b"data: " + b"x" * 200)
    with pytest.raises(ResponseTooLarge):
        SseData(max_event=100).feed(b"data: " + b"x" * 200 + b"\n\n")


def test_a_leading_byte_order_mark_is_ignored() -> None:
    """WHATWG: one leading U+FEFF is dropped, however the stream is cut."""
    stream = b"\xef\xbb\xbfdata: x\n\n\xef\xbb\xbfdata: y\n\n"
    for size in (1, 2, 3, 100):
        parser, fast = SseParser(), SseData()
        events: list[SseEvent] = []
        found: list[tuple[str, bytes]] = []
        for start in range(0, len(stream), size):
            events += parser.feed(stream[start:start + size])
            found += fast.feed(stream[start:start + size])
        # Only the first is a BOM: the second makes a field named "\ufeffdata", ignored.
        assert events == [SseEvent("message", "x", None, None)]
        assert found == [("message", b"x")]


@pytest.mark.parametrize("value", ["\u00b2", "\u0663", "9" * 5000, "1" * 19])
def test_a_retry_that_is_not_a_sane_ascii_number_is_ignored(value: str) -> None:
    parser = SseParser()
    stream = f"retry: {value}\ndata: x\n\n".encode()
    assert parser.feed(stream) == [SseEvent("message", "x", None, None)]
