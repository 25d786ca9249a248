"""What the provider clients share: pooled HTTP clients per account, timing, and mapping
transport failures and non-2xx answers to the typed errors of models/errors.py. A client
adds its wire format: the request body and how to read a reply."""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import functools
import time
import zlib
from collections.abc import Iterator
from typing import Any, ClassVar, Protocol

import anyio
import httpx2
import orjson

from tenantry import tls
from tenantry.models.errors import MalformedReply, ModelUnavailable, error_for_status
from tenantry.models.ratelimits import parse_rate_limits
from tenantry.models.types import ModelReply, ModelRequest, RateLimitInfo


@contextlib.contextmanager
def reading_reply() -> Iterator[None]:
    """Turn what reading a body of the wrong shape raises (not JSON, a missing key, a list
    where an object should be) into :class:`MalformedReply`."""
    try:
        yield
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, ValueError,
            AttributeError) as exc:
        raise MalformedReply(f"cannot read the provider's reply: {exc!r}"[:300]) from exc


@functools.cache
def load_async_backend() -> None:
    """Load what the HTTP client's connection pool loads on its first request of the process
    (anyio's asyncio backend, on creating its first event): ~14 ms of a process's first
    model call otherwise, counted as the provider's time. Call it in the running loop."""
    anyio.Event()


class _ConnectTimer:
    """The HTTP transport's trace hook: the time one request spent opening its connection
    (TCP connect and TLS handshake; nothing on a pooled one), so the trace can count it as
    the gateway's set-up rather than the provider's answer."""

    __slots__ = ("_since", "ms")

    _OPENING = frozenset({"connection.connect_tcp.started", "connection.start_tls.started"})
    _OPENED = frozenset({"connection.connect_tcp.complete", "connection.connect_tcp.failed",
                         "connection.start_tls.complete", "connection.start_tls.failed"})

    def __init__(self) -> None:
        self._since = 0.0
        self.ms = 0.0

    async def __call__(self, name: str, info: dict[str, Any]) -> None:
        if name in self._OPENING:
            self._since = time.perf_counter()
        elif name in self._OPENED and self._since:
            self.ms += (time.perf_counter() - self._since) * 1000
            self._since = 0.0


class ReplyParser(Protocol):
    def __call__(
        self, raw: bytes, /, *, model: str, provider: str, account: str, latency_ms: float,
        rate_limits: RateLimitInfo | None,
    ) -> ModelReply: ...


class HttpProviderClient(abc.ABC):
    """One provider account over HTTP. Subclasses give their wire format: ``provider``,
    ``wire`` (whose rate-limit headers to read), the two paths, :meth:`_headers`,
    :meth:`_body`, and ``parse_reply`` (which raises :class:`MalformedReply` for a body it
    cannot read)."""

    provider: str
    wire: ClassVar[str]
    completions_path: ClassVar[str]
    models_path: ClassVar[str]
    parse_reply: ClassVar[ReplyParser]

    def __init__(
        self, base_url: str, *, api_key: str | None = None, account: str = "default",
        timeout: float = 120.0, max_connections: int = 4096, shards: int = 32,
    ) -> None:
        self.account = account
        # Several small connection pools instead of one big one: the HTTP client's pool
        # scans all of its connections on every request, which at 2,000 runs in flight
        # was most of the worker's CPU (see docs/BENCHMARKS.md). A run always uses the
        # same shard, which also keeps its connection (and a provider's cache) warm.
        per_shard = max(1, max_connections // shards)
        self._shards = [
            httpx2.AsyncClient(
                base_url=base_url.rstrip("/"),
                headers=self._headers(api_key), verify=tls.client_context(),
                timeout=httpx2.Timeout(timeout, connect=min(timeout, 10.0)),
                limits=httpx2.Limits(max_connections=per_shard,
                                     max_keepalive_connections=per_shard),
            )
            for _ in range(max(1, shards))
        ]

    async def aclose(self) -> None:
        for client in self._shards:
            await client.aclose()

    async def complete(self, request: ModelRequest) -> ModelReply:
        started = time.perf_counter()
        connecting = _ConnectTimer()
        response = await self._send(
            "POST", self.completions_path, request.run_key,
            content=orjson.dumps(self._body(request)),
            headers={"Content-Type": "application/json"},
            extensions={"trace": connecting},
        )
        reply = self.parse_reply(
            response.content, model=request.model, provider=self.provider,
            account=self.account, latency_ms=(time.perf_counter() - started) * 1000,
            rate_limits=parse_rate_limits(self.wire, response.headers),
        )
        if connecting.ms:
            reply = dataclasses.replace(reply, connect_ms=connecting.ms)
        return reply

    async def probe(self) -> None:
        await self._send("GET", self.models_path, "")

    @abc.abstractmethod
    def _headers(self, api_key: str | None) -> dict[str, str]:
        """Headers every request carries: the credential and any API version."""

    @abc.abstractmethod
    def _body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON request body for ``request``."""

    async def _send(
        self, method: str, path: str, run_key: str, **kwargs: Any
    ) -> httpx2.Response:
        client = self._shards[zlib.crc32(run_key.encode()) % len(self._shards)]
        try:
            response = await client.request(method, path, **kwargs)
        except httpx2.HTTPError as exc:
            reason = ("timeout" if isinstance(exc, httpx2.TimeoutException)
                      else "connect" if isinstance(exc, httpx2.ConnectError) else "network")
            raise ModelUnavailable(f"{type(exc).__name__}: {exc}", reason=reason) from exc
        if not response.is_success:
            raise error_for_status(response.status_code, response.headers, response.text)
        return response
