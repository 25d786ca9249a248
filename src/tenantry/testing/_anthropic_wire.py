"""Anthropic's Messages wire format for the fake model server: requests validated as
Anthropic does (``POST /v1/messages``, whole or streamed; problems worded as Anthropic
words them), its reply, error, model-list and rate-limit header shapes.

A valid request is read back into the OpenAI shape
(:func:`tenantry.models.anthropic.openai_messages`), which is what scripts answer.

Streamed (``stream: true``): ``message_start`` (the message without content, its input
usage), then per content block ``content_block_start``, ``content_block_delta``s
(``text_delta`` a word at a time; ``input_json_delta`` pieces of a tool call's input) and
``content_block_stop``, a ``ping`` after the first block's start, ``message_delta`` (stop
reason, output usage) and ``message_stop``."""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from starlette.responses import Response

from tenantry.models.anthropic import openai_messages, tool_input
from tenantry.models.scripted import Reply
from tenantry.models.wire import (
    Chat,
    StreamPart,
    argument_pieces,
    json_response,
    text_pieces,
)

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                429: "rate_limit_error", 529: "overloaded_error"}
_DEFAULT_MESSAGES = {"rate_limit_error": "Number of requests has exceeded your rate limit.",
                     "overloaded_error": "Overloaded", "api_error": "Internal server error"}


class AnthropicWire:
    base_path = ""  # Anthropic's SDK takes the origin
    chat_path = "/v1/messages"
    id_prefix = "msg_"
    malformed = b'{"id": "msg_broken", "type": "message", "role": "assistant", "content": ['

    def error(self, status: int, message: str | None = None, *, param: str | None = None,
              code: str | None = None, headers: Mapping[str, str] | None = None) -> Response:
        type_ = _ERROR_TYPES.get(status, "api_error" if status >= 500
                                 else "invalid_request_error")
        request_id = f"req_{uuid.uuid4().hex[:24]}"
        return json_response(status, {
            "type": "error",
            "error": {"type": type_,
                      "message": message or _DEFAULT_MESSAGES.get(type_, "Injected error.")},
            "request_id": request_id,
        }, {**(headers or {}), "request-id": request_id})

    def read(self, payload: Any) -> Chat | Response:
        problem = _problem(payload)
        if problem is not None:
            return self.error(400, problem)
        return Chat(payload["model"], openai_messages(payload.get("system"),
                                                      payload["messages"]),
                    payload.get("tools"), stream=bool(payload.get("stream")))

    def completion(self, completion_id: str, model: str, reply: Reply,
                   cached: int) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        content += [{"type": "tool_use", "id": call.id, "name": call.name,
                     "input": tool_input(call.arguments)} for call in reply.tool_calls]
        body = self.without_content(completion_id, model)
        body["content"] = content
        body["stop_reason"] = _stop_reason(reply)
        body["usage"] = _usage(reply, cached)
        return body

    def stream(self, completion_id: str, model: str, reply: Reply, cached: int, *,
               include_usage: bool) -> list[StreamPart]:
        del include_usage  # Anthropic always streams its usage

        def event(kind: str, body: dict[str, Any], *, content: bool = False) -> StreamPart:
            data = orjson.dumps({"type": kind, **body})
            return StreamPart(b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n",
                              content)

        message = self.without_content(completion_id, model)
        message.update(content=[], stop_reason=None,
                       usage={**_usage(reply, cached), "output_tokens": 1})
        parts = [event("message_start", {"message": message})]
        blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
        if reply.text:
            blocks.append(({"type": "text", "text": ""},
                           [{"type": "text_delta", "text": piece}
                            for piece in text_pieces(reply.text)]))
        for call in reply.tool_calls:
            arguments = orjson.dumps(tool_input(call.arguments)).decode()
            blocks.append(({"type": "tool_use", "id": call.id, "name": call.name, "input": {}},
                           [{"type": "input_json_delta", "partial_json": piece}
                            for piece in ["", *argument_pieces(arguments)]]))
        for index, (start, deltas) in enumerate(blocks):
            parts.append(event("content_block_start", {"index": index, "content_block": start},
                               content=start["type"] == "tool_use"))
            if index == 0:
                parts.append(event("ping", {}))
            parts += [event("content_block_delta", {"index": index, "delta": delta},
                            content=True) for delta in deltas]
            parts.append(event("content_block_stop", {"index": index}))
        parts.append(event("message_delta", {
            "delta": {"stop_reason": _stop_reason(reply), "stop_sequence": None},
            "usage": {"output_tokens": reply.usage.completion_tokens}}))
        parts.append(event("message_stop", {}))
        return parts

    def without_content(self, completion_id: str, model: str) -> dict[str, Any]:
        return {"id": completion_id, "type": "message", "role": "assistant", "model": model,
                "stop_reason": "end_turn", "stop_sequence": None}

    def models(self, names: list[str]) -> dict[str, Any]:
        return {"data": [{"type": "model", "id": name, "display_name": name,
                          "created_at": "2025-01-01T00:00:00Z"} for name in names],
                "has_more": False, "first_id": names[0], "last_id": names[-1]}

    def limit_headers(self, limit: int, remaining: int, reset: float) -> dict[str, str]:
        at = datetime.now(UTC) + timedelta(seconds=math.ceil(reset))
        return {"anthropic-ratelimit-requests-limit": str(limit),
                "anthropic-ratelimit-requests-remaining": str(remaining),
                "anthropic-ratelimit-requests-reset":
                    at.isoformat(timespec="seconds").replace("+00:00", "Z")}


def _stop_reason(reply: Reply) -> str:
    return "tool_use" if reply.tool_calls else "end_turn"


def _usage(reply: Reply, cached: int) -> dict[str, int]:
    return {"input_tokens": reply.usage.prompt_tokens - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": reply.usage.completion_tokens}


def _problem(payload: Any) -> str | None:
    """The first problem in a Messages body, worded as Anthropic does, else None."""
    if not isinstance(payload, dict):
        return "Input should be a valid dictionary"
    if not isinstance(payload.get("model"), str) or not payload["model"]:
        return "model: Field required"
    max_tokens = payload.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        return "max_tokens: Field required"
    if max_tokens < 1:
        return "max_tokens: Input should be greater than or equal to 1"
    if payload.get("stream") is not None and not isinstance(payload["stream"], bool):
        return "stream: Input should be a valid boolean"
    system = payload.get("system")
    if system is not None and not isinstance(system, str) and not (
        isinstance(system, list) and all(_block_problem(b, "system") is None for b in system)
    ):
        return "system: Input should be a valid string or a list of text blocks"
    problem = _messages_problem(payload.get("messages"))
    if problem is not None:
        return problem
    tools = payload.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            return "tools: Input should be a valid list"
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                return f"tools.{i}.name: Field required"
            schema = tool.get("input_schema")
            if not isinstance(schema, dict):
                return f"tools.{i}.input_schema: Field required"
            if schema.get("type") != "object":
                return f"tools.{i}.input_schema.type: Input should be 'object'"
    tool_choice = payload.get("tool_choice")
    if tool_choice is not None and not (
        isinstance(tool_choice, dict) and tool_choice.get("type") in ("auto", "any", "tool",
                                                                      "none")
    ):
        return "tool_choice: Input should be a valid tool choice"
    return None


def _messages_problem(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    uses: list[str] = []  # tool_use ids of the message before
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(message, dict):
            return f"{where}: Input should be a valid dictionary"
        role = message.get("role")
        if role not in ("user", "assistant"):
            return f"{where}.role: Input should be 'user' or 'assistant'"
        if i and messages[i - 1].get("role") == role:
            return ('messages: roles must alternate between "user" and "assistant", but '
                    f'found multiple "{role}" roles in a row')
        content = message.get("content")
        if not isinstance(content, str | list):
            return f"{where}.content: Input should be a valid string or list of blocks"
        if not content and not (role == "assistant" and i == len(messages) - 1):
            return f"{where}: all messages must have non-empty content except for the " \
                   "optional final assistant message"
        blocks = content if isinstance(content, list) else []
        for j, block in enumerate(blocks):
            problem = _block_problem(block, role)
            if problem is not None:
                return f"{where}.content.{j}{problem}"
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        unexpected = [r for r in results if r not in uses]
        if unexpected:
            return (f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{unexpected[0]}. Each `tool_result` block must have a corresponding "
                    "`tool_use` block in the previous message.")
        unanswered = [u for u in uses if u not in results]
        if unanswered:
            return (f"messages.{i - 1}: `tool_use` ids were found without `tool_result` "
                    f"blocks immediately after: {', '.join(unanswered)}. Each `tool_use` "
                    "block must have a corresponding `tool_result` block in the next message.")
        uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
    return None


def _block_problem(block: Any, role: str) -> str | None:
    """What is wrong with one content block of a ``role`` message (a suffix to its
    location), else None."""
    if not isinstance(block, dict):
        return ": Input should be a valid dictionary"
    cache_control = block.get("cache_control")
    if cache_control is not None and not (isinstance(cache_control, dict)
                                          and cache_control.get("type") == "ephemeral"):
        return ".cache_control: Input should be {\"type\": \"ephemeral\"}"
    kind = block.get("type")
    allowed = {"system": ("text",), "user": ("text", "tool_result"),
               "assistant": ("text", "tool_use")}[role]
    if kind not in allowed:
        return f".type: Input should be one of {allowed} in {role} content, not {kind!r}"
    if kind == "text":
        if not isinstance(block.get("text"), str) or not block["text"]:
            return ".text: text content blocks must be non-empty"
    elif kind == "tool_use":
        for key, type_ in (("id", str), ("name", str), ("input", dict)):
            if not isinstance(block.get(key), type_):
                return f".{key}: Field required"
    else:  # tool_result
        if not isinstance(block.get("tool_use_id"), str):
            return ".tool_use_id: Field required"
        result = block.get("content")
        if result is not None and not isinstance(result, str) and not (
            isinstance(result, list) and all(_block_problem(b, "system") is None for b in result)
        ):
            return ".content: Input should be a valid string or a list of text blocks"
    return None
