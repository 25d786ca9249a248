"""The provider clients' wire formats without a network: rate-limit headers, the OpenAI →
Anthropic conversation conversion, reading replies, and how provider answers are typed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx2
import orjson
import pytest

from tenantry.ledger.tokens import TokenUsage
from tenantry.models.anthropic import (
    convert_messages,
    convert_tools,
    messages_body,
    openai_messages,
    parse_message,
    tool_input,
)
from tenantry.models.errors import (
    AccountUnusable,
    MalformedReply,
    ModelError,
    ModelRefused,
    ModelUnavailable,
    RateLimited,
    error_for_status,
)
from tenantry.models.openai_compat import parse_completion
from tenantry.models.ratelimits import format_duration, parse_duration, parse_rate_limits
from tenantry.models.types import (
    PLATFORM,
    TENANT,
    ModelRequest,
    ModelToolCall,
    RateLimitInfo,
    SnapshotPin,
)

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


# ---------------------------------------------------------------------- rate-limit headers


@pytest.mark.parametrize(("text", "seconds"), [
    ("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("0.5s", 0.5),
    ("250us", 0.00025), ("2", 2.0), ("0.75", 0.75),
])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "1x", "-1s", "-3", "1s garbage", "s"])
def test_unreadable_durations(text: str) -> None:
    assert parse_duration(text) is None


@pytest.mark.parametrize("seconds", [0.02, 0.5, 1.0, 1.5, 59.25, 360.0, 3723.5])
def test_formatted_durations_read_back(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)


def test_openai_rate_limit_headers() -> None:
    headers = httpx2.Headers({  # real responses: header names are case-insensitive
        "X-RateLimit-Limit-Requests": "500", "X-RateLimit-Remaining-Requests": "499",
        "X-RateLimit-Remaining-Tokens": "149984", "X-RateLimit-Reset-Requests": "120ms",
        "X-RateLimit-Reset-Tokens": "6m0s",
    })
    assert parse_rate_limits("openai", headers) == RateLimitInfo(
        remaining_requests=499, remaining_tokens=149984, reset_requests_seconds=0.12,
        reset_tokens_seconds=360.0)
    # OpenAI-compatible servers (and accounts called "scripted") use the same headers.
    assert parse_rate_limits("vllm", headers) == parse_rate_limits("openai", headers)


def test_anthropic_rate_limit_headers() -> None:
    headers = {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "49",
        "anthropic-ratelimit-requests-reset": "2026-03-01T12:00:05Z",
        "anthropic-ratelimit-tokens-remaining": "39000",
        "anthropic-ratelimit-tokens-reset": "2026-03-01T12:01:00.500+00:00",
    }
    assert parse_rate_limits("anthropic", headers, now=NOW) == RateLimitInfo(
        remaining_requests=49, remaining_tokens=39000, reset_requests_seconds=5.0,
        reset_tokens_seconds=60.5)


def test_anthropic_input_token_limits_and_past_resets() -> None:
    headers = {"anthropic-ratelimit-input-tokens-remaining": "7000",
               "anthropic-ratelimit-input-tokens-reset": "2026-03-01T11:59:00Z",
               "anthropic-ratelimit-requests-reset": "2026-03-01T12:00:02"}  # no zone: UTC
    assert parse_rate_limits("anthropic", headers, now=NOW) == RateLimitInfo(
        remaining_tokens=7000, reset_tokens_seconds=0.0, reset_requests_seconds=2.0)


def test_no_or_unreadable_rate_limit_headers() -> None:
    assert parse_rate_limits("openai", {"content-type": "application/json"}) is None
    assert parse_rate_limits("anthropic", {"x-ratelimit-remaining-requests": "5"}) is None
    assert parse_rate_limits("openai", {"x-ratelimit-remaining-requests": "many"}) is None
    assert parse_rate_limits("anthropic", {
        "anthropic-ratelimit-requests-remaining": "3",
        "anthropic-ratelimit-requests-reset": "next tuesday"}) == RateLimitInfo(
        remaining_requests=3)


# ---------------------------------------------------------------------- Anthropic requests

TOOL_TURN: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "milk"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0_0", "type": "function",
         "function": {"name": "effect", "arguments": '{"note":"milk"}'}},
        {"id": "call_0_1", "type": "function",
         "function": {"name": "add", "arguments": '{"a":1,"b":2}'}},
    ]},
    {"role": "tool", "tool_call_id": "call_0_0", "content": "applied milk"},
    {"role": "tool", "tool_call_id": "call_0_1", "content": "3"},
]


def test_a_tool_turn_becomes_alternating_anthropic_messages() -> None:
    system, messages = convert_messages(TOOL_TURN)
    assert system == "Be brief."
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": "milk"}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "call_0_0", "name": "effect", "input": {"note": "milk"}},
            {"type": "tool_use", "id": "call_0_1", "name": "add", "input": {"a": 1, "b": 2}},
        ]},
        # Consecutive tool results are one user message.
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_0_0", "content": "applied milk"},
            {"type": "tool_result", "tool_use_id": "call_0_1", "content": "3"},
        ]},
    ]
    # Read back (what the fake server does), the conversation is the one we started from.
    assert openai_messages(system, messages) == TOOL_TURN


def test_system_text_assistant_text_and_merged_roles() -> None:
    system, messages = convert_messages([
        {"role": "system", "content": "Rule one."},
        {"role": "developer", "content": [{"type": "text", "text": "Rule two."}]},
        {"role": "user", "content": "hi"},
        {"role": "user", "content": [{"type": "text", "text": "again"}]},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "look", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t1", "content": ""},
        {"role": "user", "content": "and?"},
        {"role": "assistant", "content": ""},  # empty: left out
        {"role": "system", "content": "Late rule."},  # hoisted too
        {"role": "assistant", "content": "Done."},
    ])
    assert system == "Rule one.\n\nRule two.\n\nLate rule."
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": "hi"},
                                     {"type": "text", "text": "again"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "t1", "name": "look", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"},
                                     {"type": "text", "text": "and?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
    ]


@pytest.mark.parametrize(("arguments", "expected"), [
    ('{"a": 1}', {"a": 1}),
    ({"already": "parsed"}, {"already": "parsed"}),
    ("", {}),
    (None, {}),
    ('{"a": 1', {}),  # truncated
    ("[1, 2]", {}),  # JSON, but not an object
    ('"text"', {}),
])
def test_tool_call_arguments_that_are_not_an_object_are_sent_as_empty(
    arguments: object, expected: dict[str, Any]
) -> None:
    assert tool_input(arguments) == expected


def test_unsupported_content_is_refused() -> None:
    with pytest.raises(ModelRefused, match="image_url"):
        convert_messages([{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}}]}])
    with pytest.raises(ModelRefused, match="role"):
        convert_messages([{"role": "wizard", "content": "x"}])
    with pytest.raises(ModelRefused, match="function tools"):
        convert_tools([{"type": "web_search"}])


def test_tools_become_input_schemas() -> None:
    assert convert_tools([
        {"type": "function", "function": {
            "name": "add", "description": "Add two numbers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
        {"type": "function", "function": {"name": "ping"}},
    ]) == [
        {"name": "add", "description": "Add two numbers.",
         "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}}}},
        {"name": "ping", "input_schema": {"type": "object", "properties": {}}},
    ]


def test_request_body_max_tokens_and_cache_breakpoint() -> None:
    request = ModelRequest("claude-sonnet-4", tuple(TOOL_TURN),
                           tools=({"type": "function", "function": {"name": "add"}},))
    body = messages_body(request, default_max_tokens=1000)
    assert set(body) == {"model", "max_tokens", "messages", "system", "tools"}
    assert body["max_tokens"] == 1000
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    marked = [block for message in body["messages"] for block in message["content"]
              if "cache_control" in block]
    assert len(marked) == 1

    plain = messages_body(ModelRequest("m", ({"role": "user", "content": "x"},), max_tokens=7),
                          prompt_cache=False)
    assert plain == {"model": "m", "max_tokens": 7,
                     "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}


def test_a_pinned_snapshot_is_the_wire_model_and_only_that() -> None:
    """A held snapshot changes the name sent, for the pinned model only."""
    pins = {"claude-sonnet-4": "claude-sonnet-4-20250514"}
    pinned = ModelRequest("claude-sonnet-4", ({"role": "user", "content": "x"},),
                          provider_model_pins=pins)
    assert messages_body(pinned)["model"] == "claude-sonnet-4-20250514"
    assert pinned.model == "claude-sonnet-4"
    other = ModelRequest("claude-haiku-4", ({"role": "user", "content": "x"},),
                         provider_model_pins=pins)
    assert messages_body(other)["model"] == "claude-haiku-4"


def test_a_held_snapshot_goes_out_only_on_accounts_of_the_owners_that_reported_it() -> None:
    """Each account's request carries the pins its owner reported, none other: a tenant's
    own account's snapshot never reaches a platform account, nor the reverse."""
    pins = {"claude-sonnet-4": SnapshotPin("own-made-up-id", frozenset({TENANT})),
            "claude-haiku-4": SnapshotPin("claude-haiku-4-20250101", frozenset({PLATFORM})),
            "claude-opus-4": SnapshotPin("claude-opus-4-20250514", frozenset({TENANT, PLATFORM})),
            "claude-unknown": SnapshotPin("claude-unknown-1", frozenset())}
    wire = {}
    for owner in (TENANT, PLATFORM):
        for model in pins:
            request = ModelRequest(model, ({"role": "user", "content": "x"},),
                                   snapshot_pins=pins).on_account(owner)
            wire[owner, model] = messages_body(request)["model"]
    assert wire == {
        (TENANT, "claude-sonnet-4"): "own-made-up-id",
        (TENANT, "claude-haiku-4"): "claude-haiku-4",
        (TENANT, "claude-opus-4"): "claude-opus-4-20250514",
        (TENANT, "claude-unknown"): "claude-unknown",
        (PLATFORM, "claude-sonnet-4"): "claude-sonnet-4",
        (PLATFORM, "claude-haiku-4"): "claude-haiku-4-20250101",
        (PLATFORM, "claude-opus-4"): "claude-opus-4-20250514",
        (PLATFORM, "claude-unknown"): "claude-unknown"}
    # Not sent on any account yet: no pin at all.
    assert messages_body(ModelRequest("claude-sonnet-4", ({"role": "user", "content": "x"},),
                                      snapshot_pins=pins))["model"] == "claude-sonnet-4"


# ---------------------------------------------------------------------- replies


def test_an_anthropic_reply_with_tool_use_and_cache_usage() -> None:
    raw = orjson.dumps({
        "id": "msg_1", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-20250514",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "x"},
            {"type": "text", "text": "Let me "}, {"type": "text", "text": "check."},
            {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 2}},
        ],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 100,
                  "cache_creation_input_tokens": 20, "output_tokens": 7},
    })
    limits = RateLimitInfo(remaining_requests=3)
    reply = parse_message(raw, model="claude-sonnet-4", account="acct", latency_ms=5.0,
                          rate_limits=limits)
    assert reply.text == "Let me check."
    assert reply.calls == (ModelToolCall("toolu_1", "add", '{"a":1,"b":2}'),)
    assert reply.usage == TokenUsage(input_tokens=130, output_tokens=7, cached_input_tokens=100,
                                     cache_write_input_tokens=20)
    assert (reply.provider, reply.account, reply.model, reply.provider_model) == (
        "anthropic", "acct", "claude-sonnet-4", "claude-sonnet-4-20250514")
    assert reply.rate_limits == limits


def test_an_openai_reply_with_cached_tokens() -> None:
    raw = orjson.dumps({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [
                {"id": "call_a", "type": "function",
                 "function": {"name": "add", "arguments": '{"a":1}'}}]}}],
        "usage": {"prompt_tokens": 1200, "completion_tokens": 9, "total_tokens": 1209,
                  "prompt_tokens_details": {"cached_tokens": 1024}},
    })
    reply = parse_completion(raw, model="gpt-4o", provider="openai", account="a")
    assert reply.text == ""
    assert reply.calls == (ModelToolCall("call_a", "add", '{"a":1}'),)
    assert reply.usage == TokenUsage(input_tokens=1200, output_tokens=9, cached_input_tokens=1024)
    assert (reply.model, reply.provider_model) == ("gpt-4o", "gpt-4o-2024-08-06")


@pytest.mark.parametrize("raw", [
    b'{"id": "chatcmpl-broken", "choices": [',
    b'{"id": "chatcmpl-1", "object": "chat.completion"}',
    b'{"choices": []}',
    b"[]",
    b'{"choices": [{"message": "hello"}]}',
    b'{"choices": [{"message": {"content": ["a", "b"]}}]}',
    b'{"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": "many"}}',
])
def test_unreadable_openai_replies_are_malformed(raw: bytes) -> None:
    with pytest.raises(MalformedReply):
        parse_completion(raw, model="m", provider="openai", account="a")


@pytest.mark.parametrize("raw", [
    b'{"id": "msg_broken", "content": [',
    b'{"id": "msg_1", "type": "message", "role": "assistant", "stop_reason": "end_turn"}',
    b'{"content": "hello"}',
    b'{"content": [{"text": "no type"}]}',
    b'{"content": [{"type": "tool_use", "name": "add"}]}',
    b'{"content": [], "usage": {"input_tokens": "many"}}',
])
def test_unreadable_anthropic_replies_are_malformed(raw: bytes) -> None:
    with pytest.raises(MalformedReply):
        parse_message(raw, model="m", account="a")


# ---------------------------------------------------------------------- error classification


@pytest.mark.parametrize(("status", "error"), [
    (429, RateLimited), (500, ModelUnavailable), (503, ModelUnavailable),
    (529, ModelUnavailable), (408, ModelUnavailable), (409, ModelUnavailable),
    (401, AccountUnusable), (403, AccountUnusable), (404, AccountUnusable),
    (400, ModelRefused), (413, ModelRefused), (422, ModelRefused),
])
def test_provider_statuses_are_typed_by_what_to_do_next(
    status: int, error: type[ModelError]
) -> None:
    anthropic_body = orjson.dumps({"type": "error", "error": {
        "type": "overloaded_error", "message": "Overloaded"}}).decode()
    raised = error_for_status(status, {"retry-after": "3"}, anthropic_body)
    assert type(raised) is error
    assert raised.http_status == status
    assert raised.retry_after == 3.0
    assert "Overloaded" in raised.detail
    assert raised.retryable == (error is not ModelRefused)
