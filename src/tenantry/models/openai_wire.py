"""OpenAI's chat completions wire format for the scripted model server: requests validated as
OpenAI does (``POST /v1/chat/completions``, whole or streamed), its reply, error,
model-list and rate-limit header shapes.

Streamed (``stream: true``): ``chat.completion.chunk`` events — the role first, the text a
word at a time, each tool call's id and name then its arguments in pieces, a chunk with
the ``finish_reason``; with ``stream_options.include_usage`` every chunk has ``usage:
null`` and a last one with no choices carries the usage; then ``data: [DONE]``."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

from tenantry.models.ratelimits import format_duration
from tenantry.models.scripted import Reply
from tenantry.models.wire import (
    Chat,
    StreamPart,
    argument_pieces,
    json_response,
    text_pieces,
)

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


class OpenAIWire:
    base_path = "/v1"
    chat_path = "/v1/chat/completions"
    id_prefix = "chatcmpl-"
    malformed = b'{"id": "chatcmpl-broken", "object": "chat.completion", "choices": ['

    def error(self, status: int, message: str | None = None, *, param: str | None = None,
              code: str | None = None, headers: Mapping[str, str] | None = None) -> Response:
        if status == 429:
            type_, default = "requests", "Rate limit reached for requests. Please try again later."
            code = code or "rate_limit_exceeded"
        elif status >= 500:
            type_ = "server_error"
            default = "The server had an error while processing your request."
        else:
            type_, default = "invalid_request_error", "Injected error."
        return json_response(status, {"error": {"message": message or default, "type": type_,
                                                "param": param, "code": code}}, headers)

    def read(self, payload: Any) -> Chat | Response:
        problem = _problem(payload)
        if problem is not None:
            return self.error(400, problem[0], param=problem[1])
        options = payload.get("stream_options") or {}
        return Chat(payload["model"], payload["messages"], payload.get("tools"),
                    stream=bool(payload.get("stream")),
                    include_usage=bool(options.get("include_usage")))

    def completion(self, completion_id: str, model: str, reply: Reply,
                   cached: int) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": call.id, "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments}}
                for call in reply.tool_calls
            ]
        body = self.without_content(completion_id, model)
        body["choices"] = [{"index": 0, "message": message, "logprobs": None,
                            "finish_reason": reply.finish_reason}]
        body["usage"] = _usage(reply, cached)
        return body

    def stream(self, completion_id: str, model: str, reply: Reply, cached: int, *,
               include_usage: bool) -> list[StreamPart]:
        head = {"id": completion_id, "object": "chat.completion.chunk",
                "created": int(time.time()), "model": model, "system_fingerprint": None}

        def chunk(delta: dict[str, Any], *, finish: str | None = None,
                  content: bool = True) -> StreamPart:
            body = {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                         "finish_reason": finish}]}
            if include_usage:
                body["usage"] = None
            return StreamPart(b"data: " + orjson.dumps(body) + b"\n\n", content)

        parts = [chunk({"role": "assistant", "content": "", "refusal": None},
                       content=False)]
        parts += [chunk({"content": piece}) for piece in text_pieces(reply.text or "")]
        for index, call in enumerate(reply.tool_calls):
            parts.append(chunk({"tool_calls": [{
                "index": index, "id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": ""}}]}))
            parts += [chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                      for piece in argument_pieces(call.arguments)]
        parts.append(chunk({}, finish=reply.finish_reason, content=False))
        if include_usage:
            last = {**head, "choices": [], "usage": _usage(reply, cached)}
            parts.append(StreamPart(b"data: " + orjson.dumps(last) + b"\n\n"))
        parts.append(StreamPart(b"data: [DONE]\n\n"))
        return parts

    def without_content(self, completion_id: str, model: str) -> dict[str, Any]:
        return {"id": completion_id, "object": "chat.completion", "created": int(time.time()),
                "model": model}

    def models(self, names: list[str]) -> dict[str, Any]:
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "tenantry-testing"}
            for name in names
        ]}

    def limit_headers(self, limit: int, remaining: int, reset: float) -> dict[str, str]:
        return {"x-ratelimit-limit-requests": str(limit),
                "x-ratelimit-remaining-requests": str(remaining),
                "x-ratelimit-reset-requests": format_duration(reset)}


def _usage(reply: Reply, cached: int) -> dict[str, Any]:
    return {"prompt_tokens": reply.usage.prompt_tokens,
            "completion_tokens": reply.usage.completion_tokens,
            "total_tokens": reply.usage.total_tokens,
            "prompt_tokens_details": {"cached_tokens": cached}}


def _problem(payload: Any) -> tuple[str, str | None] | None:
    """``(message, param)`` for the first problem in a chat-completions body, else None."""
    if not isinstance(payload, dict):
        return "The request body must be a JSON object.", None
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        return "You must provide a model parameter.", "model"
    stream = payload.get("stream")
    if stream is not None and not isinstance(stream, bool):
        return "Invalid type for 'stream': expected a boolean.", "stream"
    options = payload.get("stream_options")
    if options is not None:
        if not stream:
            return ("The 'stream_options' parameter is only allowed when 'stream' is "
                    "enabled."), "stream_options"
        if not isinstance(options, dict) or not isinstance(
                options.get("include_usage", False), bool):
            return "Invalid 'stream_options': expected {include_usage: boolean}.", \
                "stream_options"
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array.", "messages"
    for i, message in enumerate(messages):
        problem = _message_problem(message)
        if problem is not None:
            return f"Invalid 'messages[{i}]': {problem}", f"messages[{i}]"
    tools = payload.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            return "'tools' must be an array.", "tools"
        for i, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, dict) else None
            if (not isinstance(tool, dict) or tool.get("type") != "function"
                    or not isinstance(function, dict)
                    or not isinstance(function.get("name"), str)):
                return (f"Invalid 'tools[{i}]': expected {{\"type\": \"function\", "
                        f"\"function\": {{\"name\", ...}}}}."), f"tools[{i}]"
    tool_choice = payload.get("tool_choice")
    if tool_choice is not None and not (
        tool_choice in ("none", "auto", "required") or isinstance(tool_choice, dict)
    ):
        return "Invalid 'tool_choice'.", "tool_choice"
    return None


def _message_problem(message: Any) -> str | None:
    if not isinstance(message, dict):
        return "expected an object."
    role = message.get("role")
    if role not in _ROLES:
        return f"unknown role {role!r}."
    content = message.get("content")
    if content is not None and not isinstance(content, str | list):
        return "'content' must be a string, an array of parts, or null."
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        return "a tool message needs 'tool_call_id'."
    calls = message.get("tool_calls")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            return "'tool_calls' is an array on assistant messages only."
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if (not isinstance(function, dict) or not isinstance(call.get("id"), str)
                    or not isinstance(function.get("name"), str)
                    or not isinstance(function.get("arguments"), str)):
                return "a tool call is {id, type, function: {name, arguments: string}}."
    elif role != "assistant" and content is None:
        return "'content' is required."
    return None
