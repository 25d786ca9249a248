"""The shipped test helpers over real HTTP: the fake model server (OpenAI and Anthropic wire
formats, checked with the official SDKs too), the MCP effects server, and the production MCP
client against it."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import orjson
import pytest

from tenantry.errors import ToolUnavailable
from tenantry.models.ratelimits import parse_rate_limits
from tenantry.models.scripted import Script, Step, ToolCall, prompt_tokens
from tenantry.testing import EffectsMcpServer, FakeModelServer, KeyCount
from tenantry.testing.fake_model import Provider
from tenantry.tools.mcp_client import McpToolClient, ToolOutcome

LOOKUP = Script.of(
    Step.calls(ToolCall("effect", {"note": "{input}"}), ToolCall("add", {"a": 1, "b": 2})),
    Step.answer("Done: {tool_results}"),
)


@pytest.fixture
async def model() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer(scripts={"lookup": LOOKUP}) as server:
        yield server


@pytest.fixture
async def claude() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer(scripts={"lookup": LOOKUP}, provider="anthropic") as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(timeout=10) as client:
        yield client


@pytest.fixture
async def tools() -> AsyncIterator[EffectsMcpServer]:
    async with EffectsMcpServer() as server:
        yield server


@pytest.fixture
async def mcp() -> AsyncIterator[McpToolClient]:
    async with McpToolClient() as client:
        yield client


async def complete(http: httpx2.AsyncClient, model: FakeModelServer, body: Any,
                   **headers: str) -> httpx2.Response:
    return await http.post(f"{model.base_url}/chat/completions", json=body, headers=headers)


# ---------------------------------------------------------------------- fake model server


async def test_chat_completion_wire_format_with_tool_calls(
    model: FakeModelServer, http: httpx2.AsyncClient
) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "milk"}]
    tools = [{"type": "function", "function": {"name": "effect", "parameters": {}}}]
    r = await complete(http, model, {"model": "scripted/lookup", "messages": messages,
                                     "tools": tools, "tool_choice": "auto"},
                       authorization="Bearer sk-provider-key")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"id", "object", "created", "model", "choices", "usage"}
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == "scripted/lookup"
    assert isinstance(body["created"], int)
    (choice,) = body["choices"]
    assert choice["index"] == 0
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["role"] == "assistant"
    assert message["content"] is None
    assert message["tool_calls"] == [
        {"id": "call_0_0", "type": "function",
         "function": {"name": "effect", "arguments": '{"note":"milk"}'}},
        {"id": "call_0_1", "type": "function",
         "function": {"name": "add", "arguments": '{"a":1,"b":2}'}},
    ]
    usage = body["usage"]
    assert usage["prompt_tokens"] == prompt_tokens(messages)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]

    (recorded,) = model.requests
    assert recorded.path == "/v1/chat/completions"
    assert recorded.headers["authorization"] == "Bearer sk-provider-key"
    assert recorded.json()["messages"] == messages
    (logged,) = model.usage_log
    assert (logged.completion_id, logged.prompt_tokens, logged.completion_tokens,
            logged.total_tokens) == (body["id"], usage["prompt_tokens"],
                                     usage["completion_tokens"], usage["total_tokens"])


async def test_a_conversation_ends_with_a_final_answer_and_replays_identically(
    model: FakeModelServer, http: httpx2.AsyncClient
) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "eggs"}]
    first = (await complete(http, model, {"model": "scripted/lookup", "messages": messages}))
    assistant = first.json()["choices"][0]["message"]
    messages.append(assistant)
    messages += [{"role": "tool", "tool_call_id": c["id"], "content": f"result {c['id']}"}
                 for c in assistant["tool_calls"]]
    final = await complete(http, model, {"model": "scripted/lookup", "messages": messages})
    again = await complete(http, model, {"model": "scripted/lookup", "messages": messages})
    assert final.json()["choices"] == again.json()["choices"]
    # The same prompt again costs the same, but now comes from the (simulated) prompt cache.
    final_usage, again_usage = final.json()["usage"], again.json()["usage"]
    assert final_usage.pop("prompt_tokens_details") == {"cached_tokens": 0}
    assert again_usage.pop("prompt_tokens_details") == {
        "cached_tokens": again_usage["prompt_tokens"]}
    assert final_usage == again_usage
    choice = final.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["content"] == "Done: result call_0_0\nresult call_0_1"
    assert "tool_calls" not in choice["message"]
    assert sum(u.total_tokens for u in model.usage_log) == sum(
        r.json()["usage"]["total_tokens"] for r in (first, final, again))


async def test_default_and_inline_scripts(model: FakeModelServer, http: httpx2.AsyncClient) -> None:
    r = await complete(http, model, {"model": "scripted",
                                     "messages": [{"role": "user", "content": "hi there"}]})
    assert r.json()["choices"][0]["message"]["content"] == "You said: hi there"
    inline = {"script": [{"text": "inline says {input}"}], "input": "bye"}
    r = await complete(http, model, {"model": "scripted", "messages": [
        {"role": "user", "content": orjson.dumps(inline).decode()}]})
    assert r.json()["choices"][0]["message"]["content"] == "inline says bye"


@pytest.mark.parametrize(("body", "param"), [
    (b"{not json", None),
    (b"[]", None),
    (b'{"messages": [{"role": "user", "content": "x"}]}', "model"),
    (b'{"model": "scripted", "messages": []}', "messages"),
    (b'{"model": "scripted", "messages": [{"role": "wizard", "content": "x"}]}', "messages[0]"),
    (b'{"model": "scripted", "messages": [{"role": "tool", "content": "x"}]}', "messages[0]"),
    (b'{"model": "scripted", "messages": [{"role": "user", "content": "x"}], "tools": [{}]}',
     "tools[0]"),
    (b'{"model": "scripted", "messages": [{"role": "user", "content": "{\\"script\\": 5}"}]}',
     "messages"),
])
async def test_malformed_requests_get_an_openai_style_400(
    model: FakeModelServer, http: httpx2.AsyncClient, body: bytes, param: str | None
) -> None:
    r = await http.post(f"{model.base_url}/chat/completions", content=body,
                        headers={"content-type": "application/json"})
    assert r.status_code == 400
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert model.usage_log == []


async def test_unknown_model_is_a_404(model: FakeModelServer, http: httpx2.AsyncClient) -> None:
    r = await complete(http, model, {"model": "scripted/nope",
                                     "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "model_not_found"


async def test_fail_next_injects_errors_then_recovers(
    model: FakeModelServer, http: httpx2.AsyncClient
) -> None:
    body = {"model": "scripted", "messages": [{"role": "user", "content": "x"}]}
    model.fail_next(2, status=429, retry_after=1.5)
    model.fail_next(1, status=500)
    statuses = []
    for _ in range(4):
        r = await complete(http, model, body)
        statuses.append(r.status_code)
        if r.status_code == 429:
            assert r.headers["retry-after"] == "1.5"
            assert r.json()["error"]["code"] == "rate_limit_exceeded"
        if r.status_code == 500:
            assert r.json()["error"]["type"] == "server_error"
            assert "retry-after" not in r.headers
    assert statuses == [429, 429, 500, 200]
    assert len(model.requests) == 4
    assert len(model.usage_log) == 1  # failed calls are not billed


async def test_malformed_and_hang_modes(model: FakeModelServer, http: httpx2.AsyncClient) -> None:
    body = {"model": "scripted", "messages": [{"role": "user", "content": "x"}]}
    model.set_mode("malformed")
    r = await complete(http, model, body)
    assert r.status_code == 200
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(r.content)

    model.set_mode("hang")
    with pytest.raises(httpx2.ReadTimeout):
        await http.post(f"{model.base_url}/chat/completions", json=body, timeout=0.3)
    model.set_mode("ok")
    assert (await complete(http, model, body)).status_code == 200


async def test_down_mode_answers_everything_503_and_keeps_faults_queued(
    model: FakeModelServer, http: httpx2.AsyncClient
) -> None:
    body = {"model": "scripted", "messages": [{"role": "user", "content": "x"}]}
    model.fail_next(1, status=429)
    model.set_mode("down")
    assert (await http.get(f"{model.base_url}/models")).status_code == 503
    r = await complete(http, model, body)
    assert r.status_code == 503
    assert r.json()["error"]["type"] == "server_error"
    model.set_mode("ok")
    assert [(await complete(http, model, body)).status_code for _ in range(2)] == [429, 200]
    assert (await http.get(f"{model.base_url}/models")).status_code == 200


async def test_a_server_without_the_models_endpoint_answers_it_404_down_or_not(
    http: httpx2.AsyncClient,
) -> None:
    async with (FakeModelServer(models_endpoint=False) as gpt,
                FakeModelServer(provider="anthropic", models_endpoint=False) as claude):
        for server, url in ((gpt, f"{gpt.base_url}/models"),
                            (claude, f"{claude.base_url}/v1/models")):
            ok = await http.get(url)
            server.set_mode("down")
            down = await http.get(url)
            server.set_mode("ok")
            for r in (ok, down):
                assert r.status_code == 404, (server.provider, r.text)
                assert "error" in r.json()  # in the provider's error body
            assert [q.method + " " + q.path for q in server.requests] == \
                ["GET /v1/models"] * 2  # recorded: a test can see the probe was tried
        chat = await complete(http, gpt, {"model": "scripted",
                                          "messages": [{"role": "user", "content": "x"}]})
        assert chat.status_code == 200
        assert (await messages(http, claude, {
            "model": "scripted", "max_tokens": 10,
            "messages": [{"role": "user", "content": "x"}]})).status_code == 200


async def test_no_choices_mode(model: FakeModelServer, http: httpx2.AsyncClient) -> None:
    model.set_mode("no_choices")
    r = await complete(http, model, {"model": "scripted",
                                     "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 200
    assert r.json()["object"] == "chat.completion"
    assert "choices" not in r.json()
    assert model.usage_log == []


async def test_the_prompt_cache_is_the_longest_prefix_seen_before_on_this_server(
    model: FakeModelServer, http: httpx2.AsyncClient
) -> None:
    def cached(r: httpx2.Response) -> int:
        return int(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])

    system = {"role": "system", "content": "You are a careful assistant. " * 4}
    a = [system, {"role": "user", "content": "first question"}]
    b = [system, {"role": "user", "content": "second question"}]
    first = await complete(http, model, {"model": "scripted", "messages": a})
    assert cached(first) == 0
    longer = [*a, first.json()["choices"][0]["message"], {"role": "user", "content": "more"}]
    r = await complete(http, model, {"model": "scripted", "messages": longer})
    assert cached(r) == prompt_tokens(a)
    assert r.json()["usage"]["prompt_tokens"] == prompt_tokens(longer)
    # A single shared message is not a prefix the cache keeps; another model has its own.
    assert cached(await complete(http, model, {"model": "scripted", "messages": b})) == 0
    assert cached(await complete(http, model, {"model": "scripted/echo", "messages": a})) == 0
    assert [u.cached_tokens for u in model.usage_log] == [0, prompt_tokens(a), 0, 0]
    model.reset()
    assert cached(await complete(http, model, {"model": "scripted", "messages": a})) == 0


async def test_rpm_limits_requests_per_minute_with_headers(http: httpx2.AsyncClient) -> None:
    body = {"model": "scripted", "messages": [{"role": "user", "content": "x"}]}
    async with FakeModelServer(rpm=2) as model:
        replies = [await complete(http, model, body) for _ in range(3)]
    assert [r.status_code for r in replies] == [200, 200, 429]
    assert [r.headers["x-ratelimit-remaining-requests"] for r in replies] == ["1", "0", "0"]
    assert {r.headers["x-ratelimit-limit-requests"] for r in replies} == {"2"}
    refused = replies[2]
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert 0 < int(refused.headers["retry-after"]) <= 60
    info = parse_rate_limits("openai", refused.headers)
    assert info is not None and info.reset_requests_seconds is not None
    assert 0 < info.reset_requests_seconds <= 60
    assert len(model.usage_log) == 2
    assert model.rate_limited == 1
    assert len(model.admitted_at) == 2 and model.busiest_window() == 2


async def test_rpm_over_a_shorter_window_counts_what_it_let_through_and_refused(
    http: httpx2.AsyncClient,
) -> None:
    """A provider quantizing its limit: 120 rpm over 5 s windows is 10 per 5 s."""
    body = {"model": "scripted", "messages": [{"role": "user", "content": "x"}]}
    async with FakeModelServer(rpm=120, rpm_window_seconds=5) as model:
        replies = [await complete(http, model, body) for _ in range(12)]
        assert [r.status_code for r in replies] == [200] * 10 + [429] * 2
        assert {r.headers["x-ratelimit-limit-requests"] for r in replies} == {"10"}
        assert 0 < int(replies[-1].headers["retry-after"]) <= 5
        assert (model.rate_limited, model.busiest_window()) == (2, 10)
        model.reset()
        assert (model.rate_limited, model.admitted_at) == (0, [])
    async with FakeModelServer(rpm=1, rate_limit_headers=False) as quiet:
        replies = [await complete(http, quiet, body) for _ in range(2)]
    assert [r.status_code for r in replies] == [200, 429]
    assert not any(h.startswith("x-ratelimit") for r in replies for h in r.headers)
    assert "retry-after" in replies[1].headers


# ---------------------------------------------------------------------- Anthropic wire format


async def messages(http: httpx2.AsyncClient, server: FakeModelServer, body: Any,
                   **headers: str) -> httpx2.Response:
    return await http.post(f"{server.base_url}/v1/messages", json=body,
                           headers={"anthropic-version": "2023-06-01", **headers})


async def test_anthropic_messages_wire_format_with_tool_use(
    claude: FakeModelServer, http: httpx2.AsyncClient
) -> None:
    assert claude.base_url == claude.origin
    body: dict[str, Any] = {
        "model": "scripted/lookup", "max_tokens": 100, "system": "Be brief.",
        "messages": [{"role": "user", "content": "milk"}],
        "tools": [{"name": "effect", "input_schema": {"type": "object"}}]}
    r = await messages(http, claude, body, **{"x-api-key": "sk-ant-key"})
    assert r.status_code == 200, r.text
    reply = r.json()
    assert set(reply) == {"id", "type", "role", "model", "content", "stop_reason",
                          "stop_sequence", "usage"}
    assert reply["id"].startswith("msg_")
    assert (reply["type"], reply["role"], reply["model"]) == ("message", "assistant",
                                                              "scripted/lookup")
    assert reply["stop_reason"] == "tool_use"
    assert reply["content"] == [
        {"type": "tool_use", "id": "call_0_0", "name": "effect", "input": {"note": "milk"}},
        {"type": "tool_use", "id": "call_0_1", "name": "add", "input": {"a": 1, "b": 2}},
    ]
    opening = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "milk"}]
    (record,) = claude.usage_log
    assert reply["usage"] == {"input_tokens": prompt_tokens(opening),
                              "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                              "output_tokens": record.completion_tokens}
    assert (record.provider, record.completion_id) == ("anthropic", reply["id"])
    assert claude.requests[0].api_key == "sk-ant-key"

    body["messages"] += [
        {"role": "assistant", "content": reply["content"]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_0_0", "content": "applied milk"},
            {"type": "tool_result", "tool_use_id": "call_0_1",
             "content": [{"type": "text", "text": "3"}], "cache_control": {"type": "ephemeral"}},
        ]},
    ]
    final = (await messages(http, claude, body)).json()
    assert final["stop_reason"] == "end_turn"
    assert final["content"] == [{"type": "text", "text": "Done: applied milk\n3"}]
    record = claude.usage_log[-1]
    assert final["usage"]["cache_read_input_tokens"] == record.cached_tokens == prompt_tokens(
        opening)
    assert final["usage"]["input_tokens"] == record.prompt_tokens - record.cached_tokens


@pytest.mark.parametrize(("body", "message"), [
    ({"model": "scripted", "messages": [{"role": "user", "content": "x"}]},
     "max_tokens: Field required"),
    ({"model": "scripted", "max_tokens": 10, "messages": []}, "messages: at least one"),
    ({"model": "scripted", "max_tokens": 10, "messages": [
        {"role": "user", "content": "a"}, {"role": "user", "content": "b"}]},
     "roles must alternate"),
    ({"model": "scripted", "max_tokens": 10, "messages": [
        {"role": "system", "content": "a"}]}, "messages.0.role"),
    ({"model": "scripted", "max_tokens": 10, "messages": [
        {"role": "user", "content": [{"type": "text", "text": ""}]}]},
     "text content blocks must be non-empty"),
    ({"model": "scripted", "max_tokens": 10, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9"}]}]},
     "unexpected `tool_use_id`"),
    ({"model": "scripted", "max_tokens": 10, "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "add", "input": {}}]},
        {"role": "user", "content": "and?"}]},
     "`tool_use` ids were found without `tool_result` blocks"),
    ({"model": "scripted", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}],
      "tools": [{"name": "add"}]}, "tools.0.input_schema: Field required"),
])
async def test_anthropic_style_400s(
    claude: FakeModelServer, http: httpx2.AsyncClient, body: Any, message: str
) -> None:
    r = await messages(http, claude, body)
    assert r.status_code == 400
    assert r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert message in r.json()["error"]["message"]
    assert claude.usage_log == []


async def test_anthropic_faults_and_modes(
    claude: FakeModelServer, http: httpx2.AsyncClient
) -> None:
    body = {"model": "scripted", "max_tokens": 10,
            "messages": [{"role": "user", "content": "x"}]}
    claude.fail_next(1, status=429, retry_after=3)
    claude.fail_next(1, status=500)
    claude.fail_next(1, status=529)
    errors = [await messages(http, claude, body) for _ in range(3)]
    assert [(r.status_code, r.json()["error"]["type"]) for r in errors] == [
        (429, "rate_limit_error"), (500, "api_error"), (529, "overloaded_error")]
    assert errors[0].headers["retry-after"] == "3"
    assert all(r.json()["request_id"] == r.headers["request-id"] for r in errors)

    claude.set_mode("no_choices")
    r = await messages(http, claude, body)
    assert r.status_code == 200 and r.json()["type"] == "message" and "content" not in r.json()
    claude.set_mode("malformed")
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads((await messages(http, claude, body)).content)
    claude.set_mode("down")
    down = await messages(http, claude, body)
    assert (down.status_code, down.json()["error"]["type"]) == (503, "api_error")
    assert (await http.get(f"{claude.base_url}/v1/models")).status_code == 503
    claude.set_mode("ok")
    listed = (await http.get(f"{claude.base_url}/v1/models")).json()
    assert {"type": "model", "id": "scripted/lookup", "display_name": "scripted/lookup",
            "created_at": "2025-01-01T00:00:00Z"} in listed["data"]
    assert (await messages(http, claude, body)).status_code == 200
    assert len(claude.usage_log) == 1


async def test_anthropic_rpm_headers(http: httpx2.AsyncClient) -> None:
    body = {"model": "scripted", "max_tokens": 10,
            "messages": [{"role": "user", "content": "x"}]}
    async with FakeModelServer(provider="anthropic", rpm=1) as claude:
        ok, refused = [await messages(http, claude, body) for _ in range(2)]
    assert (ok.status_code, refused.status_code) == (200, 429)
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert ok.headers["anthropic-ratelimit-requests-limit"] == "1"
    assert ok.headers["anthropic-ratelimit-requests-remaining"] == "0"
    info = parse_rate_limits("anthropic", ok.headers)
    assert info is not None and info.remaining_requests == 0
    assert info.reset_requests_seconds is not None and 0 < info.reset_requests_seconds <= 61


# ---------------------------------------------------------------------- the official SDKs


SDK_TOOLS = [{"name": "effect", "description": "Apply an effect.",
              "input_schema": {"type": "object", "properties": {"note": {"type": "string"}}}},
             {"name": "add", "input_schema": {"type": "object", "properties": {
                 "a": {"type": "integer"}, "b": {"type": "integer"}}}}]


async def test_the_openai_sdk_completes_a_tool_call_conversation(
    model: FakeModelServer
) -> None:
    tools: Any = [{"type": "function", "function": {"name": t["name"],
                                                    "parameters": t["input_schema"]}}
                  for t in SDK_TOOLS]
    conversation: Any = [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "milk"}]
    async with openai.AsyncOpenAI(base_url=model.base_url, api_key="sk-openai",
                                  max_retries=0) as sdk:
        first = await sdk.chat.completions.create(model="scripted/lookup",
                                                  messages=conversation, tools=tools)
        message = first.choices[0].message
        assert first.choices[0].finish_reason == "tool_calls"
        calls = [(c.id, c.function.name, c.function.arguments)  # type: ignore[union-attr]
                 for c in message.tool_calls or ()]
        assert calls == [("call_0_0", "effect", '{"note":"milk"}'),
                         ("call_0_1", "add", '{"a":1,"b":2}')]
        conversation.append(message.model_dump(exclude_none=True))
        conversation += [{"role": "tool", "tool_call_id": call_id, "content": f"r {call_id}"}
                         for call_id, _, _ in calls]
        final = await sdk.chat.completions.create(model="scripted/lookup",
                                                  messages=conversation, tools=tools)
        model.fail_next(1, status=429, retry_after=1)
        with pytest.raises(openai.RateLimitError):
            await sdk.chat.completions.create(model="scripted/lookup", messages=conversation)
    assert final.choices[0].message.content == "Done: r call_0_0\nr call_0_1"
    assert final.usage is not None and final.usage.prompt_tokens_details is not None
    assert final.usage.prompt_tokens == prompt_tokens(conversation)
    assert final.usage.prompt_tokens_details.cached_tokens == prompt_tokens(conversation[:2])
    assert {r.api_key for r in model.requests} == {"sk-openai"}


async def test_the_anthropic_sdk_completes_a_tool_call_conversation(
    claude: FakeModelServer
) -> None:
    conversation: Any = [{"role": "user", "content": "milk"}]
    async with anthropic.AsyncAnthropic(base_url=claude.base_url, api_key="sk-anthropic",
                                        max_retries=0) as sdk:
        first = await sdk.messages.create(model="scripted/lookup", max_tokens=256,
                                          system="Be brief.", messages=conversation,
                                          tools=SDK_TOOLS)  # type: ignore[arg-type]
        assert first.stop_reason == "tool_use"
        uses = [b for b in first.content if b.type == "tool_use"]
        assert [(u.id, u.name, u.input) for u in uses] == [
            ("call_0_0", "effect", {"note": "milk"}), ("call_0_1", "add", {"a": 1, "b": 2})]
        conversation.append({"role": "assistant", "content": first.content})
        conversation.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id, "content": f"r {u.id}"} for u in uses]})
        final = await sdk.messages.create(model="scripted/lookup", max_tokens=256,
                                          system="Be brief.", messages=conversation,
                                          tools=SDK_TOOLS)  # type: ignore[arg-type]
        claude.fail_next(1, status=529)
        with pytest.raises(anthropic.APIStatusError) as caught:
            await sdk.messages.create(model="scripted/lookup", max_tokens=256,
                                      messages=conversation)
    assert final.stop_reason == "end_turn"
    assert [b.type for b in final.content] == ["text"]
    assert final.content[0].text == "Done: r call_0_0\nr call_0_1"  # type: ignore[union-attr]
    record = claude.usage_log[-1]
    assert final.usage.cache_read_input_tokens == record.cached_tokens == prompt_tokens(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "milk"}])
    assert final.usage.input_tokens == record.prompt_tokens - record.cached_tokens
    assert final.usage.output_tokens == record.completion_tokens
    assert (caught.value.status_code, caught.value.type) == (529, "overloaded_error")
    assert {r.api_key for r in claude.requests} == {"sk-anthropic"}


async def test_the_openai_sdk_reads_the_streamed_tool_call_conversation(
    model: FakeModelServer
) -> None:
    """``stream: true`` with ``stream_options.include_usage``: the SDK's own stream
    accumulator reads the chunks into the completion the whole answer gives."""
    tools: Any = [{"type": "function", "function": {"name": t["name"],
                                                    "parameters": t["input_schema"]}}
                  for t in SDK_TOOLS]
    conversation: Any = [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "milk"}]
    async with openai.AsyncOpenAI(base_url=model.base_url, api_key="sk-openai",
                                  max_retries=0) as sdk:
        async with sdk.chat.completions.stream(
                model="scripted/lookup", messages=conversation, tools=tools,
                stream_options={"include_usage": True}) as stream:
            kinds = [event.type async for event in stream]
            first = await stream.get_final_completion()
        message = first.choices[0].message
        assert first.choices[0].finish_reason == "tool_calls"
        calls = [(c.id, c.function.name, c.function.arguments)  # type: ignore[union-attr]
                 for c in message.tool_calls or ()]
        assert calls == [("call_0_0", "effect", '{"note":"milk"}'),
                         ("call_0_1", "add", '{"a":1,"b":2}')]
        assert "tool_calls.function.arguments.delta" in kinds
        conversation.append(message.model_dump(exclude_none=True, exclude={"parsed"}))
        conversation += [{"role": "tool", "tool_call_id": call_id, "content": f"r {call_id}"}
                         for call_id, _, _ in calls]
        chunks = [chunk async for chunk in await sdk.chat.completions.create(
            model="scripted/lookup", messages=conversation, tools=tools, stream=True,
            stream_options={"include_usage": True})]
        # Without include_usage the stream carries no usage chunk, as OpenAI's does not.
        bare = [chunk async for chunk in await sdk.chat.completions.create(
            model="scripted/lookup", messages=conversation, stream=True)]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Done: r call_0_0\nr call_0_1"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    usage = chunks[-1].usage  # the last chunk: no choices, the usage
    assert chunks[-1].choices == [] and usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens == prompt_tokens(conversation)
    assert usage.prompt_tokens_details.cached_tokens == prompt_tokens(conversation[:2])
    assert usage.completion_tokens == model.usage_log[1].completion_tokens
    assert all(c.usage is None for c in bare) and bare[-1].choices
    assert len(model.usage_log) == 3


async def test_the_anthropic_sdk_reads_the_streamed_tool_call_conversation(
    claude: FakeModelServer
) -> None:
    """Anthropic's event stream, read by the SDK's ``messages.stream`` helper: text deltas,
    tool inputs as ``input_json_delta`` pieces, usage from message_start and
    message_delta."""
    conversation: Any = [{"role": "user", "content": "milk"}]
    async with anthropic.AsyncAnthropic(base_url=claude.base_url, api_key="sk-anthropic",
                                        max_retries=0) as sdk:
        async with sdk.messages.stream(model="scripted/lookup", max_tokens=256,
                                       system="Be brief.", messages=conversation,
                                       tools=SDK_TOOLS) as stream:  # type: ignore[arg-type]
            kinds = [event.type async for event in stream]
            first = await stream.get_final_message()
        assert first.stop_reason == "tool_use"
        assert "input_json" in kinds
        uses = [b for b in first.content if b.type == "tool_use"]
        assert [(u.id, u.name, u.input) for u in uses] == [
            ("call_0_0", "effect", {"note": "milk"}), ("call_0_1", "add", {"a": 1, "b": 2})]
        conversation.append({"role": "assistant", "content": first.content})
        conversation.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id, "content": f"r {u.id}"} for u in uses]})
        async with sdk.messages.stream(model="scripted/lookup", max_tokens=256,
                                       system="Be brief.", messages=conversation,
                                       tools=SDK_TOOLS) as stream:  # type: ignore[arg-type]
            pieces = [text async for text in stream.text_stream]
            final = await stream.get_final_message()
    assert len(pieces) > 1 and "".join(pieces) == "Done: r call_0_0\nr call_0_1"
    assert final.stop_reason == "end_turn"
    assert [b.type for b in final.content] == ["text"]
    assert final.content[0].text == "".join(pieces)  # type: ignore[union-attr]
    record = claude.usage_log[-1]
    assert final.usage.cache_read_input_tokens == record.cached_tokens > 0
    assert final.usage.input_tokens == record.prompt_tokens - record.cached_tokens
    assert final.usage.output_tokens == record.completion_tokens


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_stream_can_be_slowed_and_cut_mid_way(
    provider: Provider, http: httpx2.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A stream's pieces come ``chunk_delay_ms`` apart; ``cut_next`` closes the connection
    after some of them, with no end marker, and the reply's usage is not counted."""
    async with FakeModelServer(scripts={"lookup": LOOKUP}, provider=provider,
                               chunk_delay_ms=30) as fake:
        if provider == "openai":
            url, body = f"{fake.base_url}/chat/completions", {
                "model": "scripted/lookup", "stream": True,
                "messages": [{"role": "user", "content": "one two three four five"}]}
            end = b"data: [DONE]"
        else:
            url, body = f"{fake.base_url}/v1/messages", {
                "model": "scripted/lookup", "max_tokens": 50, "stream": True,
                "messages": [{"role": "user", "content": "one two three four five"}]}
            end = b"event: message_stop"
        whole = await http.post(url, json=body)
        assert whole.status_code == 200
        assert whole.headers["content-type"].startswith("text/event-stream")
        assert end in whole.content
        assert fake.pieces_written > 2  # the tool calls came in pieces
        assert len(fake.usage_log) == 1
        fake.cut_next(1, after_pieces=2)
        async with http.stream("POST", url, json=body) as r:
            assert r.status_code == 200
            with pytest.raises(httpx2.HTTPError):
                await r.aread()
        assert len(fake.usage_log) == 1  # the cut reply never reported its usage
        assert (await http.post(url, json=body)).status_code == 200  # not cut again
        assert len(fake.usage_log) == 2
    # The cut is the fault asked for, not an error of the server's.
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def _start_process(*args: str) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, *args,
                                                stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().strip()
    assert line.startswith("READY "), line
    return proc, line.removeprefix("READY ")


async def _stop_process(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
    await proc.wait()


async def test_fake_model_runs_as_its_own_process(tmp_path: Path, http: httpx2.AsyncClient) -> None:
    scripts = tmp_path / "scripts.json"
    scripts.write_bytes(orjson.dumps({"default": LOOKUP.to_data()}))
    proc, base_url = await _start_process("-m", "tenantry.testing.fake_model",
                                          "--port", "0", "--scripts", str(scripts))
    try:
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        r = await http.post(f"{base_url}/chat/completions", json={
            "model": "scripted", "messages": [{"role": "user", "content": "tea"}]})
        assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"] == {
            "name": "effect", "arguments": '{"note":"tea"}'}
    finally:
        await _stop_process(proc)
    # uvicorn shuts down gracefully, then re-raises the signal it caught.
    assert proc.returncode in (0, -signal.SIGTERM)


async def test_fake_anthropic_model_runs_as_its_own_process(http: httpx2.AsyncClient) -> None:
    proc, base_url = await _start_process("-m", "tenantry.testing.fake_model", "--port", "0",
                                          "--provider", "anthropic", "--rpm", "100",
                                          "--no-models-endpoint")
    try:
        assert base_url.startswith("http://127.0.0.1:") and not base_url.endswith("/v1")
        r = await http.post(f"{base_url}/v1/messages", json={
            "model": "scripted", "max_tokens": 10,
            "messages": [{"role": "user", "content": "tea"}]})
        assert r.json()["content"] == [{"type": "text", "text": "You said: tea"}]
        assert r.headers["anthropic-ratelimit-requests-remaining"] == "99"
        assert (await http.get(f"{base_url}/v1/models")).status_code == 404
    finally:
        await _stop_process(proc)


# ---------------------------------------------------------------------- MCP server + client


async def test_an_effect_happens_once_per_idempotency_key(
    tools: EffectsMcpServer, mcp: McpToolClient
) -> None:
    first = await mcp.call(tools.url, "effect", {"note": "pay"}, idempotency_key="run_1:3:0")
    again = await mcp.call(tools.url, "effect", {"note": "pay"}, idempotency_key="run_1:3:0")
    other = await mcp.call(tools.url, "effect", {"note": "pay"}, idempotency_key="run_1:5:0")
    assert first == ToolOutcome(ok=True, content="applied pay")
    assert again == ToolOutcome(ok=True, content="already applied pay")
    assert other.content == "applied pay"
    assert tools.key_counts() == {"run_1:3:0": KeyCount(calls=2, effects=1),
                                  "run_1:5:0": KeyCount(calls=1, effects=1)}
    # The key travels both ways: MCP _meta and the Idempotency-Key header.
    assert [(c.meta_key, c.header_key) for c in tools.calls] == [
        ("run_1:3:0", "run_1:3:0"), ("run_1:3:0", "run_1:3:0"), ("run_1:5:0", "run_1:5:0")]
    assert tools.stats(include_calls=False)["duplicate_effects"] == 0


async def test_calls_without_a_key_apply_every_time(
    tools: EffectsMcpServer, mcp: McpToolClient
) -> None:
    for _ in range(2):
        outcome = await mcp.call(tools.url, "effect", {"note": "n"})
        assert outcome.content == "applied n"
    assert tools.effects_total == 2
    assert tools.key_counts() == {}
    assert [c.header_key for c in tools.calls] == [None, None]


async def test_simple_tools(tools: EffectsMcpServer, mcp: McpToolClient) -> None:
    assert await mcp.call(tools.url, "echo", {"text": "hi"}) == ToolOutcome(True, "hi")
    assert await mcp.call(tools.url, "add", {"a": 2, "b": 40}) == ToolOutcome(True, "42")
    assert await mcp.call(tools.url, "slow", {"seconds": 0}) == ToolOutcome(True, "slept 0.0")


async def test_tool_errors_come_back_as_outcomes(
    tools: EffectsMcpServer, mcp: McpToolClient
) -> None:
    failed = await mcp.call(tools.url, "fail", {"message": "card declined"})
    assert not failed.ok
    assert failed.error is not None and "card declined" in failed.error
    unknown = await mcp.call(tools.url, "no_such_tool", {})
    assert not unknown.ok and unknown.error is not None and "no_such_tool" in unknown.error
    bad_args = await mcp.call(tools.url, "add", {"a": "two", "b": 2})
    assert not bad_args.ok
    # The connection survives tool errors.
    assert (await mcp.call(tools.url, "echo", {"text": "still here"})).ok
    assert mcp.open_connections == 1


async def test_each_call_carries_its_own_authorization(
    tools: EffectsMcpServer, mcp: McpToolClient
) -> None:
    """Pooled connections must never send one credential with another's call."""
    for token in ("tok-a", "tok-b", "tok-a"):
        await mcp.call(tools.url, "echo", {"text": token},
                       headers={"Authorization": f"Bearer {token}"})
    await mcp.call(tools.url, "echo", {"text": "none"})
    assert tools.authorizations == ["Bearer tok-a", "Bearer tok-b", "Bearer tok-a", None]
    assert [c.arguments["text"] for c in tools.calls] == ["tok-a", "tok-b", "tok-a", "none"]


async def test_list_tools_gives_names_descriptions_and_schemas(
    tools: EffectsMcpServer, mcp: McpToolClient
) -> None:
    listed = {t["name"]: t for t in await mcp.list_tools(tools.url)}
    assert set(listed) == {"effect", "echo", "add", "fail", "slow"}
    assert listed["add"]["input_schema"]["properties"].keys() == {"a", "b"}
    assert listed["add"]["input_schema"]["required"] == ["a", "b"]
    assert listed["effect"]["description"]


async def test_unreachable_server_raises_tool_unavailable(mcp: McpToolClient) -> None:
    server = EffectsMcpServer()
    await server.start()
    url = server.url
    await server.stop()
    with pytest.raises(ToolUnavailable) as caught:
        await mcp.call(url, "echo", {"text": "x"}, idempotency_key="k")
    assert caught.value.retryable
    assert caught.value.extra["reason"] == "connect"


async def test_a_timeout_raises_tool_unavailable(
    tools: EffectsMcpServer, mcp: McpToolClient
) -> None:
    with pytest.raises(ToolUnavailable) as caught:
        await mcp.call(tools.url, "slow", {"seconds": 30}, timeout=0.2)
    assert caught.value.extra["reason"] == "timeout"
    assert (await mcp.call(tools.url, "echo", {"text": "after"})).ok


async def test_http_failures_are_unavailable_but_refusals_are_outcomes(
    tools: EffectsMcpServer, mcp: McpToolClient
) -> None:
    tools.fail_next(1, status=503)
    with pytest.raises(ToolUnavailable) as caught:
        await mcp.call(tools.url, "effect", {"note": "x"}, idempotency_key="k")
    assert caught.value.extra["http_status"] == 503
    tools.fail_next(1, status=401)
    refused = await mcp.call(tools.url, "effect", {"note": "x"}, idempotency_key="k")
    assert refused == ToolOutcome(False, "", "tool server refused the call (HTTP 401)")
    assert tools.calls == []  # neither reached the tool
    retried = await mcp.call(tools.url, "effect", {"note": "x"}, idempotency_key="k")
    assert retried == ToolOutcome(True, "applied x")
    assert mcp.open_connections == 1


async def test_the_pool_recovers_when_a_server_restarts(mcp: McpToolClient) -> None:
    first = EffectsMcpServer()
    await first.start()
    url, port = first.url, int(first.base_url.rsplit(":", 1)[1])
    assert (await mcp.call(url, "echo", {"text": "one"})).ok
    await first.stop()
    with pytest.raises(ToolUnavailable):
        await mcp.call(url, "echo", {"text": "down"})
    async with EffectsMcpServer(port=port) as second:
        assert (await mcp.call(url, "echo", {"text": "two"})).ok
        assert [c.arguments["text"] for c in second.calls] == ["two"]


async def test_stats_route(tools: EffectsMcpServer, mcp: McpToolClient,
                           http: httpx2.AsyncClient) -> None:
    await mcp.call(tools.url, "effect", {"note": "x"}, idempotency_key="k1",
                   headers={"Authorization": "Bearer t"})
    await mcp.call(tools.url, "effect", {"note": "x"}, idempotency_key="k1",
                   headers={"Authorization": "Bearer t"})
    stats = (await http.get(f"{tools.base_url}/stats")).json()
    assert stats["keys"] == {"k1": {"calls": 2, "effects": 1}}
    assert stats["effects_total"] == 1
    assert [c["authorization"] for c in stats["calls"]] == ["Bearer t", "Bearer t"]
    brief = (await http.get(f"{tools.base_url}/stats?calls=false")).json()
    assert "calls" not in brief


async def test_state_file_keeps_effects_once_across_restarts(
    tmp_path: Path, mcp: McpToolClient
) -> None:
    state = tmp_path / "effects.jsonl"
    async with EffectsMcpServer(state_file=state) as server:
        await mcp.call(server.url, "effect", {"note": "ship"}, idempotency_key="run_9:1:0")
    async with EffectsMcpServer(state_file=state) as server:
        again = await mcp.call(server.url, "effect", {"note": "ship"},
                               idempotency_key="run_9:1:0")
        assert again.content == "already applied ship"
        assert server.key_counts() == {"run_9:1:0": KeyCount(calls=2, effects=1)}


async def test_mcp_server_runs_as_its_own_process(
    tmp_path: Path, mcp: McpToolClient, http: httpx2.AsyncClient
) -> None:
    state = tmp_path / "effects.jsonl"
    proc, url = await _start_process("-m", "tenantry.testing.mcp_server",
                                     "--port", "0", "--state", str(state))
    try:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
        await mcp.call(url, "effect", {"note": "x"}, idempotency_key="p1")
        await mcp.call(url, "effect", {"note": "x"}, idempotency_key="p1")
        stats = (await http.get(url.removesuffix("/mcp") + "/stats")).json()
        assert stats["keys"] == {"p1": {"calls": 2, "effects": 1}}
    finally:
        await _stop_process(proc)
    assert len(state.read_bytes().splitlines()) == 2
