"""The MCP client the tool gateway calls tenants' tool servers with: JSON-RPC 2.0 over
streamable HTTP, on the platform's own HTTP/1.1 client (tenantry.http1), without the ``mcp``
SDK (ADR 0022: the SDK's per-call streams, task groups and pydantic models were a third of a
worker's CPU per step, and importing it most of a worker's start).

Sessions are pooled per (tenant, server url, headers). Opening one costs a protocol
negotiation — ``server/discover`` (protocol 2026-07-28), or with legacy servers the
``initialize`` handshake (2025-11-25 and older) and its ``Mcp-Session-Id`` — negotiated as
the SDK's ``mode="auto"`` does, so each session is negotiated once and shared by every caller
with the same key. The tenant is part of the key because a session may hold server state: two
tenants registered to the same credential-less server must never share one. A digest of the
headers is part of it because they carry the tenant's credential for that server: a rotated
credential gets a new session and the old one idles out. The headers themselves are not
kept: each call passes them, and they live as long as its request. The HTTP connections under
the sessions are pooled per origin by the HTTP client (a session is headers, not a socket).

Each session also remembers the tool list its server gave it (``session_tools``): listed at
the session's start, again when the server says the list changed, and past a maximum age,
so the gateway can compare it with the pinned list before every call at no extra round trip.

Outcomes: an answer from the tool — success or tool error — is a :class:`ToolOutcome`
(``ok=False`` for errors: information for the model, never an exception). Not reaching the
server, losing the connection, a 5xx or a timeout raise :class:`ToolUnavailable` (retryable;
the call may or may not have run, so retry only with the same idempotency key). This client
sends each call at most once; retries are the gateway's decision. The one exception is a
legacy session the server has forgotten (HTTP 404 to a request with our session id: the
request was refused before anything ran): a new session is opened and the call sent on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from tenantry import http1
from tenantry.cache import BoundedCache
from tenantry.errors import ToolUnavailable
from tenantry.ids import TenantId
from tenantry.tools import _mcp_wire as wire
from tenantry.tools._mcp_messages import (
    INTERNAL_ERROR,
    MAX_ANSWER_BYTES,
    PARSE_ERROR,
    BadMessage,
    Headers,
    RpcError,
    SessionExpired,
    Unauthorized,
    safe_url,
)
from tenantry.tools._mcp_negotiation import negotiate
from tenantry.tools.destinations import Destinations

__all__ = ["IDEMPOTENCY_HEADER", "IDEMPOTENCY_META_KEY", "McpToolClient", "ToolOutcome"]

log = logging.getLogger(__name__)

IDEMPOTENCY_META_KEY = "idempotency_key"
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: A tool list read page by page: at most this many pages and tools (each page's answer is
#: bounded by ``MAX_ANSWER_BYTES``; a list longer than this is no honest server's).
_MAX_LIST_PAGES = 16
_MAX_TOOLS = 1000
#: Calls (and list reads) one tenant may have in flight on one worker; more wait for a slot
#: within their own deadline. With ``MAX_ANSWER_BYTES`` per answer, what one tenant's
#: servers can make a worker hold is this many answers, whatever they send.
MAX_CALLS_PER_TENANT = 32

_PoolKey = tuple[str, str, bytes, bool]
#: How a call reaches its server: guarded (tools/destinations.py), and the protocol
#: generation it spoke before (None: not known).
_Reach = tuple[bool, bool | None]
#: Servers whose protocol generation this process remembers (a new session to one known to
#: speak the 2025 handshake starts with ``initialize``), and for how long.
_ERA_ENTRIES = 4096
_ERA_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What a tool answered. ``content`` is its text content joined by newlines; for a tool
    error it is the error message too (``error`` is then set)."""

    ok: bool
    content: str
    error: str | None = None
    #: The server refused the credential (HTTP 401 or 403): the status and its
    #: ``WWW-Authenticate`` header, for the gateway to refresh or step up an OAuth token.
    refused: tuple[int, str] | None = field(default=None, compare=False)


class McpToolClient(contextlib.AbstractAsyncContextManager["McpToolClient"]):
    """Calls tools on MCP servers over pooled streamable-HTTP sessions.

    Use as ``async with McpToolClient() as mcp:`` (or call :meth:`aclose`), from one event
    loop. ``max_connections`` bounds the pool of sessions (least recently used goes first)
    and the HTTP connections per server origin; sessions idle for ``idle_timeout`` seconds
    are closed.
    """

    def __init__(
        self,
        *,
        max_connections: int = 256,
        idle_timeout: float = 120.0,
        connect_timeout: float = 10.0,
        max_calls_per_tenant: int = MAX_CALLS_PER_TENANT,
        destinations: Destinations | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        self._slots = _TenantSlots(max_calls_per_tenant)
        self._max_connections = max_connections
        self._idle_timeout = idle_timeout
        self._connect_timeout = connect_timeout
        self._http = http1.HttpClient(max_per_origin=max_connections,
                                      connect_timeout=connect_timeout,
                                      max_body=MAX_ANSWER_BYTES)
        # Legacy sessions' notification streams stay open: their own pool, so they never
        # take the slots calls need.
        self._listen_http = http1.HttpClient(max_per_origin=max_connections,
                                             connect_timeout=connect_timeout,
                                             max_body=MAX_ANSWER_BYTES)
        # Servers tenants registered themselves (``guarded``): every connection to a vetted
        # address (tools/destinations.py), in pools of their own, so a connection opened
        # for an operator's server is never reused for a tenant's.
        self._destinations = destinations or Destinations()
        self._eras: BoundedCache[str, bool] = BoundedCache(max_entries=_ERA_ENTRIES,
                                                           ttl_seconds=_ERA_SECONDS)
        self._guarded_http = http1.HttpClient(max_per_origin=max_connections,
                                              connect_timeout=connect_timeout,
                                              max_body=MAX_ANSWER_BYTES,
                                              connect_to=self._destinations.connect_to)
        self._guarded_listen_http = http1.HttpClient(max_per_origin=max_connections,
                                                     connect_timeout=connect_timeout,
                                                     max_body=MAX_ANSWER_BYTES,
                                                     connect_to=self._destinations.connect_to)
        self._pool: OrderedDict[_PoolKey, _Session] = OrderedDict()
        self._retired: set[_Session] = set()  # out of the pool, still finishing
        self._next_sweep = 0.0

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        sessions = list(self._pool.values())
        self._pool.clear()
        for session in sessions:
            session.close()
        await asyncio.gather(*(s.closed() for s in sessions), return_exceptions=True)
        await asyncio.gather(*(s.closed() for s in self._retired), return_exceptions=True)
        for http in (self._http, self._listen_http, self._guarded_http,
                     self._guarded_listen_http):
            await http.aclose()

    @property
    def destinations(self) -> Destinations:
        """Where servers tenants registered themselves may be."""
        return self._destinations

    @property
    def open_connections(self) -> int:
        return sum(1 for s in self._pool.values() if not s.dead)

    # ------------------------------------------------------------------ calls

    async def call(
        self,
        url: str,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        tenant: TenantId | None = None,
        timeout: float = 30.0,  # noqa: ASYNC109 - the call's budget, part of its contract
        guarded: bool = False,
        modern: bool | None = None,
    ) -> ToolOutcome:
        """Call ``tool`` once. The key goes in the request's ``_meta.idempotency_key`` and in
        an ``Idempotency-Key`` header; ``headers`` (e.g. the credential) go on the HTTP
        request only. ``tenant`` picks that tenant's own session (the gateway always
        passes it). ``timeout`` covers connecting and the call. ``guarded``: a server a
        tenant registered, reached only at vetted addresses (tools/destinations.py).
        ``modern``: the protocol generation the server spoke before, if known (a new
        session to a handshake server then starts with ``initialize``)."""
        deadline = time.monotonic() + timeout
        params: dict[str, Any] = {"name": tool, "arguments": dict(arguments)}
        extra: tuple[tuple[str, str], ...] = ()
        if idempotency_key:
            params["_meta"] = {IDEMPOTENCY_META_KEY: idempotency_key}
            extra = ((IDEMPOTENCY_HEADER, idempotency_key),)
        credentials = _credentials(headers)
        async with self._slots.held(tenant, url, deadline):
            return await self._call(url, tool, params, extra, tenant, credentials,
                                    deadline, timeout, (guarded, modern))

    async def _call(self, url: str, tool: str, params: dict[str, Any], extra: Headers,
                    tenant: TenantId | None, credentials: Headers, deadline: float,
                    timeout: float, reach: _Reach,  # noqa: ASYNC109 - for the message
                    ) -> ToolOutcome:
        for attempt in range(2):
            session = await self._acquire(tenant, url, credentials, deadline, *reach)
            try:
                result = await session.request("tools/call", params, deadline, extra,
                                               credentials)
            except SessionExpired:
                if attempt == 0:
                    continue  # refused before anything ran: once more on a new session
                raise _unavailable(url, "session terminated", reason="connection") from None
            except RpcError as exc:
                return _rpc_error_outcome(exc, url, tool)
            except BadMessage as exc:
                # The server answered, but not with a valid result: the model is told, the
                # run goes on.
                return ToolOutcome(False, "", f"invalid result from tool {tool!r}: {exc}")
            except TimeoutError:
                raise _unavailable(url, f"tool {tool!r} timed out after {timeout:.3g}s",
                                   reason="timeout") from None
            finally:
                session.release()
            return _outcome(result, tool)
        raise AssertionError("unreachable")  # pragma: no cover

    async def list_tools(
        self,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        tenant: TenantId | None = None,
        timeout: float = 30.0,  # noqa: ASYNC109 - as for call()
        guarded: bool = False,
        modern: bool | None = None,
    ) -> list[dict[str, Any]]:
        """Every tool the server lists: ``{"name", "description", "input_schema"}``."""
        deadline = time.monotonic() + timeout
        credentials = _credentials(headers)
        async with self._slots.held(tenant, url, deadline):
            session = await self._acquire(tenant, url, credentials, deadline, guarded, modern)
            try:
                return await self._list(session, url, deadline, timeout, credentials)
            finally:
                session.release()

    async def session_tools(
        self,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        tenant: TenantId | None = None,
        max_age: float,
        timeout: float = 30.0,  # noqa: ASYNC109 - as for call()
        guarded: bool = False,
        modern: bool | None = None,
    ) -> list[dict[str, Any]]:
        """The tool list of the session the next ``call`` with the same tenant, url and
        headers uses: listed when the session starts, again after the server signals
        ``notifications/tools/list_changed``, and once older than ``max_age`` seconds."""
        deadline = time.monotonic() + timeout
        credentials = _credentials(headers)
        async with self._slots.held(tenant, url, deadline):
            session = await self._acquire(tenant, url, credentials, deadline, guarded, modern)
            try:
                listed = session.tools
                if listed is None or time.monotonic() - listed[0] >= max_age:
                    generation = session.tools_generation
                    tools = await self._list(session, url, deadline, timeout, credentials)
                    if generation == session.tools_generation:  # no change signalled meanwhile
                        session.tools = (time.monotonic(), tools)
                    return tools
                return listed[1]
            finally:
                session.release()

    async def _list(self, session: _Session, url: str, deadline: float, limit_s: float,
                    credentials: Headers) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        try:
            for _ in range(_MAX_LIST_PAGES):
                params = {"cursor": cursor} if cursor is not None else {}
                page = await session.request("tools/list", params, deadline, (), credentials)
                tools.extend(session.absorb_tools(page))
                if len(tools) > _MAX_TOOLS:
                    raise BadMessage(f"the server lists more than {_MAX_TOOLS} tools")
                cursor = page.get("nextCursor")
                if not isinstance(cursor, str):
                    break
        except Unauthorized as exc:
            raise _unavailable(url, f"tools/list refused the credential (HTTP "
                                    f"{exc.http_status})", reason="unauthorized",
                               http_status=exc.http_status,
                               www_authenticate=exc.challenge) from None
        except (RpcError, SessionExpired) as exc:
            if isinstance(exc, SessionExpired):
                session.close()
            raise _unavailable(url, f"tools/list failed: {exc}", reason="protocol") from None
        except BadMessage as exc:
            raise _unavailable(url, f"tools/list failed: {exc}", reason="protocol") from None
        except TimeoutError:
            raise _unavailable(url, f"tools/list timed out after {limit_s:.3g}s",
                               reason="timeout") from None
        return tools

    # ------------------------------------------------------------------ internals

    def speaks_modern(self, url: str) -> bool | None:
        """The protocol generation the server at ``url`` last negotiated here (None: not
        known), for its registration to store."""
        return self._eras.get(url)

    async def _acquire(self, tenant: TenantId | None, url: str, credentials: Headers,
                       deadline: float, guarded: bool = False,
                       modern: bool | None = None) -> _Session:
        digest = hashlib.sha256(orjson.dumps(sorted((k.lower(), v) for k, v in credentials)))
        key: _PoolKey = (tenant.value if tenant is not None else "", url, digest.digest(),
                         guarded)
        self._sweep()
        session = self._pool.get(key)
        if session is None or session.dead:
            if session is not None:
                self._retire(session)
            http, listen = ((self._guarded_http, self._guarded_listen_http) if guarded
                            else (self._http, self._listen_http))
            known = self._eras.get(url)
            session = _Session(url, credentials, http, listen, self._connect_timeout,
                               known if known is not None else modern)
            self._pool[key] = session
            self._evict_over_limit()
        else:
            self._pool.move_to_end(key)
        session.in_flight += 1
        if session.ready.done() and session.ready.exception() is None:
            session.start_listening(credentials)
            return session
        try:
            limit = min(deadline - time.monotonic(), self._connect_timeout)
            # Shielded: one caller giving up must not cancel a negotiation others share.
            async with asyncio.timeout(max(limit, 0.001)):
                await asyncio.shield(session.ready)
        except TimeoutError:
            session.release()
            session.close()
            raise _unavailable(url, "timed out connecting", reason="connect") from None
        except ToolUnavailable as exc:  # shared by every waiter: raise a fresh copy
            session.release()
            raise ToolUnavailable(exc.detail, **exc.extra) from None
        except BaseException:
            session.release()
            raise
        self._eras.put(url, session.modern)
        return session

    def _sweep(self) -> None:
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + 1.0
        for key, session in list(self._pool.items()):
            idle = session.in_flight == 0 and now - session.last_used > self._idle_timeout
            if session.dead or idle:
                del self._pool[key]
                self._retire(session)

    def _evict_over_limit(self) -> None:
        while len(self._pool) > self._max_connections:
            _, session = self._pool.popitem(last=False)
            self._retire(session)

    def _retire(self, session: _Session) -> None:
        session.retire()
        self._retired.add(session)
        session.on_closed = self._retired.discard


class _TenantSlots:
    """At most ``limit`` operations per tenant at once; a tenant's entry lives only while it
    has operations in flight or waiting, so the map is bounded by the work in flight."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("max_calls_per_tenant must be >= 1")
        self._limit = limit
        self._tenants: dict[str, tuple[asyncio.Semaphore, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def held(self, tenant: TenantId | None, url: str,
                   deadline: float) -> AsyncIterator[None]:
        key = tenant.value if tenant is not None else ""
        entry = self._tenants.get(key)
        if entry is None:
            entry = self._tenants[key] = (asyncio.Semaphore(self._limit), [0])
        semaphore, users = entry
        users[0] += 1
        try:
            try:
                async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                    await semaphore.acquire()
            except TimeoutError:
                raise _unavailable(url, f"the tenant's {self._limit} calls in flight on this "
                                        "worker did not end in time", reason="timeout") from None
            try:
                yield
            finally:
                semaphore.release()
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._tenants[key]


class _Session(wire.Session):
    """One pooled MCP session: the negotiation runs in a task of its own, shared by every
    caller that arrives meanwhile; a failed negotiation fails them all alike."""

    def __init__(self, url: str, credentials: Headers, http: http1.HttpClient,
                 listen_http: http1.HttpClient, connect_timeout: float,
                 modern: bool | None = None) -> None:
        super().__init__(url, http, listen_http)
        self._known_modern = modern  # what the server spoke before (None: not known)
        self.on_closed: Callable[[_Session], None] | None = None
        self._connect_timeout = connect_timeout
        self._shutdown: asyncio.Task[None] | None = None
        self.in_flight = 0
        self.last_used = time.monotonic()
        self.retired = False
        # (when listed, the list) of this session; None until listed or after list_changed.
        self.tools: tuple[float, list[dict[str, Any]]] | None = None
        self.tools_generation = 0
        loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[None] = loop.create_future()
        self.ready.add_done_callback(_retrieve)
        # The first caller's credentials, for the negotiation only (its task ends with it).
        self._negotiation = loop.create_task(self._open(credentials),
                                             name=f"mcp-session {_safe_url(url)}")

    async def _open(self, credentials: Headers) -> None:
        try:
            await negotiate(self, credentials, self._connect_timeout, modern=self._known_modern)
        except Exception as exc:
            self.dead = True
            if not self.ready.done():
                self.ready.set_exception(_as_unavailable(self.url, exc))
            return
        if not self.ready.done():
            self.start_listening(credentials)
            await self.listening()
            if not self.ready.done():
                self.ready.set_result(None)

    def on_notification(self, method: str, params: Any) -> None:
        if method == "notifications/tools/list_changed":
            self.tools = None
            self.tools_generation += 1

    def release(self) -> None:
        self.in_flight -= 1
        self.last_used = time.monotonic()
        if self.retired and self.in_flight == 0:
            self.close()

    def retire(self) -> None:
        """Out of the pool: close once the calls in flight finish."""
        self.retired = True
        if self.in_flight == 0:
            self.close()

    def close(self) -> None:
        if self._shutdown is not None:
            return
        super().close()
        if not self._negotiation.done():
            self._negotiation.cancel()
        if not self.ready.done():  # closed while connecting: waiters must not see a cancel
            self.ready.set_exception(
                _unavailable(self.url, "connection closed", reason="connection"))
        self._shutdown = asyncio.get_running_loop().create_task(self._finish())

    async def _finish(self) -> None:
        await asyncio.gather(self._negotiation, return_exceptions=True)
        await self.shutdown()
        if self.on_closed is not None:
            self.on_closed(self)

    async def closed(self) -> None:
        if self._shutdown is not None:
            await asyncio.gather(self._shutdown, return_exceptions=True)


def _credentials(headers: Mapping[str, str] | None) -> Headers:
    return tuple(headers.items()) if headers else ()


def _rpc_error_outcome(exc: RpcError, url: str, tool: str) -> ToolOutcome:
    status = exc.http_status
    if status is not None and exc.code is None:  # a bare HTTP error, no JSON-RPC body
        if 400 <= status < 500 and status not in (408, 425, 429):
            # The server refused this request (e.g. a rejected credential): not retryable,
            # and the model should know the tool did not run.
            refused = (status, exc.challenge) if isinstance(exc, Unauthorized) else None
            return ToolOutcome(False, "", f"tool server refused the call (HTTP {status})",
                               refused)
        raise _unavailable(url, f"tool server failed: HTTP {status}", reason="server",
                           http_status=status) from None
    if exc.code in (INTERNAL_ERROR, PARSE_ERROR):
        # The server failed (or answered something unreadable): the tool may not have run.
        raise _unavailable(url, f"tool server failed: {exc.message}", reason="server",
                           http_status=status) from None
    # A JSON-RPC error the server chose to answer with (unknown tool, bad params...).
    return ToolOutcome(False, "", f"tool {tool!r} failed: {exc.message}")


def _outcome(result: Mapping[str, Any], tool: str) -> ToolOutcome:
    if result.get("resultType") == "input_required":
        return ToolOutcome(False, "", f"tool {tool!r} asked for input the platform cannot give")
    content = result.get("content")
    if not isinstance(content, list):
        return ToolOutcome(False, "", f"invalid result from tool {tool!r}: no content list")
    parts: list[str] = []
    for block in content:
        if not isinstance(block, dict) or not isinstance(kind := block.get("type"), str):
            return ToolOutcome(False, "", f"invalid result from tool {tool!r}: bad content")
        text = block.get("text")
        if kind == "text" and isinstance(text, str):
            parts.append(text)
        else:
            parts.append(f"[{kind} content]")
    joined = "\n".join(parts)
    structured = result.get("structuredContent")
    if not parts and structured is not None:
        joined = orjson.dumps(structured).decode()
    if result.get("isError") is True:
        return ToolOutcome(False, joined, joined or "tool error")
    return ToolOutcome(True, joined)


def _as_unavailable(url: str, exc: BaseException) -> ToolUnavailable:
    if isinstance(exc, ToolUnavailable):
        return exc
    if isinstance(exc, TimeoutError | http1.RequestTimeout):
        return _unavailable(url, "timed out connecting", reason="connect")
    return _unavailable(url, f"cannot connect: {type(exc).__name__}: {exc}", reason="connect")


def _unavailable(url: str, what: str, **extra: Any) -> ToolUnavailable:
    return ToolUnavailable(f"MCP server {_safe_url(url)}: {what}", **extra)


_safe_url = safe_url


def _retrieve(future: asyncio.Future[None]) -> None:
    # Mark a failed connect as seen even when no caller is left waiting for it.
    if not future.cancelled():
        future.exception()
