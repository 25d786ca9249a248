"""The client SDK's event stream without a server: the SSE parser on streams cut at every
byte, events without ``id`` (model deltas, unknown kinds), comments and multi-line data;
and the resuming iterators over a mock transport whose connections break mid-event."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import orjson
import pytest

from tenantry.client import (
    AsyncClient,
    Client,
    ClientError,
    Event,
    ModelDelta,
    SseDecoder,
    SseMessage,
)
from tenantry.client.events import Resumption, to_item

STREAM = (b"\xef\xbb\xbf: keepalive\r\n\r\nevent: message\r\nid: 7\r\nretry: 1500\r\n"
          b"data: {\"a\":\r\ndata:1}\r\n\r\ndata\r\n\r\nid: 8\ndata: x\n\n"
          b"event: other\rdata: y\r\r: just a comment\n\nid\r\n\r\nevent: empty\n\n"
          b"data:  two spaces\nunknown: field\n\ndata: unterminated")
# WHATWG: an id lasts until the next one (an empty one clears it); a retry is its event's.
MESSAGES = [SseMessage("message", '{"a":\n1}', "7", 1500), SseMessage("message", "", "7"),
            SseMessage("message", "x", "8"), SseMessage("other", "y", "8"),
            SseMessage("message", " two spaces", "")]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 1000])
def test_messages_are_the_same_however_the_stream_is_cut(size: int) -> None:
    decoder = SseDecoder()
    messages: list[SseMessage] = []
    for start in range(0, len(STREAM), size):
        messages += decoder.feed(STREAM[start:start + size])
    # The unterminated last event is never delivered (the connection ended inside it).
    assert messages == MESSAGES


def test_an_id_lasts_until_the_next_one_but_only_its_own_event_is_durable() -> None:
    decoder = SseDecoder()
    messages = decoder.feed(b"id: 1\ndata: a\n\ndata: b\n\nid: bad\x00\ndata: c\n\n")
    assert messages == [SseMessage("message", "a", "1"), SseMessage("message", "b", "1"),
                        SseMessage("message", "c", "1")]
    state = Resumption(0)
    with pytest.raises(ClientError, match="unreadable event \\(id 1\\)"):
        state.item(messages[0])  # durable: its own id
    assert state.item(messages[1]) is None  # an ephemeral kind this client does not know
    assert state.item(messages[2]) is None


def _event(seq: int, type_: str = "ModelReplied") -> bytes:
    body = {"seq": seq, "type": type_, "data": {"n": seq},
            "created_at": "2026-01-02T03:04:05.000006+00:00"}
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (seq, type_.encode(), orjson.dumps(body))


def _delta(after: int, text: str) -> bytes:
    body = {"type": "model_delta", "after_seq": after, "text": text}
    return b"event: model_delta\ndata: %s\n\n" % orjson.dumps(body)


def test_items_are_typed_and_ephemeral_kinds_are_deltas_or_skipped() -> None:
    decoder = SseDecoder()
    raw = (_event(1, "RunCreated") + _delta(1, "Hel") + b": keepalive\n\n" + _delta(1, "lo")
           + b"event: progress\ndata: {\"pct\": 50}\n\n"  # an ephemeral kind not known here
           + b"data: {\"type\": \"model_delta\", \"after_seq\": 1, \"text\": \"!\"}\n\n"
           + _event(2, "RunFinished"))
    state = Resumption(0)
    items = [state.item(m) for m in decoder.feed(raw)]
    assert [type(i).__name__ for i in items] == [
        "Event", "ModelDelta", "ModelDelta", "NoneType", "ModelDelta", "Event"]
    first, last = items[0], items[-1]
    assert isinstance(first, Event) and first.seq == 1 and first.type == "RunCreated"
    assert first.data == {"n": 1} and first.created_at.microsecond == 6
    assert not first.terminal and isinstance(last, Event) and last.terminal
    assert items[1] == ModelDelta(1, "Hel") and items[4] == ModelDelta(1, "!")


def test_a_durable_event_that_cannot_be_read_is_an_error_not_a_gap() -> None:
    with pytest.raises(ClientError, match="unreadable event"):
        to_item(SseMessage("RunCreated", "{not json", "3"))


def test_resumption_never_hands_out_an_event_twice_and_stops_at_the_terminal_one() -> None:
    state = Resumption(after=0)
    assert state.headers() == {"Accept": "text/event-stream"}
    got = state.feed(_event(1) + _event(2)[:10])
    for item in got:
        state.handing(item)
    state.reconnecting()  # cut inside event 2
    assert state.headers()["Last-Event-ID"] == "1"
    # The platform resends from 2; a stale repeat of 1 is dropped all the same.
    got += state.feed(_event(1) + _event(2) + _delta(2, "x") + _event(3, "RunFailed")
                      + _event(4, "WebhookDelivered"))
    for item in got[1:]:
        state.handing(item)
    assert [getattr(i, "seq", None) for i in got] == [1, 2, None, 3]
    assert state.ended and state.last_seq == 3


# -- the iterators over a transport whose connections break --------------------------------


class Flaky:
    """A run of ``events`` seqs (with a delta after each) served in pieces: connection
    ``i`` sends ``cuts[i]`` bytes of what is left after Last-Event-ID, then breaks (a read
    error), or ends cleanly when ``cuts[i]`` is None."""

    def __init__(self, events: int, cuts: list[int | None]) -> None:
        self.events = events
        self.cuts = cuts
        self.requests: list[httpx2.Request] = []

    def body(self, after: int) -> bytes:
        out = b": keepalive\n\n"
        for seq in range(after + 1, self.events + 1):
            out += _event(seq, "RunFinished" if seq == self.events else "ModelReplied")
            out += _delta(seq, f"d{seq}")
        return out

    def chunks(self, data: bytes, cut: int | None) -> Iterator[bytes]:
        if cut is None:
            yield data
            return
        for start in range(0, min(cut, len(data)), 7):
            yield data[start:min(start + 7, cut)]
        raise httpx2.ReadError("connection reset by peer")

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        if request.url.path.endswith("/events"):
            after = int(request.headers.get("last-event-id", "0"))
            cut = self.cuts[len(self.requests) - 1] if len(self.requests) <= len(
                self.cuts) else None
            chunks = self.chunks(self.body(after), cut)
            return httpx2.Response(200, headers={"content-type": "text/event-stream"},
                                   stream=_Stream(chunks))
        raise AssertionError(request.url)


class _Stream(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks

    async def __aiter__(self) -> Any:
        for chunk in self._chunks:
            yield chunk


CUTS: list[int | None] = [40, 300, 1, 0, 500, 333]


def _check(items: list[Any], flaky: Flaky) -> None:
    events = [i for i in items if isinstance(i, Event)]
    assert [e.seq for e in events] == list(range(1, flaky.events + 1))
    assert events[-1].terminal
    deltas = [i for i in items if isinstance(i, ModelDelta)]
    # Deltas arrive between the events they follow; never before their event.
    assert all(d.text == f"d{d.after_seq}" for d in deltas)
    # One connection per cut and the last one; each resumed after the last event handed out
    # (none yet: no Last-Event-ID).
    resumed = [int(r.headers.get("last-event-id", "0")) for r in flaky.requests]
    assert len(resumed) == len(flaky.cuts) + 1
    assert resumed[0] == 0 and resumed == sorted(resumed) and resumed[-1] > 0


def test_the_sync_iterator_resumes_after_each_break_with_no_gap_and_no_repeat() -> None:
    flaky = Flaky(events=12, cuts=CUTS)
    with Client("http://platform.test", "tnt_x",
                transport=httpx2.MockTransport(flaky.handler)) as client:
        items = list(client.runs.events("run_1"))
    _check(items, flaky)


async def test_the_async_iterator_resumes_after_each_break_with_no_gap_and_no_repeat() -> None:
    flaky = Flaky(events=12, cuts=CUTS)
    async with AsyncClient("http://platform.test", "tnt_x",
                           transport=httpx2.MockTransport(flaky.handler)) as client:
        items = [item async for item in client.runs.events("run_1")]
    _check(items, flaky)


def test_a_stream_that_ends_cleanly_with_nothing_new_ends_once_the_run_has() -> None:
    """Resumed at (or past) the run's last event: the platform sends nothing and closes;
    the client asks the run, sees it ended, and stops instead of reconnecting forever."""
    seen: list[str] = []
    run = {"run_id": "run_1", "agent_id": "agt_1", "version": 1, "status": "finished",
           "priority": "interactive", "input": "x", "answer": "a", "error": None,
           "usage": {"input_tokens": 1, "output_tokens": 2}, "cost_micros": 3, "steps": 1,
           "last_seq": 4, "cancel_requested": False, "webhook": None,
           "events_url": "/v1/runs/run_1/events", "created_at": "2026-01-01T00:00:00Z",
           "updated_at": "2026-01-01T00:00:01Z", "finished_at": "2026-01-01T00:00:01Z"}

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(f"{request.url.path} {request.headers.get('last-event-id')}")
        if request.url.path.endswith("/events"):
            return httpx2.Response(200, headers={"content-type": "text/event-stream"},
                                   content=b"")
        return httpx2.Response(200, json=run)

    with Client("http://platform.test", "tnt_x",
                transport=httpx2.MockTransport(handler)) as client:
        assert list(client.runs.events("run_1", after=4)) == []
    assert seen == ["/v1/runs/run_1/events 4", "/v1/runs/run_1 None"]


def test_a_line_that_never_ends_is_refused_not_buffered() -> None:
    decoder = SseDecoder()
    piece = b"x" * (1 << 20)

    def feed_17_mib() -> None:
        decoder.feed(b"data: ")
        for _ in range(17):
            assert decoder.feed(piece) == []

    with pytest.raises(ClientError, match="larger than"):
        feed_17_mib()


def test_an_event_that_never_ends_is_refused_not_buffered() -> None:
    decoder = SseDecoder()
    line = b"data: " + b"x" * 1000 + b"\n"

    def feed_20_mb() -> None:
        for _ in range(20_000):
            assert decoder.feed(line) == []

    with pytest.raises(ClientError, match="larger than"):
        feed_20_mb()
