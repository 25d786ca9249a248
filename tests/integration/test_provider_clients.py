"""Tenantry's provider clients (OpenAI chat completions, Anthropic Messages) against the fake
model server speaking each wire format, over real HTTP on loopback."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tenantry.models._http import HttpProviderClient, StreamWithoutUsage
from tenantry.models.anthropic import AnthropicMessages
from tenantry.models.errors import (
    AccountUnusable,
    MalformedReply,
    ModelError,
    ModelRefused,
    ModelUnavailable,
    RateLimited,
)
from tenantry.models.openai_compat import OpenAICompatible
from tenantry.models.openai_wire import OpenAIWire
from tenantry.models.scripted import Script, Step, ToolCall, prompt_tokens
from tenantry.models.types import ModelReply, ModelRequest, ModelToolCall
from tenantry.models.wire import Chat
from tenantry.testing import FakeModelServer
from tenantry.testing.fake_model import Provider

LOOKUP = Script.of(
    Step.calls(ToolCall("effect", {"note": "{input}"}), ToolCall("add", {"a": 1, "b": 2})),
    Step.answer("Done: {tool_results}"),
)
TOOLS: tuple[dict[str, Any], ...] = (
    {"type": "function", "function": {
        "name": "effect", "description": "Apply an effect.",
        "parameters": {"type": "object", "properties": {"note": {"type": "string"}}}}},
    {"type": "function", "function": {
        "name": "add", "parameters": {"type": "object", "properties": {
            "a": {"type": "integer"}, "b": {"type": "integer"}}}}},
)
OPENING: tuple[dict[str, Any], ...] = (
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "milk"},
)


def make_client(server: FakeModelServer, *, api_key: str = "sk-acct-a", account: str = "a",
                timeout: float = 10.0) -> HttpProviderClient:
    kind = AnthropicMessages if server.provider == "anthropic" else OpenAICompatible
    return kind(server.base_url, api_key=api_key, account=account, timeout=timeout)


@pytest.fixture(params=["openai", "anthropic"])
async def server(request: pytest.FixtureRequest) -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer(scripts={"lookup": LOOKUP}, provider=request.param) as fake:
        yield fake


@pytest.fixture
async def client(server: FakeModelServer) -> AsyncIterator[HttpProviderClient]:
    client = make_client(server)
    yield client
    await client.aclose()


def first_step(messages: tuple[dict[str, Any], ...] = OPENING) -> ModelRequest:
    return ModelRequest("scripted/lookup", messages, tools=TOOLS, run_key="run_1")


def next_step(request: ModelRequest, reply: ModelReply) -> ModelRequest:
    """The request after ``reply``, as the engine builds it: the assistant turn in the
    OpenAI shape, then one tool message per call."""
    assistant = {"role": "assistant", "content": reply.text or None, "tool_calls": [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in reply.calls]}
    results = [{"role": "tool", "tool_call_id": c.id, "content": f"result {c.id}"}
               for c in reply.calls]
    return ModelRequest(request.model, (*request.messages, assistant, *results),
                        tools=request.tools, run_key=request.run_key)


async def test_a_tool_call_step_then_an_answer(
    server: FakeModelServer, client: HttpProviderClient
) -> None:
    first = await client.complete(first_step())
    assert first.calls == (ModelToolCall("call_0_0", "effect", '{"note":"milk"}'),
                           ModelToolCall("call_0_1", "add", '{"a":1,"b":2}'))
    assert first.text == ""
    assert (first.provider, first.account, first.model, first.provider_model) == (
        server.provider, "a", "scripted/lookup", "scripted/lookup")
    assert first.latency_ms > 0
    assert first.rate_limits is None  # the server sends no rate-limit headers without rpm

    second_request = next_step(first_step(), first)
    second = await client.complete(second_request)
    assert second.text == "Done: result call_0_0\nresult call_0_1"
    assert second.calls == ()

    # Usage is what the provider reported, cached prompt tokens included: the second step
    # read the system and user messages from the prompt cache.
    assert [first.usage, second.usage] == [r.token_usage for r in server.usage_log]
    assert first.usage.cached_input_tokens == 0
    assert second.usage.cached_input_tokens == prompt_tokens(OPENING) > 0
    assert second.usage.input_tokens == prompt_tokens(second_request.messages)
    assert [r.api_key for r in server.requests] == ["sk-acct-a", "sk-acct-a"]


async def test_the_anthropic_request_on_the_wire() -> None:
    async with FakeModelServer(scripts={"lookup": LOOKUP}, provider="anthropic") as server:
        client = AnthropicMessages(server.base_url, api_key="sk-ant", default_max_tokens=333)
        try:
            first = await client.complete(first_step())
            await client.complete(next_step(first_step(), first))
        finally:
            await client.aclose()
    recorded = server.requests[1]
    assert recorded.path == "/v1/messages"
    assert recorded.headers["x-api-key"] == "sk-ant"
    assert recorded.headers["anthropic-version"] == "2023-06-01"
    body = recorded.json()
    assert body["system"] == "Be brief."
    assert body["max_tokens"] == 333
    assert body["tools"][0] == {"name": "effect", "description": "Apply an effect.",
                                "input_schema": TOOLS[0]["function"]["parameters"]}
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert [b["type"] for b in body["messages"][2]["content"]] == ["tool_result"] * 2
    assert body["messages"][2]["content"][-1]["cache_control"] == {"type": "ephemeral"}


async def test_a_run_that_moves_to_another_account_loses_its_cache(
    server: FakeModelServer, client: HttpProviderClient
) -> None:
    first = await client.complete(first_step())
    async with FakeModelServer(scripts={"lookup": LOOKUP}, provider=server.provider) as other:
        moved = make_client(other, api_key="sk-acct-b", account="b")
        try:
            second = await moved.complete(next_step(first_step(), first))
        finally:
            await moved.aclose()
    assert second.account == "b"
    assert second.usage.cached_input_tokens == 0
    assert [r.api_key for r in other.requests] == ["sk-acct-b"]


@pytest.mark.parametrize(("status", "error"), [
    (429, RateLimited), (500, ModelUnavailable), (529, ModelUnavailable),
    (401, AccountUnusable), (400, ModelRefused),
])
async def test_provider_errors_are_typed(
    server: FakeModelServer, client: HttpProviderClient, status: int, error: type[ModelError]
) -> None:
    server.fail_next(1, status=status, retry_after=2 if status == 429 else None)
    with pytest.raises(ModelError) as caught:
        await client.complete(first_step())
    assert type(caught.value) is error
    assert caught.value.http_status == status
    assert caught.value.retry_after == (2.0 if status == 429 else None)
    assert (await client.complete(first_step())).calls  # the next call is served
    assert len(server.usage_log) == 1


async def test_an_unknown_model_means_the_account_cannot_serve_it(
    client: HttpProviderClient
) -> None:
    with pytest.raises(AccountUnusable) as caught:
        await client.complete(ModelRequest("scripted/nope", OPENING))
    assert caught.value.http_status == 404


@pytest.mark.parametrize("mode", ["malformed", "no_choices"])
async def test_unreadable_replies_are_malformed(
    server: FakeModelServer, client: HttpProviderClient, mode: Any
) -> None:
    server.set_mode(mode)
    with pytest.raises(MalformedReply):
        await client.complete(first_step())
    assert server.usage_log == []


async def test_probe(server: FakeModelServer, client: HttpProviderClient) -> None:
    await client.probe()
    server.set_mode("down")
    with pytest.raises(ModelUnavailable) as caught:
        await client.probe()
    assert caught.value.http_status == 503
    with pytest.raises(ModelUnavailable):
        await client.complete(first_step())
    server.set_mode("ok")
    await client.probe()
    assert (server.requests[0].method, server.requests[0].path) == ("GET", "/v1/models")
    assert {r.api_key for r in server.requests} == {"sk-acct-a"}


async def test_a_hung_provider_times_out_as_unavailable(server: FakeModelServer) -> None:
    client = make_client(server, timeout=0.2)
    try:
        server.set_mode("hang")
        with pytest.raises(ModelUnavailable) as caught:
            await client.complete(first_step())
        assert caught.value.extra["reason"] == "timeout"
        server.set_mode("ok")
        assert (await client.complete(first_step())).calls
    finally:
        await client.aclose()


async def test_an_unreachable_provider_is_unavailable(server: FakeModelServer) -> None:
    async with FakeModelServer(provider=server.provider) as gone:
        client = make_client(gone)
    try:
        with pytest.raises(ModelUnavailable) as caught:
            await client.probe()
        assert caught.value.extra["reason"] == "connect"
    finally:
        await client.aclose()


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_rate_limit_headers_are_read_into_the_reply(provider: Provider) -> None:
    async with FakeModelServer(scripts={"lookup": LOOKUP}, provider=provider, rpm=2) as server:
        client = make_client(server)
        try:
            replies = [await client.complete(first_step()) for _ in range(2)]
            with pytest.raises(RateLimited) as caught:
                await client.complete(first_step())
        finally:
            await client.aclose()
    limits = [r.rate_limits for r in replies]
    assert [info.remaining_requests if info else None for info in limits] == [1, 0]
    for info in limits:
        assert info is not None and info.reset_requests_seconds is not None
        assert 0 < info.reset_requests_seconds <= 61
    assert caught.value.retry_after is not None and 0 < caught.value.retry_after <= 60
    assert len(server.usage_log) == 2


# ---------------------------------------------------------------------- streaming


class Deltas:
    """A DeltaSink that keeps what it was told."""

    def __init__(self, *, live: bool = True) -> None:
        self.texts: list[str] = []
        self.restarts = 0
        self.live = live

    def restart(self) -> None:
        self.restarts += 1
        self.texts.clear()

    def text(self, chunk: str) -> None:
        self.texts.append(chunk)


async def test_a_streamed_reply_is_the_reply_the_whole_answer_gives(
    server: FakeModelServer
) -> None:
    """The same conversation, streamed and whole, on two fresh servers (the same prompt
    cache): the same replies, and the stream's text told piece by piece as it came."""
    server.chunk_delay_ms = 5  # the pieces arrive apart (together, they are told together)
    async with FakeModelServer(scripts={"lookup": LOOKUP}, provider=server.provider) as other:
        streamed = make_client(server)
        whole = OpenAICompatible(other.base_url, account="a", stream=False) \
            if server.provider == "openai" else AnthropicMessages(other.base_url, account="a",
                                                                  stream=False)
        told = Deltas()
        try:
            replies = []
            for client in (streamed, whole):
                first = await client.complete(dataclasses.replace(first_step(), deltas=told))
                second = await client.complete(dataclasses.replace(
                    next_step(first_step(), first), deltas=told))
                replies.append((first, second))
        finally:
            await streamed.aclose()
            await whole.aclose()
    (first, second), (first_whole, second_whole) = replies
    for got, want in ((first, first_whole), (second, second_whole)):
        assert (got.text, got.calls, got.usage, got.provider_model) == (
            want.text, want.calls, want.usage, want.provider_model)
    assert second.usage.cached_input_tokens > 0
    assert [r.token_usage for r in server.usage_log] == [first.usage, second.usage]
    # The whole client told nothing: what the sink holds is the streamed second reply's.
    assert told.restarts == 2 and len(told.texts) > 1
    assert "".join(told.texts) == second.text
    sent = [r.json() for r in server.requests]
    assert all(body["stream"] is True for body in sent)
    if server.provider == "openai":
        assert all(body["stream_options"] == {"include_usage": True} for body in sent)
    assert not any("stream" in r.json() for r in other.requests)


async def test_a_stream_cut_mid_way_is_a_failed_call(
    server: FakeModelServer, client: HttpProviderClient
) -> None:
    request = next_step(first_step(), await client.complete(first_step()))
    told = Deltas()
    server.cut_next(1, after_pieces=2)
    with pytest.raises(ModelUnavailable) as caught:
        await client.complete(dataclasses.replace(request, deltas=told))
    assert caught.value.extra["reason"] == "network"
    assert "".join(told.texts) == "Done: result "  # the 2 pieces before the cut: void
    reply = await client.complete(dataclasses.replace(request, deltas=told))
    assert told.restarts == 2 and "".join(told.texts) == reply.text
    assert len(server.usage_log) == 2  # the cut reply reported no usage


class _IgnoresIncludeUsage(OpenAIWire):
    """An OpenAI-compatible server that streams but never reports usage in its stream."""

    def read(self, payload: Any) -> Any:
        chat = super().read(payload)
        return dataclasses.replace(chat, include_usage=False) if isinstance(chat, Chat) \
            else chat


class _IgnoresStream(OpenAIWire):
    """A server that answers whole whatever the request asks."""

    def read(self, payload: Any) -> Any:
        chat = super().read(payload)
        return dataclasses.replace(chat, stream=False) if isinstance(chat, Chat) else chat


async def test_a_stream_without_usage_is_refused_and_streaming_stops() -> None:
    """Billing needs the provider's usage: a stream that never reports it is not a reply,
    and the account's client asks for whole answers from then on."""
    async with FakeModelServer(scripts={"lookup": LOOKUP}) as server:
        server._wire = _IgnoresIncludeUsage()
        client = OpenAICompatible(server.base_url, account="a")
        watched = dataclasses.replace(first_step(), deltas=Deltas())
        try:
            with pytest.raises(StreamWithoutUsage):
                await client.complete(watched)
            assert client.stream is False
            reply = await client.complete(watched)
        finally:
            await client.aclose()
    assert reply.usage == server.usage_log[-1].token_usage
    assert [r.json().get("stream") for r in server.requests] == [True, None]


async def test_a_whole_answer_to_a_stream_request_is_read() -> None:
    async with FakeModelServer(scripts={"lookup": LOOKUP}) as server:
        server._wire = _IgnoresStream()
        client = OpenAICompatible(server.base_url, account="a")
        told = Deltas()
        try:
            reply = await client.complete(dataclasses.replace(first_step(), deltas=told))
        finally:
            await client.aclose()
    assert reply.calls and reply.usage == server.usage_log[0].token_usage
    assert told.texts == [] and client.stream is True


async def test_a_call_nobody_watches_asks_for_the_whole_answer(
    server: FakeModelServer, client: HttpProviderClient
) -> None:
    """Streaming costs the worker a wake-up and a parse per token: only a call somebody
    watches as it starts is streamed."""
    told = Deltas(live=False)
    reply = await client.complete(dataclasses.replace(first_step(), deltas=told))
    await client.complete(first_step())
    assert reply.calls and told.texts == [] and told.restarts == 0
    assert not any("stream" in r.json() for r in server.requests)
    told.live = True  # somebody came: the next call streams
    await client.complete(dataclasses.replace(first_step(), deltas=told))
    assert server.requests[-1].json()["stream"] is True and told.restarts == 1
