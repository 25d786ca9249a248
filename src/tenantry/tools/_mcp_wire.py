"""MCP's streamable HTTP transport as the client side of one session: JSON-RPC 2.0 messages
POSTed to the server's endpoint, answered with ``application/json`` or a
``text/event-stream`` that may carry the server's notifications and requests before the
answer. Both protocol generations the official SDK speaks:

- 2026-07-28 (``server/discover``): every request carries the protocol version, client info
  and capabilities in ``_meta`` and the ``Mcp-Protocol-Version``/``Mcp-Method``/``Mcp-Name``
  headers (plus ``Mcp-Param-*`` for arguments a tool's schema marks ``x-mcp-header``);
  no session, no notification stream.
- 2025-11-25 and older (``initialize`` + ``notifications/initialized``): the server may give
  an ``Mcp-Session-Id`` that every later request carries; a 404 to such a request means the
  server forgot the session. A GET opens the stream of what the server sends unprompted
  (``notifications/tools/list_changed``).

Which generation a session speaks is negotiated in ``_mcp_negotiation.py``. A legacy
call's answer may come on any stream of its session: on its own event stream, on the
notification stream, or (SEP-1699) on a GET resuming its stream after the server ended it
at an event id. Only what the protocol needs is validated: messages are read with orjson into plain
dicts and their few fields checked where they are used.

A tool server is a host its tenant controls, and one worker serves every tenant: what one
exchange may carry is bounded (:data:`MAX_ANSWER_BYTES`, :data:`MAX_MESSAGES_PER_EXCHANGE`,
:data:`MAX_SERVER_REQUESTS_PER_EXCHANGE`, JSON no denser than ``jsonutil`` allows), and so are
the replies to a session's server requests in flight and what its notification stream may
send. A server past a bound gets no more of the worker's time: the exchange ends as
:class:`BadMessage` (a tool error the model reads, never retried), the stream is dropped.

The protocol's constants, errors and bounds, and its header and URL rules, are in
``_mcp_messages.py``; the names its callers use are importable from here too.

A session keeps no credential: the caller passes its ``credentials`` (headers, e.g. a bearer
token opened from the vault for this call) to each request, and they live as long as that
request and its replies to the server do."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, NamedTuple

import orjson

from tenantry import http1
from tenantry.errors import ToolUnavailable
from tenantry.jsonutil import JsonTooDense, loads_untrusted
from tenantry.tools._mcp_messages import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO,
    CLIENT_INFO_META_KEY,
    DISCOVER_TIMEOUT_S,
    HANDSHAKE_VERSIONS,
    INVALID_REQUEST,
    LATEST_HANDSHAKE_VERSION,
    LATEST_MODERN_VERSION,
    MAX_ANSWER_BYTES,
    MAX_LISTEN_MESSAGES,
    MAX_LISTEN_OPENS,
    MAX_MESSAGES_PER_EXCHANGE,
    MAX_REPLIES_IN_FLIGHT,
    MAX_RESUMES,
    MAX_SERVER_REQUESTS_PER_EXCHANGE,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    PROTOCOL_VERSION_META_KEY,
    Allowance,
    BadMessage,
    Headers,
    RpcError,
    SessionExpired,
    Unauthorized,
    encode_header_value,
    listed_tools,
    param_headers,
    rpc_code,
    safe_url,
)

log = logging.getLogger("tenantry.tools.mcp_client")

_SESSION_HEADER = "Mcp-Session-Id"
_ACCEPT: Headers = (("Accept", "application/json, text/event-stream"),
                    ("Content-Type", "application/json"))
_DRAIN_S = 5.0  # how long a finished answer's stream may take to end before its socket goes
#: Resuming a call's stream (SEP-1699): the wait when the server set no ``retry``, and the
#: longest ``retry`` honoured (the call's deadline bounds them all).
_RESUME_DEFAULT_S = 1.0
_RESUME_MAX_S = 10.0
#: How long a new legacy session waits for its notification stream to open before its first
#: call is sent (a server may send a call's requests there, not on the call's stream).
_LISTEN_OPEN_S = 2.0


class _Ended(NamedTuple):
    """A call's event stream ended before its answer, after the event ``last_id``."""

    last_id: str
    retry_ms: int | None


class Session:
    """One negotiated MCP session. Subclasses handle ``on_notification``."""

    def __init__(self, url: str, http: http1.HttpClient,
                 listen_http: http1.HttpClient) -> None:
        self.url = url
        self.dead = False
        self.protocol_version: str | None = None
        self.session_id: str | None = None
        self._target = http1.target(url)
        self._http = http
        self._listen_http = listen_http
        self._base: Headers = _ACCEPT
        self._meta: dict[str, Any] | None = None  # the modern _meta stamp
        self._next_id = 1
        self._param_headers: dict[str, dict[tuple[str, ...], str]] = {}
        self._listener: asyncio.Task[None] | None = None
        #: Set once the notification stream's answer has come (or it could not be opened).
        self._listening: asyncio.Future[None] | None = None
        #: Legacy sessions: our requests awaiting an answer, which may come on any stream.
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._listens = 0
        self._heard = Allowance(MAX_LISTEN_MESSAGES, MAX_LISTEN_MESSAGES,
                                 "notification stream")
        self._background: set[asyncio.Task[None]] = set()

    def on_notification(self, method: str, params: Any) -> None:
        """A notification from the server (on any stream)."""

    @property
    def modern(self) -> bool:
        return self._meta is not None

    # ------------------------------------------------------------------ negotiation

    async def probe(self, deadline: float, credentials: Headers) -> dict[str, Any]:
        meta = {PROTOCOL_VERSION_META_KEY: LATEST_MODERN_VERSION,
                CLIENT_INFO_META_KEY: CLIENT_INFO, CLIENT_CAPABILITIES_META_KEY: {}}
        headers = (*self._base, *credentials, ("Mcp-Protocol-Version", LATEST_MODERN_VERSION),
                   ("Mcp-Method", "server/discover"))
        probe_deadline = min(deadline, time.monotonic() + DISCOVER_TIMEOUT_S)
        return await self._exchange("server/discover", {"_meta": meta}, headers,
                                    probe_deadline, credentials)

    async def initialize(self, deadline: float, credentials: Headers) -> None:
        params = {"protocolVersion": LATEST_HANDSHAKE_VERSION, "capabilities": {},
                  "clientInfo": CLIENT_INFO}
        result = await self._exchange("initialize", params, self._base + credentials,
                                      deadline, credentials)
        version = result.get("protocolVersion")
        if version not in HANDSHAKE_VERSIONS:
            raise self.unavailable(f"unsupported protocol version {str(version)[:40]!r}",
                                   reason="protocol")
        self.protocol_version = str(version)
        self._meta = None
        self._base = self._session_headers()
        status = await self._post_one_way({"jsonrpc": "2.0",
                                           "method": "notifications/initialized"}, deadline,
                                          credentials)
        if status >= 400:
            raise self.unavailable(f"notifications/initialized refused (HTTP {status})",
                                   reason="protocol")

    def adopt_modern(self, version: str) -> None:
        self.protocol_version = version
        self.session_id = None
        self._meta = {PROTOCOL_VERSION_META_KEY: version, CLIENT_INFO_META_KEY: CLIENT_INFO,
                      CLIENT_CAPABILITIES_META_KEY: {}}
        self._base = (*_ACCEPT, ("Mcp-Protocol-Version", version))

    def _session_headers(self) -> Headers:
        base: Headers = _ACCEPT
        if self.protocol_version is not None:
            base += (("Mcp-Protocol-Version", self.protocol_version),)
        if self.session_id is not None:
            base += ((_SESSION_HEADER, self.session_id),)
        return base

    # ------------------------------------------------------------------ requests

    async def request(self, method: str, params: dict[str, Any], deadline: float,
                      extra: Headers, credentials: Headers = ()) -> dict[str, Any]:
        """Send one request on the negotiated session; its result. Raises :class:`RpcError`
        for an error answer, :class:`SessionExpired`, ``TimeoutError`` past ``deadline``,
        and ToolUnavailable for transport failures."""
        if self.dead:
            raise self.unavailable("connection closed", reason="connection")
        headers = self._base + credentials + extra
        if self._meta is not None:
            meta = params.get("_meta")
            params = {**params, "_meta": {**meta, **self._meta} if meta else self._meta}
            headers += (("Mcp-Method", method),)
            if method == "tools/call":
                name = params["name"]
                headers += (("Mcp-Name", encode_header_value(name)),)
                header_map = self._param_headers.get(name)
                if header_map:
                    headers += tuple(param_headers(header_map, params["arguments"]))
        return await self._exchange(method, params, headers, deadline, credentials)

    async def _exchange(self, method: str, params: dict[str, Any], headers: Headers,
                        deadline: float, credentials: Headers) -> dict[str, Any]:
        rid = self._next_id
        self._next_id += 1
        body = orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        allowance = Allowance(MAX_MESSAGES_PER_EXCHANGE, MAX_SERVER_REQUESTS_PER_EXCHANGE,
                               "call")
        pending = None
        if self._meta is None:  # legacy: the answer may come on the notification stream
            pending = self._pending[rid] = asyncio.get_running_loop().create_future()
            pending.add_done_callback(_retrieve)
        try:
            async with asyncio.timeout(remaining):
                async with self._http.stream("POST", self._target, headers=headers, body=body,
                                             timeout=None, drain=_DRAIN_S) as response:
                    outcome = await self._answer(response, rid, method, credentials,
                                                 allowance, pending)
                if isinstance(outcome, _Ended):
                    return await self._resume(rid, outcome, allowance, credentials, pending)
                return outcome
        except http1.ConnectFailed as exc:
            self.dead = True  # the server is down or moved: negotiate afresh next time
            raise self.unavailable(f"cannot connect: {exc}", reason="connect") from None
        except http1.ResponseTooLarge:
            raise BadMessage(f"the answer is larger than {MAX_ANSWER_BYTES} bytes") from None
        except http1.HttpError as exc:
            raise self.unavailable(f"connection failed: {exc}", reason="connection") from None
        except JsonTooDense as exc:
            raise BadMessage(f"the answer is too dense to read: {exc}") from None
        except orjson.JSONDecodeError as exc:
            raise RpcError(PARSE_ERROR, f"cannot parse the server's answer: {exc}") from None
        finally:
            if pending is not None:
                del self._pending[rid]

    async def _answer(self, response: http1.StreamedResponse, rid: int, method: str,
                      credentials: Headers, allowance: Allowance,
                      pending: asyncio.Future[dict[str, Any]] | None,
                      ) -> dict[str, Any] | _Ended:
        status = response.status
        if status == 202:
            raise RpcError(INVALID_REQUEST, "server answered a request with 202 Accepted")
        if status >= 300:
            if status == 404 and self.session_id is not None:
                self.dead = True
                raise SessionExpired("session terminated")
            if status in (401, 403):
                raise Unauthorized(status, response.headers.get("www-authenticate", "")[:2000])
            if response.content_type == "application/json":
                with contextlib.suppress(orjson.JSONDecodeError):
                    message = orjson.loads(await response.read())
                    if isinstance(message, dict) and isinstance(message.get("error"), dict):
                        error = message["error"]
                        raise RpcError(rpc_code(error), str(error.get("message", "")),
                                       error.get("data"), http_status=status)
            raise RpcError(None, f"HTTP {status}", http_status=status)
        if method == "initialize":
            self.session_id = response.headers.get("mcp-session-id") or None
        kind = response.content_type
        if kind == "application/json":
            message = loads_untrusted(await response.read())
            for item in message if isinstance(message, list) else (message,):
                result = self._dispatch(item, rid, allowance, credentials)
                if result is not None:
                    return result
            raise BadMessage("the answer had no response to our request")
        if kind == "text/event-stream":
            return await self._read_events(response, rid, allowance, credentials, pending)
        raise RpcError(INVALID_REQUEST, f"unexpected content type {kind[:60]!r}")

    async def _read_events(self, response: http1.StreamedResponse, rid: int,
                           allowance: Allowance, credentials: Headers,
                           pending: asyncio.Future[dict[str, Any]] | None,
                           ) -> dict[str, Any] | _Ended:
        """The answer from a call's event stream; if the stream ends without it after an
        event id (and another stream of the session may carry it), where to resume."""
        parser = http1.SseParser(max_event=MAX_ANSWER_BYTES)
        last_id: str | None = None
        retry_ms: int | None = None
        async for chunk in response.chunks():
            for event in parser.feed(chunk):
                last_id = event.id
                retry_ms = event.retry if event.retry is not None else retry_ms
                if event.event != "message" or not event.data:
                    continue  # a priming event (resumption) or another kind
                result = self._dispatch(loads_untrusted(event.data.encode()), rid,
                                        allowance, credentials)
                if result is not None:
                    return result
            if pending is not None and pending.done():
                return pending.result()
        if pending is not None and pending.done():
            return pending.result()
        if last_id is None or pending is None:
            raise self.unavailable("the event stream ended without an answer",
                                   reason="connection")
        return _Ended(last_id, retry_ms)

    async def _resume(self, rid: int, ended: _Ended, allowance: Allowance,
                      credentials: Headers,
                      pending: asyncio.Future[dict[str, Any]] | None) -> dict[str, Any]:
        """SEP-1699: the server ended the call's stream after an event id with the answer
        still to come. After ``retry`` (the server's, capped; else a second) ask for the
        rest with a GET carrying ``Last-Event-ID``; the answer may also arrive meanwhile on
        the session's notification stream. At most ``MAX_RESUMES`` times, within the
        call's deadline (the caller's timeout)."""
        for _ in range(MAX_RESUMES):
            delay = _RESUME_DEFAULT_S if ended.retry_ms is None else ended.retry_ms / 1000
            if pending is not None:
                with contextlib.suppress(TimeoutError):
                    return await asyncio.wait_for(asyncio.shield(pending),
                                                  min(delay, _RESUME_MAX_S))
            headers = (("Accept", "text/event-stream"),
                       *((k, v) for k, v in self._session_headers() if k != "Accept"),
                       *credentials, ("Last-Event-ID", ended.last_id))
            async with self._http.stream("GET", self._target, headers=headers, timeout=None,
                                         drain=_DRAIN_S) as response:
                if response.status >= 300 or response.content_type != "text/event-stream":
                    raise self.unavailable(f"resuming the call's event stream failed (HTTP "
                                           f"{response.status})", reason="connection")
                outcome = await self._read_events(response, rid, allowance, credentials,
                                                  pending)
            if not isinstance(outcome, _Ended):
                return outcome
            ended = _Ended(outcome.last_id, outcome.retry_ms or ended.retry_ms)
        raise self.unavailable(f"the call's event stream ended {MAX_RESUMES + 1} times "
                               "without an answer", reason="connection")

    def _dispatch(self, message: Any, rid: int | None, allowance: Allowance,
                  credentials: Headers) -> dict[str, Any] | None:
        """Handle one message from the server; the result if it answers ``rid``."""
        if not isinstance(message, dict):
            raise BadMessage("a JSON-RPC message must be an object")
        method = message.get("method")
        if isinstance(method, str):
            is_request = "id" in message
            allowance.message(is_request)
            if is_request:
                self._reply_to_server(message["id"], method, credentials)
            else:
                self.on_notification(method, message.get("params"))
            return None
        if rid is None or message.get("id") != rid:
            self._answer_pending(message)
            return None
        return _result_of(message)

    def _answer_pending(self, message: dict[str, Any]) -> None:
        """An answer to another of our requests (on a stream not its own): it completes
        that request, if it is still waiting."""
        rid = message.get("id")
        waiter = self._pending.get(rid) if isinstance(rid, int) else None
        if waiter is None or waiter.done():
            return
        try:
            waiter.set_result(_result_of(message))
        except (RpcError, BadMessage) as exc:
            waiter.set_exception(exc)

    def _reply_to_server(self, request_id: Any, method: str, credentials: Headers) -> None:
        """The server asked us something (sampling, elicitation, roots...): this client
        declares no capability and serves only ``ping``; anything else gets a JSON-RPC error
        at once rather than leave the server (and the call it is part of) waiting."""
        if len(self._background) >= MAX_REPLIES_IN_FLIGHT:
            raise BadMessage("the server sends requests faster than they can be answered")
        if not isinstance(request_id, str | int) or isinstance(request_id, bool) \
                or (isinstance(request_id, str) and len(request_id) > 200):
            raise BadMessage("a request id must be a short string or an integer")
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if method == "ping":
            reply["result"] = {}
        else:
            reply["error"] = {"code": METHOD_NOT_FOUND,
                              "message": f"the client does not serve {method[:80]}"}
        self._spawn(self._post_one_way(reply, time.monotonic() + DISCOVER_TIMEOUT_S,
                                       credentials))

    async def _post_one_way(self, message: dict[str, Any], deadline: float,
                            credentials: Headers) -> int:
        """POST a notification or a reply (the server answers 202); the HTTP status."""
        headers = self._base + credentials
        if self._meta is not None:
            headers += (("Mcp-Method", str(message.get("method", ""))),) \
                if "method" in message else ()
        try:
            response = await self._http.request(
                "POST", self._target, headers=headers, body=orjson.dumps(message),
                timeout=max(deadline - time.monotonic(), 0.001))
        except http1.HttpError as exc:
            raise self.unavailable(f"connection failed: {exc}", reason="connection") from None
        return response.status

    # ------------------------------------------------------------------ tools

    def absorb_tools(self, page: dict[str, Any]) -> list[dict[str, Any]]:
        """A tools/list page as ``{"name", "description", "input_schema"}`` dicts (on a
        modern session, remembering each tool's ``x-mcp-header`` arguments)."""
        return listed_tools(page, self._param_headers if self.modern else None, self.url)

    # ------------------------------------------------------------------ notifications

    def start_listening(self, credentials: Headers) -> None:
        """Open the server's notification stream, if it is not open (legacy sessions with
        an id only: the modern protocol sends notifications on the stream of the request
        they concern). Called by each call with its credentials; they are sent with the
        stream's request and not kept."""
        if self.session_id is None or self.dead or self._listens >= MAX_LISTEN_OPENS \
                or (self._listener is not None and not self._listener.done()):
            return
        self._listens += 1
        loop = asyncio.get_running_loop()
        self._listening = loop.create_future()
        self._listener = loop.create_task(
            self._listen(self._session_headers() + credentials, self._listening),
            name=f"mcp-listen {safe_url(self.url)}")

    async def listening(self) -> None:
        """Until the notification stream's answer has come (or it could not be opened),
        at most a short while: a server may send a call's requests on that stream, and
        one sent before the stream is open is lost to the call."""
        if self._listening is not None and not self._listening.done():
            await asyncio.wait({self._listening}, timeout=_LISTEN_OPEN_S)

    async def _listen(self, headers: Headers, opened: asyncio.Future[None]) -> None:
        headers = (("Accept", "text/event-stream"),
                   *((k, v) for k, v in headers if k != "Accept"))
        try:
            async with self._listen_http.stream("GET", self._target, headers=headers,
                                                timeout=DISCOVER_TIMEOUT_S) as response:
                del headers  # sent: the credential in them is not kept
                opened.set_result(None)
                if response.status == 404:
                    self.dead = True  # the session is gone
                    return
                if response.status >= 300 or response.content_type != "text/event-stream":
                    self._listens = MAX_LISTEN_OPENS  # 405: the server offers no such stream
                    return
                parser = http1.SseParser(max_event=MAX_ANSWER_BYTES)
                async for chunk in response.chunks():
                    for event in parser.feed(chunk):
                        if event.event == "message" and event.data:
                            self._dispatch(loads_untrusted(event.data.encode()), None,
                                           self._heard, ())
        except (BadMessage, JsonTooDense) as exc:
            self._listens = MAX_LISTEN_OPENS
            log.warning("MCP notification stream of %s dropped: %s", safe_url(self.url), exc)
        except (http1.HttpError, ValueError) as exc:  # JSONDecodeError is a ValueError
            log.debug("MCP notification stream of %s: %s", safe_url(self.url), exc)
        finally:
            if not opened.done():
                opened.set_result(None)

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(_done_background(self._background))

    def close(self) -> None:
        self.dead = True
        if self._listener is not None and not self._listener.done():
            self._listener.cancel()

    async def shutdown(self) -> None:
        """After :meth:`close`: end the notification stream, and tell a legacy server its
        session may go (DELETE, best effort)."""
        tasks = [t for t in (self._listener, *self._background) if t is not None]
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.session_id is not None:
            with contextlib.suppress(http1.HttpError):
                await self._http.request("DELETE", self._target,
                                         headers=self._session_headers(), timeout=2.0)

    def unavailable(self, what: str, **extra: Any) -> ToolUnavailable:
        return ToolUnavailable(f"MCP server {safe_url(self.url)}: {what}", **extra)


def _result_of(message: dict[str, Any]) -> dict[str, Any]:
    """An answer's result, or its error raised."""
    error = message.get("error")
    if isinstance(error, dict):
        raise RpcError(rpc_code(error), str(error.get("message", "")), error.get("data"))
    result = message.get("result")
    if not isinstance(result, dict):
        raise BadMessage("a result must be an object")
    return result


def _retrieve(future: asyncio.Future[Any]) -> None:
    # An answer that came for a request no longer waiting is not an unseen error.
    if not future.cancelled():
        future.exception()


def _done_background(tasks: set[asyncio.Task[None]]) -> Any:
    def done(task: asyncio.Task[None]) -> None:
        tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.debug("MCP reply to the server failed: %s", exc)
    return done
