"""Sending one call: attempts under the retry rules (``_retry``), answers read into typed
values, error answers raised as typed exceptions (``errors``). One class for each kind of
httpx2 client, the same steps in both."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from typing import Any, TypeVar

import httpx2
import orjson

from tenantry import __version__
from tenantry.client._calls import NO_BODY, Call
from tenantry.client._retry import Attempts, OnRetry, RetryPolicy
from tenantry.client.errors import ConfigError, ConnectionFailed, error_for

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT = 30.0
#: A stream waits this long (at least) for its next bytes: the platform sends a keepalive
#: comment every 15 s, so a silent minute-and-a-half means the connection is gone.
STREAM_READ_TIMEOUT = 45.0
USER_AGENT = f"tenantry-client/{__version__}"


def settings(base_url: str | None, api_key: str | None) -> tuple[str, str]:
    """The base URL and key: as given, else ``TENANTRY_URL`` / ``TENANTRY_API_KEY``."""
    url = base_url or os.environ.get("TENANTRY_URL") or DEFAULT_URL
    key = api_key or os.environ.get("TENANTRY_API_KEY")
    if not key:
        raise ConfigError("a tenant API key is needed: api_key=... or TENANTRY_API_KEY")
    return url.rstrip("/"), key


def _stream_timeout(timeout: float | None) -> httpx2.Timeout:
    if timeout is None:
        return httpx2.Timeout(None)
    return httpx2.Timeout(timeout, read=max(timeout, STREAM_READ_TIMEOUT))


def _request(http: httpx2.Client | httpx2.AsyncClient, call: Call[Any]) -> httpx2.Request:
    args: dict[str, Any] = {"params": call.params, "headers": call.headers}
    if call.body is not NO_BODY:
        args["content"] = orjson.dumps(call.body)
        args["headers"] = {**(call.headers or {}), "Content-Type": "application/json"}
    return http.build_request(call.method, call.path, **args)


def _stream_request(http: httpx2.Client | httpx2.AsyncClient, timeout: float | None, path: str,
                    headers: dict[str, str]) -> httpx2.Request:
    return http.build_request("GET", path, headers=headers, timeout=_stream_timeout(timeout))


def _parsed(call: Call[T], response: httpx2.Response) -> T:
    if call.raw:
        return call.parse(response.content)
    return call.parse(orjson.loads(response.content) if response.content else None)


def _success(response: httpx2.Response) -> bool:
    return response.is_success


def _open(response: httpx2.Response) -> bool:
    """A stream is followed only when it opens with a 200."""
    return response.status_code == 200


def _failed(what: str, error: Exception) -> ConnectionFailed:
    return ConnectionFailed(f"{what}: {type(error).__name__}: {error}")


def _wait_after_error(attempts: Attempts, what: str, error: Exception) -> float:
    """The pause before the next attempt after no answer; ConnectionFailed when the
    attempts are spent."""
    wait = attempts.after_error(error)
    if wait is None:
        raise _failed(what, error) from error
    attempts.retrying(f"{what}: {type(error).__name__}: {error}")
    return wait


def _wait_after_answer(attempts: Attempts, response: httpx2.Response) -> float:
    """The pause before the next attempt after an error answer (its body read); the
    answer's typed exception when it is not retried."""
    error = error_for(response.status_code, response.headers, response.content)
    wait = attempts.after_answer(error)
    if wait is None:
        raise error
    attempts.retrying(f"the platform answered {error.status} ({error.detail})")
    return wait


class _Transport:
    """What both transports hold: where they send, the retry rules, the timeout."""

    def __init__(self, base_url: str, api_key: str, timeout: float | None,
                 policy: RetryPolicy) -> None:
        #: Told of each retry (``Retrying``): the CLI says why it waits.
        self.on_retry: OnRetry | None = None
        self.base_url = base_url
        self.policy = policy
        self.timeout = timeout
        self.client_options: dict[str, Any] = {
            "base_url": base_url, "timeout": timeout,
            "headers": {"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT}}


class SyncTransport(_Transport):
    def __init__(self, base_url: str, api_key: str, *, timeout: float | None,
                 policy: RetryPolicy, transport: httpx2.BaseTransport | None = None) -> None:
        super().__init__(base_url, api_key, timeout, policy)
        self.http = httpx2.Client(transport=transport, **self.client_options)

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(seconds)

    def close(self) -> None:
        self.http.close()

    def _send(self, what: str, request: Callable[[], httpx2.Request], idempotent: bool, *,
              stream: bool = False,
              ok: Callable[[httpx2.Response], bool] = _success) -> httpx2.Response:
        """The first answer ``ok`` takes to ``request()`` (built anew for each attempt), in
        the attempts the retry rules allow; an answer it refuses is read and closed, then
        raised or tried again. ``what`` names the request in a ConnectionFailed."""
        attempts = Attempts(self.policy, idempotent=idempotent, on_retry=self.on_retry)
        while True:
            try:
                response = self.http.send(request(), stream=stream)
            except httpx2.TransportError as exc:
                wait = _wait_after_error(attempts, what, exc)
            else:
                if ok(response):
                    return response
                try:
                    response.read()
                finally:
                    response.close()
                wait = _wait_after_answer(attempts, response)
            self.sleep(wait)

    def call(self, call: Call[T]) -> T:
        request = partial(_request, self.http, call)
        return _parsed(call, self._send(f"{call.method} {call.path}", request, call.idempotent))

    @contextmanager
    def stream(self, path: str, headers: dict[str, str]) -> Iterator[httpx2.Response]:
        """An open 200 streaming answer (the open is retried like any GET)."""
        request = partial(_stream_request, self.http, self.timeout, path, headers)
        response = self._send(f"GET {path}", request, True, stream=True, ok=_open)
        try:
            yield response
        finally:
            response.close()


class SyncResource:
    """A group of the blocking client's calls (``client.runs``, ``client.users``…): each
    sends its call through the client's transport."""

    def __init__(self, transport: SyncTransport) -> None:
        self._t = transport


class AsyncTransport(_Transport):
    def __init__(self, base_url: str, api_key: str, *, timeout: float | None,
                 policy: RetryPolicy, transport: httpx2.AsyncBaseTransport | None = None) -> None:
        super().__init__(base_url, api_key, timeout, policy)
        self.http = httpx2.AsyncClient(transport=transport, **self.client_options)

    @staticmethod
    async def sleep(seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def close(self) -> None:
        await self.http.aclose()

    async def _send(self, what: str, request: Callable[[], httpx2.Request], idempotent: bool,
                    *, stream: bool = False,
                    ok: Callable[[httpx2.Response], bool] = _success) -> httpx2.Response:
        attempts = Attempts(self.policy, idempotent=idempotent, on_retry=self.on_retry)
        while True:
            try:
                response = await self.http.send(request(), stream=stream)
            except httpx2.TransportError as exc:
                wait = _wait_after_error(attempts, what, exc)
            else:
                if ok(response):
                    return response
                try:
                    await response.aread()
                finally:
                    await response.aclose()
                wait = _wait_after_answer(attempts, response)
            await self.sleep(wait)

    async def call(self, call: Call[T]) -> T:
        request = partial(_request, self.http, call)
        return _parsed(call, await self._send(f"{call.method} {call.path}", request,
                                              call.idempotent))

    @asynccontextmanager
    async def stream(self, path: str, headers: dict[str, str]) -> AsyncIterator[httpx2.Response]:
        request = partial(_stream_request, self.http, self.timeout, path, headers)
        response = await self._send(f"GET {path}", request, True, stream=True, ok=_open)
        try:
            yield response
        finally:
            await response.aclose()


class AsyncResource:
    """:class:`SyncResource` for the asyncio client."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport
