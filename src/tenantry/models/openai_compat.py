"""OpenAI-compatible chat completions over HTTP (OpenAI, vLLM, Ollama, the fake server).

One pooled httpx2 client per provider account (models/_http.py); errors are the typed ones
of models/errors.py. ``base_url`` includes the API version (``https://api.openai.com/v1``),
as the OpenAI SDK takes it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from tenantry.ledger.tokens import TokenUsage
from tenantry.models._http import HttpProviderClient, reading_reply
from tenantry.models.types import (
    ModelReply,
    ModelRequest,
    ModelToolCall,
    RateLimitInfo,
)

__all__ = ["OpenAICompatible", "parse_completion"]


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
        usage: Mapping[str, Any] = payload.get("usage") or {}
        details: Mapping[str, Any] = usage.get("prompt_tokens_details") or {}
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
            usage=TokenUsage(
                input_tokens=int(usage.get("prompt_tokens") or 0),
                output_tokens=int(usage.get("completion_tokens") or 0),
                cached_input_tokens=int(details.get("cached_tokens") or 0),
            ),
            provider=provider,
            account=account,
            model=model,
            latency_ms=latency_ms,
            provider_model=str(payload.get("model") or ""),
            rate_limits=rate_limits,
        )


def _arguments_text(value: object) -> str:
    # Providers send arguments as a JSON string; some send an object. Keep it as text.
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return orjson.dumps(value).decode()


class OpenAICompatible(HttpProviderClient):
    """``OpenAICompatible(base_url, *, api_key=None, account="default", timeout=120.0,
    max_connections=4096)``."""

    # ``provider`` may be set per instance ("scripted" speaks this format); ``wire`` stays.
    provider = "openai"
    wire = "openai"
    completions_path = "/chat/completions"
    models_path = "/models"
    parse_reply = staticmethod(parse_completion)

    def _headers(self, api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": request.model, "messages": list(request.messages)}
        if request.tools:
            body["tools"] = list(request.tools)
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        return body
