"""OpenAI-compatible chat completions over HTTP (OpenAI, vLLM, Ollama, the fake server).

One pooled HTTP client per provider account (models/_http.py); errors are the typed ones
of models/errors.py. ``base_url`` includes the API version (``https://api.openai.com/v1``),
as the OpenAI SDK takes it.

Streamed (the default, ADR 0030): ``stream: true`` with ``stream_options.include_usage``,
read by :class:`CompletionStream` — ``chat.completion.chunk`` events whose deltas carry the
text and the tool calls (by index: id and name first, then the arguments in pieces), a last
chunk with no choices carrying the usage, then ``data: [DONE]``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from tenantry.ledger.tokens import TokenUsage
from tenantry.models._http import (
    HttpProviderClient,
    StreamReader,
    StreamWithoutUsage,
    reading_reply,
)
from tenantry.models.errors import MalformedReply, ModelUnavailable
from tenantry.models.types import (
    ModelReply,
    ModelRequest,
    ModelToolCall,
    RateLimitInfo,
)

__all__ = ["CompletionStream", "OpenAICompatible", "parse_completion"]


def parse_completion(
    raw: bytes, /, *, model: str, provider: str, account: str, latency_ms: float = 0.0,
    rate_limits: RateLimitInfo | None = None,
) -> ModelReply:
    """A chat completion body as a :class:`ModelReply` for a request of ``model``; raises
    :class:`~tenantry.models.errors.MalformedReply` if it is not one (not JSON, no choices,
    wrong shapes)."""
    with reading_reply():
        payload = orjson.loads(raw)
        message = payload["choices"][0]["message"]
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise TypeError(f"message content is {type(content).__name__}")
        calls = tuple(
            ModelToolCall(
                id=str(call.get("id") or f"call_{index}"),
                name=str((call.get("function") or {}).get("name") or ""),
                arguments=_arguments_text((call.get("function") or {}).get("arguments")),
            )
            for index, call in enumerate(message.get("tool_calls") or ())
        )
        return ModelReply(
            text=content or "",
            calls=calls,
            usage=_usage(payload.get("usage") or {}),
            provider=provider,
            account=account,
            model=model,
            latency_ms=latency_ms,
            provider_model=str(payload.get("model") or ""),
            rate_limits=rate_limits,
        )


def _usage(usage: Mapping[str, Any]) -> TokenUsage:
    details: Mapping[str, Any] = usage.get("prompt_tokens_details") or {}
    return TokenUsage(
        input_tokens=int(usage.get("prompt_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
        cached_input_tokens=int(details.get("cached_tokens") or 0),
    )


class CompletionStream:
    """One streamed chat completion being read (see the module docstring). Only the first
    choice is read, as :func:`parse_completion` does; an ``error`` object in the stream
    (what OpenAI sends when it fails mid-stream) is :class:`ModelUnavailable`."""

    __slots__ = ("_calls", "_finished", "_model", "_texts", "_usage", "done")

    def __init__(self) -> None:
        self.done = False
        self._texts: list[str] = []
        # index -> [id, name, argument pieces]
        self._calls: dict[int, list[Any]] = {}
        self._usage: Mapping[str, Any] | None = None
        self._model = ""
        self._finished = False

    def feed(self, events: list[tuple[str, bytes]]) -> str:
        datas = []
        for _, data in events:
            if data == b"[DONE]":
                self.done = True
                break
            datas.append(data)
        if not datas:
            return ""
        payloads = orjson.loads(b"[" + b",".join(datas) + b"]") if len(datas) > 1 \
            else (orjson.loads(datas[0]),)
        texts = [self._payload(payload) for payload in payloads]
        return texts[0] if len(texts) == 1 else "".join(texts)

    def _payload(self, payload: Any) -> str:
        choices = payload.get("choices")
        usage = payload.get("usage")
        if usage:
            self._usage = usage
        if not self._model:
            self._model = str(payload.get("model") or "")
        if not choices:
            error = payload.get("error")
            if error:
                message = error.get("message") if isinstance(error, Mapping) else error
                raise ModelUnavailable(
                    f"the provider failed mid-stream: {str(message)[:300]}")
            return ""
        text = ""
        for choice in choices:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if len(delta) > 1 or content is None:
                for call in delta.get("tool_calls") or ():
                    self._call_delta(call)
            if choice.get("finish_reason"):
                self._finished = True
            if content:
                if not isinstance(content, str):
                    raise TypeError(f"delta content is {type(content).__name__}")
                self._texts.append(content)
                text += content
        return text

    def _call_delta(self, call: Mapping[str, Any]) -> None:
        index = int(call.get("index", len(self._calls)))
        slot = self._calls.get(index)
        if slot is None:
            slot = self._calls[index] = ["", "", []]
        if call.get("id"):
            slot[0] = str(call["id"])
        function = call.get("function") or {}
        # String fields accumulate, as the OpenAI SDK's own stream accumulator does.
        if function.get("name"):
            slot[1] += str(function["name"])
        arguments = function.get("arguments")
        if arguments:
            slot[2].append(_arguments_text(arguments))

    def reply(self, *, model: str, provider: str, account: str, latency_ms: float,
              rate_limits: RateLimitInfo | None) -> ModelReply:
        if self._usage is None:
            if self._finished:
                raise StreamWithoutUsage("the provider's stream reported no usage "
                                         "(stream_options.include_usage not honoured)")
            raise MalformedReply("the provider's stream carried no completion")
        calls = tuple(
            ModelToolCall(id=slot[0] or f"call_{position}", name=slot[1],
                          arguments="".join(slot[2]))
            for position, (_, slot) in enumerate(sorted(self._calls.items())))
        with reading_reply():
            usage = _usage(self._usage)
        return ModelReply(text="".join(self._texts), calls=calls, usage=usage,
                          provider=provider, account=account, model=model,
                          latency_ms=latency_ms, provider_model=self._model,
                          rate_limits=rate_limits)


def _arguments_text(value: object) -> str:
    # Providers send arguments as a JSON string; some send an object. Keep it as text.
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return orjson.dumps(value).decode()


class OpenAICompatible(HttpProviderClient):
    """``OpenAICompatible(base_url, *, api_key=None, account="default", timeout=120.0,
    max_connections=4096, stream=True)``."""

    # ``provider`` may be set per instance ("scripted" speaks this format); ``wire`` stays.
    provider = "openai"
    wire = "openai"
    completions_path = "/chat/completions"
    models_path = "/models"
    parse_reply = staticmethod(parse_completion)

    def _headers(self, api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": request.wire_model, "messages": list(request.messages)}
        if request.tools:
            body["tools"] = list(request.tools)
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        return body

    def _stream_fields(self) -> dict[str, Any]:
        return {"stream": True, "stream_options": {"include_usage": True}}

    def _stream_reader(self) -> StreamReader:
        return CompletionStream()
