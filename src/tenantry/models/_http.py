"""What the provider clients share: one pooled HTTP client per account (tenantry.http1),
timing, and mapping transport failures and non-2xx answers to the typed errors of
models/errors.py. A client adds its wire format: the request body, how to read a reply,
and how to read the same reply streamed.

Streaming (ADR 0030): a call whose ``request.deltas`` is live (somebody watches the run)
asks for the provider's event stream — if the account streams (``stream``, the default) —
tells the sink the text as it arrives, and assembles from the stream the very
:class:`ModelReply` the whole answer would have given (text, tool calls, the provider's
usage, model, rate limits). Any other call asks for the whole answer: reading a stream
costs the worker a wake-up and a parse per token, for nobody. A stream that stops before
its end (the connection cut, the server gone) is a failed call like any other — nothing
partial is returned; a provider that answers a stream request with a whole JSON body is
read as one."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator
from typing import Any, ClassVar, Protocol

import orjson

from tenantry import http1
from tenantry.models.errors import MalformedReply, ModelUnavailable, error_for_status
from tenantry.models.ratelimits import parse_rate_limits
from tenantry.models.types import ModelReply, ModelRequest, RateLimitInfo

logger = logging.getLogger(__name__)

_JSON = (("Content-Type", "application/json"),)
# A stream read to its end marker leaves the chunked body's last bytes (the terminating
# chunk) to arrive: read for up to this long in the background so the connection is reused.
_DRAIN_SECONDS = 2.0
# The largest one server-sent event of a provider's stream may be (one chunk of text or
# of a tool call's arguments is a few bytes; this bounds a server streaming garbage).
_MAX_EVENT = 4 * 1024 * 1024


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


class StreamReader(Protocol):
    """One streamed reply being read: fed the stream's events in order, as many at a time
    as arrived together, it returns the text they add, and says when the stream's end
    marker came (``done``; events after it are not read)."""

    done: bool

    def feed(self, events: list[tuple[str, bytes]]) -> str:
        """The reply text ``events`` (``(event name, data)``, :class:`http1.SseData`'s)
        add, "" for none. Raises :class:`~tenantry.models.errors.ModelError` for an error
        event, and what :func:`reading_reply` turns into :class:`MalformedReply` for an
        unreadable one."""
        ...

    def reply(self, *, model: str, provider: str, account: str, latency_ms: float,
              rate_limits: RateLimitInfo | None) -> ModelReply:
        """The whole reply, once ``done``; :class:`MalformedReply` if the stream did not
        carry one (no usage, no content)."""
        ...


class StreamWithoutUsage(MalformedReply):
    """A stream that ended normally but never reported its usage: the provider does not
    honour the request for it (an OpenAI-compatible server ignoring ``stream_options``).
    Billing needs the provider's count, so the reply is refused and the client stops
    streaming (the gateway's retry then asks for the whole answer)."""


class HttpProviderClient(abc.ABC):
    """One provider account over HTTP. Subclasses give their wire format: ``provider``,
    ``wire`` (whose rate-limit headers to read), the two paths, :meth:`_headers`,
    :meth:`_body`, ``parse_reply`` (which raises :class:`MalformedReply` for a body it
    cannot read), and for streaming :meth:`_stream_fields` and :meth:`_stream_reader`.

    ``stream`` (default True): ask for the provider's event stream when a call is watched
    (see the module docstring); False: always ask for the whole answer (an account whose
    provider cannot stream, or cannot report usage in a stream: ``TENANTRY_MODEL_NO_STREAM``).

    ``max_connections`` bounds the connections open to the provider at once (one per call
    in flight); the pool takes the most recently released connection in O(1), so one pool
    serves an account however many calls are in flight (ADR 0022).

    ``connect_to``: where the client may connect, vetted per connection (a tenant's own
    registration: tools/destinations.py, wired in by models/clients.py); None: anywhere."""

    provider: str
    wire: ClassVar[str]
    completions_path: ClassVar[str]
    models_path: ClassVar[str]
    parse_reply: ClassVar[ReplyParser]

    def __init__(
        self, base_url: str, *, api_key: str | None = None, account: str = "default",
        timeout: float = 120.0, max_connections: int = 4096, stream: bool = True,
        connect_to: http1.ConnectTo | None = None,
    ) -> None:
        self.account = account
        self.stream = stream
        self._timeout = timeout
        base = base_url.rstrip("/")
        self._completions = http1.target(base + self.completions_path)
        self._models = http1.target(base + self.models_path)
        self._http = http1.HttpClient(
            headers=self._headers(api_key), max_per_origin=max(1, max_connections),
            connect_timeout=min(timeout, 10.0), connect_to=connect_to)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def complete(self, request: ModelRequest) -> ModelReply:
        if self.stream and request.deltas is not None and request.deltas.live:
            return await self._complete_streamed(request)
        started = time.perf_counter()
        response = await self._send("POST", self._completions,
                                    orjson.dumps(self._body(request)))
        reply = self.parse_reply(
            response.content, model=request.model, provider=self.provider,
            account=self.account, latency_ms=(time.perf_counter() - started) * 1000,
            rate_limits=parse_rate_limits(self.wire, response.headers),
        )
        return _with_connect(reply, response.connect_ms)

    async def _complete_streamed(self, request: ModelRequest) -> ModelReply:
        started = time.perf_counter()
        body = self._body(request)
        body.update(self._stream_fields())
        try:
            async with asyncio.timeout(self._timeout), self._http.stream(
                    "POST", self._completions, headers=_JSON, body=orjson.dumps(body),
                    timeout=None, drain=_DRAIN_SECONDS) as response:
                # An error answer is read whole and raised once out of the block, so its
                # connection goes back to the pool.
                answer = await self._answer(response, request, started)
        except TimeoutError:
            raise ModelUnavailable(f"no complete answer within {self._timeout:g}s",
                                   reason="timeout") from None
        except http1.HttpError as exc:
            raise _unavailable(exc) from exc
        if isinstance(answer, Exception):
            raise answer
        return _with_connect(answer, response.connect_ms)

    async def _answer(self, response: http1.StreamedResponse, request: ModelRequest,
                      started: float) -> ModelReply | Exception:
        if not response.ok:
            content = await response.read()
            return error_for_status(response.status, response.headers,
                                    content.decode("utf-8", "replace"))
        rate_limits = parse_rate_limits(self.wire, response.headers)
        if response.content_type != "text/event-stream":
            # It answered whole (a server that ignores `stream`): read it as such.
            content = await response.read()
            return self.parse_reply(content, model=request.model, provider=self.provider,
                                    account=self.account,
                                    latency_ms=(time.perf_counter() - started) * 1000,
                                    rate_limits=rate_limits)
        reader = await self._read_stream(response, request)
        try:
            return reader.reply(model=request.model, provider=self.provider,
                                account=self.account,
                                latency_ms=(time.perf_counter() - started) * 1000,
                                rate_limits=rate_limits)
        except StreamWithoutUsage as exc:
            self.stream = False
            logger.warning("model provider streams without reporting usage: calling it "
                           "without streaming from now on (list the account in "
                           "TENANTRY_MODEL_NO_STREAM to skip this)",
                           extra={"account": self.account})
            return exc

    async def _read_stream(self, response: http1.StreamedResponse,
                           request: ModelRequest) -> StreamReader:
        """Read the event stream to its end marker, telling ``request.deltas`` its text."""
        reader = self._stream_reader()
        parser = http1.SseData(max_event=_MAX_EVENT)
        sink = request.deltas
        if sink is not None:
            sink.restart()
        with reading_reply():
            async for chunk in response.chunks():
                events = parser.feed(chunk)
                if events:
                    # What arrived together is read together (one JSON parse for all).
                    text = reader.feed(events)
                    if text and sink is not None:
                        sink.text(text)
                    if reader.done:
                        break
        if not reader.done:
            raise ModelUnavailable("the provider's stream ended before its end",
                                   reason="network")
        return reader

    async def probe(self) -> None:
        await self._send("GET", self._models, b"")

    @abc.abstractmethod
    def _headers(self, api_key: str | None) -> dict[str, str]:
        """Headers every request carries: the credential and any API version."""

    @abc.abstractmethod
    def _body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON request body for ``request``."""

    @abc.abstractmethod
    def _stream_fields(self) -> dict[str, Any]:
        """What the body adds to ask for the reply as an event stream, with its usage."""

    @abc.abstractmethod
    def _stream_reader(self) -> StreamReader:
        """A reader for one streamed reply."""

    async def _send(self, method: str, where: http1.Target, body: bytes) -> http1.Response:
        try:
            response = await self._http.request(method, where, headers=_JSON if body else (),
                                                body=body, timeout=self._timeout)
        except http1.HttpError as exc:
            raise _unavailable(exc) from exc
        if not response.ok:
            raise error_for_status(response.status, response.headers, response.text)
        return response


def _unavailable(exc: http1.HttpError) -> ModelUnavailable:
    reason = exc.reason if exc.reason in ("timeout", "connect") else "network"
    return ModelUnavailable(f"{type(exc).__name__}: {exc}", reason=reason)


def _with_connect(reply: ModelReply, connect_ms: float) -> ModelReply:
    if connect_ms:
        # Opening the connection (TCP connect and TLS handshake; nothing on a pooled
        # one) is the gateway's set-up in the trace, not the provider's answer.
        return dataclasses.replace(reply, connect_ms=connect_ms)
    return reply
