"""OpenAI-compatible chat completions over HTTP (OpenAI, vLLM, Ollama, the fake server).

One pooled httpx2 client per provider account. Errors are typed: retryable ones (network,
429, 5xx, a body that is not JSON) are :class:`ModelUnavailable`; a request the provider
refuses (4xx) is :class:`ModelRefused`."""

from __future__ import annotations

import time
import zlib
from typing import Any

import httpx2
import orjson

from tenantry.errors import TenantryError
from tenantry.models.types import ModelReply, ModelRequest, ModelToolCall, TokenUsage


class ModelUnavailable(TenantryError):
    type = "model_unavailable"
    status = 503
    title = "Model provider unavailable"
    retryable = True


class ModelRefused(TenantryError):
    type = "model_refused"
    status = 502
    title = "Model provider refused the request"


class MalformedReply(ModelUnavailable):
    """The provider answered, but not with a chat completion we can read."""

    type = "model_malformed_reply"
    title = "Model provider sent a malformed reply"


class OpenAICompatible:
    provider = "openai"

    def __init__(
        self, base_url: str, *, api_key: str | None = None, account: str = "default",
        timeout: float = 120.0, max_connections: int = 4096, shards: int = 32,
    ) -> None:
        self.account = account
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # Several small connection pools instead of one big one: the HTTP client's pool
        # scans all of its connections on every request, which at 2,000 runs in flight
        # was most of the worker's CPU (see docs/BENCHMARKS.md). A run always uses the
        # same shard, which also keeps its connection (and a provider's cache) warm.
        per_shard = max(1, max_connections // shards)
        self._shards = [
            httpx2.AsyncClient(
                base_url=base_url.rstrip("/"),
                headers=headers,
                timeout=httpx2.Timeout(timeout, connect=10.0),
                limits=httpx2.Limits(max_connections=per_shard,
                                     max_keepalive_connections=per_shard),
            )
            for _ in range(max(1, shards))
        ]

    async def aclose(self) -> None:
        for client in self._shards:
            await client.aclose()

    def _client_for(self, run_key: str) -> httpx2.AsyncClient:
        return self._shards[zlib.crc32(run_key.encode()) % len(self._shards)]

    async def complete(self, request: ModelRequest) -> ModelReply:
        body: dict[str, Any] = {"model": request.model, "messages": list(request.messages)}
        if request.tools:
            body["tools"] = list(request.tools)
        started = time.perf_counter()
        try:
            response = await self._client_for(request.run_key).post(
                "/chat/completions", content=orjson.dumps(body),
                headers={"Content-Type": "application/json"},
            )
        except httpx2.HTTPError as exc:
            raise ModelUnavailable(f"{type(exc).__name__}: {exc}") from exc
        latency_ms = (time.perf_counter() - started) * 1000
        if response.status_code == 429 or response.status_code >= 500:
            retry_after = response.headers.get("retry-after")
            raise ModelUnavailable(
                f"provider answered {response.status_code}",
                http_status=response.status_code, retry_after=retry_after,
            )
        if response.status_code >= 400:
            raise ModelRefused(f"provider answered {response.status_code}: "
                               f"{response.text[:500]}", http_status=response.status_code)
        return parse_completion(response.content, self.provider, self.account, latency_ms)


def parse_completion(raw: bytes, provider: str, account: str, latency_ms: float) -> ModelReply:
    try:
        payload = orjson.loads(raw)
        choice = payload["choices"][0]
        message = choice["message"]
        usage = payload.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        calls = tuple(
            ModelToolCall(
                id=str(call.get("id") or f"call_{index}"),
                name=str((call.get("function") or {}).get("name") or ""),
                arguments=_arguments_text((call.get("function") or {}).get("arguments")),
            )
            for index, call in enumerate(message.get("tool_calls") or ())
        )
        return ModelReply(
            text=message.get("content") or "",
            calls=calls,
            usage=TokenUsage(
                input_tokens=int(usage.get("prompt_tokens") or 0),
                output_tokens=int(usage.get("completion_tokens") or 0),
                cached_input_tokens=int(details.get("cached_tokens") or 0),
            ),
            provider=provider,
            account=account,
            model=str(payload.get("model") or ""),
            latency_ms=latency_ms,
        )
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, ValueError,
            AttributeError) as exc:
        raise MalformedReply(f"cannot read the provider's reply: {exc!r}"[:300]) from exc


def _arguments_text(value: object) -> str:
    # Providers send arguments as a JSON string; some send an object. Keep it as text.
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return orjson.dumps(value).decode()
