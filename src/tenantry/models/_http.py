"""What the provider clients share: one pooled HTTP client per account (tenantry.http1),
timing, and mapping transport failures and non-2xx answers to the typed errors of
models/errors.py. A client adds its wire format: the request body and how to read a reply."""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import time
from collections.abc import Iterator
from typing import Any, ClassVar, Protocol

import orjson

from tenantry import http1
from tenantry.models.errors import MalformedReply, ModelUnavailable, error_for_status
from tenantry.models.ratelimits import parse_rate_limits
from tenantry.models.types import ModelReply, ModelRequest, RateLimitInfo

_JSON = (("Content-Type", "application/json"),)


@contextlib.contextmanager
def reading_reply() -> Iterator[None]:
    """Turn what reading a body of the wrong shape raises (not JSON, a missing key, a list
    where an object should be) into :class:`MalformedReply`."""
    try:
        yield
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, ValueError,
            AttributeError) as exc:
        raise MalformedReply(f"cannot read the provider's reply: {exc!r}"[:300]) from exc


class ReplyParser(Protocol):
    def __call__(
        self, raw: bytes, /, *, model: str, provider: str, account: str, latency_ms: float,
        rate_limits: RateLimitInfo | None,
    ) -> ModelReply: ...


class HttpProviderClient(abc.ABC):
    """One provider account over HTTP. Subclasses give their wire format: ``provider``,
    ``wire`` (whose rate-limit headers to read), the two paths, :meth:`_headers`,
    :meth:`_body`, and ``parse_reply`` (which raises :class:`MalformedReply` for a body it
    cannot read).

    ``max_connections`` bounds the connections open to the provider at once (one per call
    in flight); the pool takes the most recently released connection in O(1), so one pool
    serves an account however many calls are in flight (ADR 0022)."""

    provider: str
    wire: ClassVar[str]
    completions_path: ClassVar[str]
    models_path: ClassVar[str]
    parse_reply: ClassVar[ReplyParser]

    def __init__(
        self, base_url: str, *, api_key: str | None = None, account: str = "default",
        timeout: float = 120.0, max_connections: int = 4096,
    ) -> None:
        self.account = account
        self._timeout = timeout
        base = base_url.rstrip("/")
        self._completions = http1.target(base + self.completions_path)
        self._models = http1.target(base + self.models_path)
        self._http = http1.HttpClient(
            headers=self._headers(api_key), max_per_origin=max(1, max_connections),
            connect_timeout=min(timeout, 10.0))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def complete(self, request: ModelRequest) -> ModelReply:
        started = time.perf_counter()
        response = await self._send("POST", self._completions,
                                    orjson.dumps(self._body(request)))
        reply = self.parse_reply(
            response.content, model=request.model, provider=self.provider,
            account=self.account, latency_ms=(time.perf_counter() - started) * 1000,
            rate_limits=parse_rate_limits(self.wire, response.headers),
        )
        if response.connect_ms:
            # Opening the connection (TCP connect and TLS handshake; nothing on a pooled
            # one) is the gateway's set-up in the trace, not the provider's answer.
            reply = dataclasses.replace(reply, connect_ms=response.connect_ms)
        return reply

    async def probe(self) -> None:
        await self._send("GET", self._models, b"")

    @abc.abstractmethod
    def _headers(self, api_key: str | None) -> dict[str, str]:
        """Headers every request carries: the credential and any API version."""

    @abc.abstractmethod
    def _body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON request body for ``request``."""

    async def _send(self, method: str, where: http1.Target, body: bytes) -> http1.Response:
        try:
            response = await self._http.request(method, where, headers=_JSON if body else (),
                                                body=body, timeout=self._timeout)
        except http1.HttpError as exc:
            reason = exc.reason if exc.reason in ("timeout", "connect") else "network"
            raise ModelUnavailable(f"{type(exc).__name__}: {exc}", reason=reason) from exc
        if not response.ok:
            raise error_for_status(response.status, response.headers, response.text)
        return response
