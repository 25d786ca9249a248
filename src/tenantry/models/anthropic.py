"""Anthropic's Messages API over HTTP, from the OpenAI-shaped conversations the engine keeps.

``base_url`` is the origin, as the Anthropic SDK takes it (``https://api.anthropic.com``);
requests go to ``{base_url}/v1/messages``.

How a conversation is sent (:func:`messages_body`):

- ``system`` (and ``developer``) messages, wherever they stand, become the top-level
  ``system`` string, joined by blank lines: Anthropic has no system turn;
- an ``assistant`` message becomes ``text`` and ``tool_use`` blocks; a tool call's
  ``input`` is its arguments parsed as JSON. Arguments that are not a JSON object (the
  model wrote a malformed call on another provider, or a script did) are sent as ``{}``:
  Anthropic accepts nothing else there, and the ``tool_result`` that answered the call,
  with the engine's error about the arguments, stays in the conversation;
- ``tool`` messages become ``tool_result`` blocks of a user message; consecutive messages
  of one role are merged into one (Anthropic requires user and assistant to alternate);
  empty text is left out (Anthropic refuses empty text blocks);
- with ``prompt_cache`` (the default) the last block carries a ``cache_control``
  breakpoint, so each step of a run reads the previous steps from Anthropic's prompt cache
  (without one Anthropic caches nothing; prompts under its minimum length are unaffected).

Streamed (the default, ADR 0030): ``stream: true``, read by :class:`MessageStream` from
Anthropic's events — ``message_start`` (the model, the input usage), per content block
``content_block_start`` / ``content_block_delta`` (``text_delta``; ``input_json_delta``
pieces of a tool call's input) / ``content_block_stop``, ``message_delta`` (the output
usage), ``message_stop``; ``ping`` is ignored and ``error`` fails the call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from tenantry import http1
from tenantry.ledger.tokens import TokenUsage
from tenantry.models._http import HttpProviderClient, StreamReader, reading_reply
from tenantry.models.errors import MalformedReply, ModelRefused, ModelUnavailable
from tenantry.models.types import (
    ModelReply,
    ModelRequest,
    ModelToolCall,
    RateLimitInfo,
)

__all__ = [
    "AnthropicMessages",
    "MessageStream",
    "convert_messages",
    "convert_tools",
    "messages_body",
    "openai_messages",
    "parse_message",
    "tool_input",
]

_SYSTEM_ROLES = frozenset({"system", "developer"})
_EPHEMERAL = {"type": "ephemeral"}


# ---------------------------------------------------------------------- request


def messages_body(
    request: ModelRequest, *, default_max_tokens: int = 4096, prompt_cache: bool = True
) -> dict[str, Any]:
    """The ``POST /v1/messages`` body for ``request`` (see the module docstring)."""
    system, messages = convert_messages(request.messages)
    if prompt_cache and messages:
        last = messages[-1]["content"][-1]
        last["cache_control"] = dict(_EPHEMERAL)
    body: dict[str, Any] = {
        "model": request.wire_model,
        "max_tokens": request.max_tokens or default_max_tokens,
        "messages": messages,
    }
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = convert_tools(request.tools)
    return body


def convert_messages(
    messages: Iterable[Mapping[str, Any]],
) -> tuple[str, list[dict[str, Any]]]:
    """``(system, messages)`` in Anthropic's shape for an OpenAI-shaped conversation.
    Raises :class:`ModelRefused` for a message it cannot express."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role in _SYSTEM_ROLES:
            text = _text(message.get("content"), index)
            if text:
                system.append(text)
            continue
        if role == "user":
            blocks = _text_blocks(message.get("content"), index)
        elif role == "assistant":
            blocks = _text_blocks(message.get("content"), index)
            blocks += [_tool_use(call, index) for call in message.get("tool_calls") or ()]
            role = "assistant"
        elif role == "tool":
            role = "user"
            result: dict[str, Any] = {"type": "tool_result",
                                      "tool_use_id": str(message.get("tool_call_id"))}
            text = _text(message.get("content"), index)
            if text:
                result["content"] = text
            blocks = [result]
        else:
            raise ModelRefused(f"messages[{index}]: role {role!r} has no Anthropic equivalent")
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return "\n\n".join(system), out


def convert_tools(tools: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI function tools as Anthropic tools (``{name, description?, input_schema}``)."""
    out: list[dict[str, Any]] = []
    for index, tool in enumerate(tools):
        function = tool.get("function")
        if tool.get("type") != "function" or not isinstance(function, Mapping):
            raise ModelRefused(f"tools[{index}]: only function tools can be sent to Anthropic")
        converted: dict[str, Any] = {
            "name": function.get("name"),
            "input_schema": function.get("parameters") or {"type": "object",
                                                            "properties": {}},
        }
        if function.get("description"):
            converted["description"] = function["description"]
        out.append(converted)
    return out


def tool_input(arguments: object) -> dict[str, Any]:
    """A tool call's arguments as Anthropic's ``input``: the JSON object they encode, else
    ``{}`` (see the module docstring)."""
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if isinstance(arguments, str | bytes):
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return {}
        if isinstance(value, dict):
            return value
    return {}


def _tool_use(call: Any, index: int) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping):
        raise ModelRefused(f"messages[{index}]: a tool call without a function")
    return {"type": "tool_use", "id": str(call.get("id")), "name": str(function.get("name")),
            "input": tool_input(function.get("arguments"))}


def _text_blocks(content: object, index: int) -> list[dict[str, Any]]:
    text = _text(content, index)
    return [{"type": "text", "text": text}] if text else []


def _text(content: object, index: int) -> str:
    """A message's text: a string, or the text parts of a content list joined."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, Sequence):
        texts: list[str] = []
        for part in content:
            if not (isinstance(part, Mapping) and part.get("type") == "text"
                    and isinstance(part.get("text"), str)):
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise ModelRefused(f"messages[{index}]: content part {kind!r} cannot be "
                                   "sent to Anthropic")
            texts.append(part["text"])
        return "".join(texts)
    raise ModelRefused(f"messages[{index}]: content must be a string or a list of parts")


def openai_messages(
    system: object, messages: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The inverse of :func:`convert_messages`, for a body that passed Anthropic's checks
    (the fake model server reads Anthropic requests with it): ``system`` first, each user
    text block a user message, each ``tool_result`` a tool message, an assistant message's
    text joined and its ``tool_use`` blocks as tool calls with compact JSON arguments."""
    out: list[dict[str, Any]] = []
    system_text = _block_text(system)
    if system_text:
        out.append({"role": "system", "content": system_text})
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            out.append({"role": message["role"], "content": content})
        elif message["role"] == "assistant":
            calls = [{"id": block["id"], "type": "function",
                      "function": {"name": block["name"],
                                   "arguments": orjson.dumps(block["input"]).decode()}}
                     for block in content if block["type"] == "tool_use"]
            text = _block_text(content)
            assistant: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                assistant["tool_calls"] = calls
            out.append(assistant)
        else:
            for block in content:
                if block["type"] == "tool_result":
                    out.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                                "content": _block_text(block.get("content"))})
                elif block["type"] == "text":
                    out.append({"role": "user", "content": block["text"]})
    return out


def _block_text(content: object) -> str:
    """The text of a string or of the text blocks of a list (anything else: "")."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(block["text"] for block in content
                       if isinstance(block, Mapping) and block.get("type") == "text")
    return ""


# ---------------------------------------------------------------------- reply


def parse_message(
    raw: bytes, /, *, model: str, account: str, provider: str = "anthropic",
    latency_ms: float = 0.0, rate_limits: RateLimitInfo | None = None,
) -> ModelReply:
    """A Messages API reply as a :class:`ModelReply` for a request of ``model``. Text blocks
    are joined; blocks of other kinds (thinking, server tools) are left out. Raises
    :class:`~tenantry.models.errors.MalformedReply` if the body is not such a reply."""
    with reading_reply():
        payload = orjson.loads(raw)
        content = payload["content"]
        if not isinstance(content, list):
            raise TypeError(f"content is {type(content).__name__}, not a list")
        texts: list[str] = []
        calls: list[ModelToolCall] = []
        for block in content:
            if block["type"] == "text":
                texts.append(str(block["text"]))
            elif block["type"] == "tool_use":
                calls.append(ModelToolCall(id=str(block["id"]), name=str(block["name"]),
                                           arguments=orjson.dumps(block["input"]).decode()))
        return ModelReply(
            text="".join(texts),
            calls=tuple(calls),
            usage=_usage(payload.get("usage") or {}),
            provider=provider,
            account=account,
            model=model,
            latency_ms=latency_ms,
            provider_model=str(payload.get("model") or ""),
            rate_limits=rate_limits,
        )


def _usage(usage: Mapping[str, Any]) -> TokenUsage:
    """Anthropic counts cache reads and writes apart from ``input_tokens``; ours include
    them (what the prompt was), with the cached part said apart."""
    cache_read = int(usage.get("cache_read_input_tokens") or 0)
    cache_write = int(usage.get("cache_creation_input_tokens") or 0)
    return TokenUsage(
        input_tokens=int(usage.get("input_tokens") or 0) + cache_read + cache_write,
        output_tokens=int(usage.get("output_tokens") or 0),
        cached_input_tokens=cache_read,
        cache_write_input_tokens=cache_write,
    )


class MessageStream:
    """One streamed Messages reply being read (see the module docstring). The reply is the
    one :func:`parse_message` reads from the whole answer: text blocks joined, tool calls
    with their input as compact JSON, usage from ``message_start`` updated by
    ``message_delta`` (whose counts are cumulative)."""

    __slots__ = ("_blocks", "_model", "_started", "_texts", "_usage", "done")

    def __init__(self) -> None:
        self.done = False
        self._started = False
        self._texts: list[str] = []
        # index -> ["text"] or ["tool_use", id, name, input pieces, input at the start]
        self._blocks: dict[int, list[Any]] = {}
        self._usage: dict[str, Any] = {}
        self._model = ""

    def feed(self, events: list[tuple[str, bytes]]) -> str:
        if self.done:
            return ""
        payloads = orjson.loads(b"[" + b",".join(data for _, data in events) + b"]") \
            if len(events) > 1 else (orjson.loads(events[0][1]),)
        texts = []
        for (name, _), payload in zip(events, payloads, strict=True):
            texts.append(self._event(payload.get("type") or name, payload))
            if self.done:
                break
        return "".join(texts)

    def _event(self, kind: str, payload: Any) -> str:
        if kind == "content_block_delta":
            delta = payload["delta"]
            block = self._blocks.get(int(payload["index"]))
            if block is None:
                return ""  # a block of a kind that is not read (thinking)
            if delta["type"] == "text_delta" and block[0] == "text":
                return self._text(delta["text"])
            if delta["type"] == "input_json_delta" and block[0] == "tool_use":
                block[3].append(str(delta["partial_json"]))
            return ""
        if kind == "content_block_start":
            block = payload["content_block"]
            index = int(payload["index"])
            if block["type"] == "text":
                self._blocks[index] = ["text"]
                return self._text(block.get("text") or "")
            if block["type"] == "tool_use":
                self._blocks[index] = ["tool_use", str(block["id"]), str(block["name"]), [],
                                       block.get("input") or {}]
            return ""
        if kind == "message_start":
            message = payload["message"]
            self._started = True
            self._model = str(message.get("model") or "")
            self._merge_usage(message.get("usage"))
        elif kind == "message_delta":
            self._merge_usage(payload.get("usage"))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            error = payload.get("error") or {}
            raise ModelUnavailable(
                f"the provider failed mid-stream: {error.get('type')}: "
                f"{str(error.get('message'))[:300]}")
        return ""

    def _text(self, text: object) -> str:
        if not isinstance(text, str):
            raise TypeError(f"text is {type(text).__name__}")
        if text:
            self._texts.append(text)
        return text

    def _merge_usage(self, usage: object) -> None:
        if isinstance(usage, Mapping):
            self._usage.update({k: v for k, v in usage.items() if v is not None})

    def reply(self, *, model: str, provider: str, account: str, latency_ms: float,
              rate_limits: RateLimitInfo | None) -> ModelReply:
        if not self._started:
            raise MalformedReply("the provider's stream had no message_start")
        with reading_reply():
            calls = tuple(
                ModelToolCall(id=block[1], name=block[2], arguments=orjson.dumps(
                    orjson.loads("".join(block[3])) if block[3] else block[4]).decode())
                for _, block in sorted(self._blocks.items()) if block[0] == "tool_use")
            usage = _usage(self._usage)
        return ModelReply(text="".join(self._texts), calls=calls, usage=usage,
                          provider=provider, account=account, model=model,
                          latency_ms=latency_ms, provider_model=self._model,
                          rate_limits=rate_limits)


# ---------------------------------------------------------------------- client


class AnthropicMessages(HttpProviderClient):
    provider = "anthropic"
    wire = "anthropic"
    completions_path = "/v1/messages"
    models_path = "/v1/models"
    parse_reply = staticmethod(parse_message)

    def __init__(
        self, base_url: str, *, api_key: str | None = None, account: str = "default",
        timeout: float = 120.0, max_connections: int = 4096,
        anthropic_version: str = "2023-06-01", default_max_tokens: int = 4096,
        prompt_cache: bool = True, stream: bool = True,
        connect_to: http1.ConnectTo | None = None,
    ) -> None:
        self.anthropic_version = anthropic_version
        self.default_max_tokens = default_max_tokens
        self.prompt_cache = prompt_cache
        super().__init__(base_url, api_key=api_key, account=account, timeout=timeout,
                         max_connections=max_connections, stream=stream,
                         connect_to=connect_to)

    def _headers(self, api_key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": self.anthropic_version}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        return messages_body(request, default_max_tokens=self.default_max_tokens,
                             prompt_cache=self.prompt_cache)

    def _stream_fields(self) -> dict[str, Any]:
        return {"stream": True}  # usage comes with message_start and message_delta

    def _stream_reader(self) -> StreamReader:
        return MessageStream()
