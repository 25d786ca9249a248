"""Live model deltas in memory (ADR 0030): how a worker's publisher sends a call's text to
the processes that announced a listener, and how a provider's stream is read into the
reply the whole answer would give."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from typing import Any

import orjson
import pytest

from tenantry.config import Settings
from tenantry.models._http import StreamWithoutUsage
from tenantry.models.accounts import ModelAccount
from tenantry.models.anthropic import MessageStream
from tenantry.models.errors import MalformedReply, ModelUnavailable
from tenantry.models.gateway import GatewaySettings, ModelGateway, http_client
from tenantry.models.openai_compat import CompletionStream
from tenantry.models.types import ModelToolCall
from tenantry.runs.deltas import (
    LISTENERS_CHANNEL,
    ROLL_CALL_CHANNEL,
    DeltaPublisher,
    split_text,
)
from tenantry.runs.hub import EventHub

RUN = str(uuid.uuid4())
API = "tenantry_deltas_0123456789abcdef"
OTHER = "tenantry_deltas_fedcba9876543210"


class Conn:
    """Stands in for the worker's session connection: keeps what was NOTIFYed."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def is_closed(self) -> bool:
        return False

    async def execute(self, _query: str, channels: list[str], payloads: list[str]) -> None:
        self.sent += list(zip(channels, payloads, strict=True))


def announce(publisher: DeltaPublisher, channel: str, *lines: str) -> None:
    publisher.on_listeners(None, 0, LISTENERS_CHANNEL, "\n".join([channel, *lines]))


def deltas(conn: Conn, channel: str = API) -> list[tuple[int, int, str]]:
    """(after_seq, n, text) of what went to ``channel``."""
    found = []
    for to, payload in conn.sent:
        if to == channel:
            _, _, after, n, text = payload.split(" ", 4)
            found.append((int(after), int(n), text))
    return found


def test_text_is_split_between_characters() -> None:
    text = "é" * 5000  # two bytes each
    pieces = split_text(text, limit=7001)
    assert "".join(pieces) == text
    assert all(len(p.encode()) <= 7001 for p in pieces) and len(pieces) == 2
    assert split_text("short") == ["short"]


async def test_only_watched_runs_are_sent_and_the_first_text_at_once() -> None:
    publisher, conn = DeltaPublisher(flush_seconds=0.05), Conn()
    publisher.attach(conn)  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    assert conn.sent == [(ROLL_CALL_CHANNEL, "")]  # a new session asks for announcements
    conn.sent.clear()
    unwatched = publisher.open("ten_b", str(uuid.uuid4()), 3)
    unwatched.restart()
    unwatched.text("nobody hears this")
    announce(publisher, API, f"+ten_a {RUN}")
    call = publisher.open("ten_a", RUN, 7)
    call.restart()
    call.text("Hello")
    await asyncio.sleep(0.01)  # well within the flush interval: the first text is urgent
    assert deltas(conn) == [(7, 0, "Hello")]
    call.text(" wor")
    call.text("ld")
    await asyncio.sleep(0.01)
    assert len(deltas(conn)) == 1  # coalesced until the next flush
    await call.settle()  # the step's commit waits for the call's last text
    assert deltas(conn) == [(7, 0, "Hello"), (7, 1, " world")]
    assert publisher.sent_deltas == 2
    await publisher.stop()


async def test_a_process_watching_mid_call_is_sent_what_it_missed() -> None:
    publisher, conn = DeltaPublisher(flush_seconds=0.01), Conn()
    publisher.attach(conn)  # type: ignore[arg-type]
    announce(publisher, API, f"+ten_a {RUN}")
    call = publisher.open("ten_a", RUN, 1)
    call.restart()
    call.text("one ")
    call.text("two ")
    await call.settle()
    announce(publisher, OTHER, f"+ten_a {RUN}")
    await asyncio.sleep(0.01)
    call.text("three")
    await call.settle()
    assert "".join(t for _, _, t in deltas(conn)) == "one two three"
    assert deltas(conn, OTHER)[0][1:] == (0, "one two ")  # n = 0: from the start
    assert "".join(t for _, _, t in deltas(conn, OTHER)) == "one two three"
    # A retry starts again at n = 0 for everyone.
    call.restart()
    call.text("again")
    await call.settle()
    assert deltas(conn)[-1] == (1, 0, "again") and deltas(conn, OTHER)[-1] == (1, 0, "again")
    # A process that stopped watching is sent nothing more; nor is one whose
    # announcement lapsed.
    announce(publisher, OTHER, f"-ten_a {RUN}")
    call.text("!")
    await call.settle()
    assert deltas(conn, OTHER)[-1][2] == "again" and deltas(conn)[-1][2] == "!"
    call.close()
    assert publisher.calls == {}
    await publisher.stop()


async def test_announcements_lapse() -> None:
    now = [100.0]
    publisher = DeltaPublisher(ttl_seconds=15, clock=lambda: now[0])
    announce(publisher, API, f"+ten_a {RUN}", f"+ten_b {RUN}")
    assert publisher.channels(("ten_a", RUN)) == [API]
    now[0] += 16
    assert publisher.channels(("ten_a", RUN)) == []
    assert ("ten_a", RUN) not in publisher.listeners
    announce(publisher, OTHER)  # any announcement sweeps what lapsed
    assert publisher.listeners == {}
    announce(publisher, "not_ours", f"+ten_a {RUN}")  # not a delta channel: ignored
    assert publisher.listeners == {}


async def test_nothing_to_settle_when_nobody_watches() -> None:
    publisher = DeltaPublisher()
    call = publisher.open("ten_a", RUN, 1)
    call.text("x")
    await asyncio.wait_for(call.settle(), 0.01)


async def test_the_hub_hands_deltas_to_the_run_watchers_and_a_late_one_the_text_so_far() -> None:
    hub = EventHub("postgresql://unused")
    run = uuid.UUID(RUN)

    def delta(after: int, n: int, text: str, tenant: str = "ten_a") -> None:
        hub._on_delta(None, 0, hub.delta_channel, f"{tenant} {run} {after} {n} {text}")

    async with hub.subscribe("ten_a", run, deltas=True) as early, \
            hub.subscribe("ten_a", run) as durable_only:
        delta(4, 0, "Hel")
        delta(4, 1, "lo there")
        delta(4, 2, "")
        delta(4, 0, "other", tenant="ten_b")  # another tenant's run of the same id
        assert early.take_deltas() == [(4, "Hello there")]  # merged while not taken
        assert durable_only.take_deltas() == []
        async with hub.subscribe("ten_a", run, deltas=True) as late:
            assert late.take_deltas() == [(4, "Hello there")]
            delta(4, 0, "Retried")  # a new attempt: the catch-up starts again
        async with hub.subscribe("ten_a", run, deltas=True) as later:
            assert later.take_deltas() == [(4, "Retried")]
    assert hub._watchers == {} and hub._texts == {}
    assert hub._left == {("ten_a", run)}  # announced as no longer watched
    hub._on_delta(None, 0, hub.delta_channel, "garbage")  # logged and ignored


# ---------------------------------------------------------------------- stream readers


def sse(data: Any, event: str = "message") -> list[tuple[str, bytes]]:
    """One event as a reader is fed it (SseData's shape)."""
    return [(event, data.encode() if isinstance(data, str) else orjson.dumps(data))]


def reply(reader: Any) -> Any:
    return reader.reply(model="m", provider="p", account="a", latency_ms=1.0,
                        rate_limits=None)


def test_openai_chunks_make_a_reply() -> None:
    reader = CompletionStream()
    chunk = {"id": "c", "object": "chat.completion.chunk", "model": "gpt-x"}
    texts = [reader.feed(sse({**chunk, "choices": [{"index": 0, "delta": delta}]}))
             for delta in ({"role": "assistant", "content": ""}, {"content": "Hi"},
                           {"content": " you"},
                           {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                            "function": {"name": "get", "arguments": ""}}]},
                           {"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]},
                           {"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]})]
    reader.feed(sse({**chunk, "choices": [{"index": 1, "delta": {"content": "ignored"}}]}))
    reader.feed(sse({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    reader.feed(sse({**chunk, "choices": [], "usage": {
        "prompt_tokens": 10, "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 4}}}))
    assert not reader.done
    reader.feed(sse("[DONE]"))
    assert reader.done and texts[:3] == ["", "Hi", " you"]
    got = reply(reader)
    assert (got.text, got.provider_model) == ("Hi you", "gpt-x")
    assert got.calls == (ModelToolCall("call_1", "get", '{"a":1}'),)
    assert (got.usage.input_tokens, got.usage.output_tokens,
            got.usage.cached_input_tokens) == (10, 3, 4)


def test_events_that_arrive_together_are_read_together() -> None:
    """A batch reads as its events one by one would; events after the end are not read."""
    chunk = {"choices": [{"index": 0, "delta": {"content": "a"}}]}
    reader = CompletionStream()
    assert reader.feed([*sse(chunk), *sse(chunk), *sse({"choices": [], "usage": {
        "prompt_tokens": 1, "completion_tokens": 2}}), *sse("[DONE]"), *sse("garbage")]) == "aa"
    assert reader.done and reply(reader).text == "aa"
    claude = MessageStream()
    text = claude.feed([
        *sse({"type": "message_start", "message": {"model": "c", "usage": {}}}),
        *sse({"type": "content_block_start", "index": 0,
              "content_block": {"type": "text", "text": "x"}}),
        *sse({"type": "content_block_delta", "index": 0,
              "delta": {"type": "text_delta", "text": "y"}}),
        *sse({"type": "message_stop"}), *sse({"type": "content_block_delta", "index": 0,
                                              "delta": {"type": "text_delta", "text": "z"}})])
    assert text == "xy" and claude.done and reply(claude).text == "xy"


def test_openai_streams_without_usage_or_content_are_not_replies() -> None:
    finished = CompletionStream()
    finished.feed(sse({"choices": [{"index": 0, "delta": {"content": "x"},
                                    "finish_reason": "stop"}]}))
    finished.feed(sse("[DONE]"))
    with pytest.raises(StreamWithoutUsage):
        reply(finished)
    empty = CompletionStream()
    empty.feed(sse("[DONE]"))
    with pytest.raises(MalformedReply) as caught:
        reply(empty)
    assert not isinstance(caught.value, StreamWithoutUsage)
    with pytest.raises(ModelUnavailable):
        CompletionStream().feed(sse({"error": {"message": "overloaded"}}))


def test_anthropic_events_make_a_reply() -> None:
    reader = MessageStream()
    events = [
        ("message_start", {"message": {"id": "msg", "model": "claude-x", "content": [],
                                       "usage": {"input_tokens": 5,
                                                 "cache_read_input_tokens": 7,
                                                 "cache_creation_input_tokens": 2,
                                                 "output_tokens": 1}}}),
        ("content_block_start", {"index": 0, "content_block": {"type": "thinking",
                                                               "thinking": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta",
                                                       "thinking": "hmm"}}),
        ("content_block_start", {"index": 1, "content_block": {"type": "text", "text": ""}}),
        ("ping", {}),
        ("content_block_delta", {"index": 1, "delta": {"type": "text_delta", "text": "Hi"}}),
        ("content_block_delta", {"index": 1, "delta": {"type": "text_delta", "text": "!"}}),
        ("content_block_stop", {"index": 1}),
        ("content_block_start", {"index": 2, "content_block": {
            "type": "tool_use", "id": "toolu_1", "name": "get", "input": {}}}),
        ("content_block_delta", {"index": 2, "delta": {"type": "input_json_delta",
                                                       "partial_json": '{"a": '}}),
        ("content_block_delta", {"index": 2, "delta": {"type": "input_json_delta",
                                                       "partial_json": "1}"}}),
        ("content_block_start", {"index": 3, "content_block": {
            "type": "tool_use", "id": "toolu_2", "name": "none", "input": {}}}),
        ("message_delta", {"delta": {"stop_reason": "tool_use"},
                           "usage": {"output_tokens": 9}}),
    ]
    texts = [reader.feed(sse({"type": kind, **body}, kind)) for kind, body in events]
    assert "".join(texts) == "Hi!" and not reader.done
    reader.feed(sse({"type": "message_stop"}, "message_stop"))
    got = reply(reader)
    assert (got.text, got.provider_model) == ("Hi!", "claude-x")
    assert got.calls == (ModelToolCall("toolu_1", "get", '{"a":1}'),
                         ModelToolCall("toolu_2", "none", "{}"))
    assert (got.usage.input_tokens, got.usage.output_tokens, got.usage.cached_input_tokens,
            got.usage.cache_write_input_tokens) == (14, 9, 7, 2)


def test_anthropic_error_events_and_streams_without_a_message() -> None:
    with pytest.raises(ModelUnavailable) as caught:
        MessageStream().feed(sse({"type": "error", "error": {
            "type": "overloaded_error", "message": "Overloaded"}}, "error"))
    assert "overloaded_error" in caught.value.detail
    reader = MessageStream()
    reader.feed(sse({"type": "message_stop"}, "message_stop"))
    with pytest.raises(MalformedReply):
        reply(reader)


# ---------------------------------------------------------------------- the opt-out


def test_accounts_listed_in_model_no_stream_are_called_whole() -> None:
    settings = Settings.from_env({"TENANTRY_MODEL_NO_STREAM": " configured , local-vllm ,"})
    assert settings.model_no_stream == ("configured", "local-vllm")
    assert Settings.from_env({}).model_no_stream == ()

    def account(account_id: str, provider: str = "openai") -> tuple[ModelAccount, None]:
        return ModelAccount(account_id, provider, "http://127.0.0.1:9/v1", ("*",),
                            "default"), None

    implicit = [account("configured"), account("hosted"), account("claude", "anthropic")]
    listed = ModelGateway(None, implicit=implicit, settings=GatewaySettings(
        no_stream=frozenset(settings.model_no_stream)))
    assert {a.account_id: a.stream for a in listed.accounts()} == {
        "configured": False, "hosted": True, "claude": True}
    every = ModelGateway(None, implicit=implicit,
                         settings=GatewaySettings(no_stream=frozenset({"*"})))
    assert not any(a.stream for a in every.accounts())
    for model_account, _ in implicit:
        client = http_client(replace(model_account, stream=False), None, 1.0)
        assert client.stream is False  # type: ignore[attr-defined]
