"""The MCP client the tool gateway calls tenants' tool servers with (official ``mcp`` SDK,
streamable HTTP).

Connections are pooled per (tenant, server url, headers). Opening one costs a protocol
negotiation (``server/discover``, or the ``initialize`` handshake with legacy servers) on top
of the TCP connect, measured at ~50 ms per call against ~3 ms for a call on an open
connection, so each pooled connection lives in its own task and is shared by every caller
with the same key (the SDK multiplexes concurrent requests on it). The tenant is part of the
key because a connection is an MCP session, and a server may keep state per session: two
tenants registered to the same credential-less server must never share one. Headers are
part of it because they carry the tenant's short-lived credential for that server: a
rotated credential gets a new connection and the old one idles out.

Each connection also remembers the tool list its server gave it (``session_tools``): listed
at the session's start, again when the server says the list changed, and past a maximum age,
so the gateway can compare it with the pinned list before every call at no extra round trip.

Outcomes: an answer from the tool — success or tool error — is a :class:`ToolOutcome`
(``ok=False`` for errors: information for the model, never an exception). Not reaching the
server, losing the connection, a 5xx or a timeout raise :class:`ToolUnavailable` (retryable;
the call may or may not have run, so retry only with the same idempotency key). This client
sends each call at most once; retries are the gateway's decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx2
import orjson
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    REQUEST_TIMEOUT,
    CallToolResult,
    RequestParamsMeta,
    TextContent,
    ToolListChangedNotification,
)
from pydantic import ValidationError

from tenantry import tls
from tenantry.errors import ToolUnavailable
from tenantry.ids import TenantId

__all__ = ["IDEMPOTENCY_HEADER", "IDEMPOTENCY_META_KEY", "McpToolClient", "ToolOutcome"]

log = logging.getLogger(__name__)

IDEMPOTENCY_META_KEY = "idempotency_key"
IDEMPOTENCY_HEADER = "Idempotency-Key"
_MAX_LIST_PAGES = 100

_PoolKey = tuple[str, str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What a tool answered. ``content`` is its text content joined by newlines; for a tool
    error it is the error message too (``error`` is then set)."""

    ok: bool
    content: str
    error: str | None = None


class McpToolClient(contextlib.AbstractAsyncContextManager["McpToolClient"]):
    """Calls tools on MCP servers over pooled streamable-HTTP connections.

    Use as ``async with McpToolClient() as mcp:`` (or call :meth:`aclose`), from one event
    loop. ``max_connections`` bounds the pool (least recently used goes first);
    connections idle for ``idle_timeout`` seconds are closed.
    """

    def __init__(
        self,
        *,
        max_connections: int = 256,
        idle_timeout: float = 120.0,
        connect_timeout: float = 10.0,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        self._max_connections = max_connections
        self._idle_timeout = idle_timeout
        self._connect_timeout = connect_timeout
        self._pool: OrderedDict[_PoolKey, _Connection] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()
        self._next_sweep = 0.0

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        connections = list(self._pool.values())
        self._pool.clear()
        for connection in connections:
            connection.close()
        tasks = [c.task for c in connections] + list(self._closing)
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def open_connections(self) -> int:
        return sum(1 for c in self._pool.values() if not c.dead)

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
    ) -> ToolOutcome:
        """Call ``tool`` once. The key goes in the request's ``_meta.idempotency_key`` and in
        an ``Idempotency-Key`` header; ``headers`` (e.g. the credential) go on the HTTP
        request only. ``tenant`` picks that tenant's own session (the gateway always
        passes it). ``timeout`` covers connecting and the call."""
        deadline = time.monotonic() + timeout
        connection = await self._acquire(tenant, url, headers or {}, timeout)
        try:
            client = connection.client
            # RequestParamsMeta is an open TypedDict (PEP 728) that mypy cannot extend yet.
            meta = (cast("RequestParamsMeta", {IDEMPOTENCY_META_KEY: idempotency_key})
                    if idempotency_key else None)
            remaining = max(deadline - time.monotonic(), 0.001)
            try:
                # The SDK's read timeout fires first; ours is a backstop for a stuck transport.
                async with asyncio.timeout(remaining + 1.0):
                    result = await client.call_tool(
                        tool, dict(arguments), read_timeout_seconds=remaining, meta=meta)
            except MCPError as exc:
                return self._mcp_error(connection, exc, url, tool, idempotency_key, timeout)
            except TimeoutError:
                raise _unavailable(url, f"tool {tool!r} timed out after {timeout:g}s",
                                   reason="timeout") from None
            except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
                connection.close()
                raise _unavailable(url, "connection closed", reason="connection") from exc
            except (RuntimeError, ValidationError) as exc:
                if connection.dead:
                    raise _unavailable(url, "connection closed", reason="connection") from exc
                # The server answered, but not with a valid result (e.g. structured output
                # that breaks its own schema): the model is told, the run goes on.
                return ToolOutcome(False, "", f"invalid result from tool {tool!r}: {exc}")
        finally:
            if idempotency_key:
                connection.http_statuses.pop(idempotency_key, None)
            connection.release()
        return _outcome(result)

    async def list_tools(
        self,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        tenant: TenantId | None = None,
        timeout: float = 30.0,  # noqa: ASYNC109 - as for call()
    ) -> list[dict[str, Any]]:
        """Every tool the server lists: ``{"name", "description", "input_schema"}``."""
        connection = await self._acquire(tenant, url, headers or {}, timeout)
        try:
            return await self._list(connection, url, timeout)
        finally:
            connection.release()

    async def session_tools(
        self,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        tenant: TenantId | None = None,
        max_age: float,
        timeout: float = 30.0,  # noqa: ASYNC109 - as for call()
    ) -> list[dict[str, Any]]:
        """The tool list of the session the next ``call`` with the same tenant, url and
        headers uses: listed when the session starts, again after the server signals
        ``notifications/tools/list_changed``, and once older than ``max_age`` seconds."""
        connection = await self._acquire(tenant, url, headers or {}, timeout)
        try:
            listed = connection.tools
            if listed is None or time.monotonic() - listed[0] >= max_age:
                generation = connection.tools_generation
                tools = await self._list(connection, url, timeout)
                if generation == connection.tools_generation:  # no change signalled meanwhile
                    connection.tools = (time.monotonic(), tools)
                return tools
            return listed[1]
        finally:
            connection.release()

    async def _list(self, connection: _Connection, url: str,
                    limit_s: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + limit_s
        try:
            tools: list[dict[str, Any]] = []
            cursor: str | None = None
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                for _ in range(_MAX_LIST_PAGES):
                    page = await connection.client.list_tools(cursor=cursor)
                    tools.extend({"name": t.name, "description": t.description or "",
                                  "input_schema": t.input_schema} for t in page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
            return tools
        except MCPError as exc:
            if exc.code in (CONNECTION_CLOSED, INVALID_REQUEST):
                connection.close()
            raise _unavailable(url, f"tools/list failed: {exc}", reason="protocol") from None
        except TimeoutError:
            raise _unavailable(url, f"tools/list timed out after {limit_s:g}s",
                               reason="timeout") from None

    # ------------------------------------------------------------------ internals

    def _mcp_error(
        self,
        connection: _Connection,
        exc: MCPError,
        url: str,
        tool: str,
        key: str | None,
        timeout: float,
    ) -> ToolOutcome:
        status = connection.http_statuses.get(key) if key else None
        if exc.code == REQUEST_TIMEOUT:
            raise _unavailable(url, f"tool {tool!r} timed out after {timeout:g}s",
                               reason="timeout") from None
        if exc.code == CONNECTION_CLOSED:
            connection.close()
            raise _unavailable(url, "connection closed", reason="connection") from None
        if exc.code == INVALID_REQUEST and "Session terminated" in exc.message:
            connection.close()  # a legacy server restarted and forgot our session
            raise _unavailable(url, "session terminated", reason="connection") from None
        if exc.code == INTERNAL_ERROR and status is not None and 400 <= status < 500 \
                and status not in (408, 425, 429):
            # The server refused this request (e.g. a rejected credential): not retryable,
            # and the model should know the tool did not run.
            return ToolOutcome(False, "", f"tool server refused the call (HTTP {status})")
        if exc.code in (INTERNAL_ERROR, PARSE_ERROR):
            raise _unavailable(url, f"tool server failed: {exc.message}", reason="server",
                               http_status=status) from None
        # A JSON-RPC error the server chose to answer with (unknown method, bad params...).
        return ToolOutcome(False, "", f"tool {tool!r} failed: {exc.message}")

    async def _acquire(self, tenant: TenantId | None, url: str, headers: Mapping[str, str],
                       limit_s: float) -> _Connection:
        key: _PoolKey = (tenant.value if tenant is not None else "", url,
                         tuple(sorted((k.lower(), v) for k, v in headers.items())))
        self._sweep()
        connection = self._pool.get(key)
        if connection is None or connection.dead:
            connection = _Connection(url, dict(headers), self._connect_timeout)
            self._pool[key] = connection
            self._evict_over_limit()
        else:
            self._pool.move_to_end(key)
        connection.in_flight += 1
        try:
            # Shielded: one caller giving up must not cancel a connection others share.
            async with asyncio.timeout(min(limit_s, self._connect_timeout)):
                await asyncio.shield(connection.ready)
        except TimeoutError:
            connection.release()
            connection.close()
            raise _unavailable(url, "timed out connecting", reason="connect") from None
        except ToolUnavailable as exc:  # shared by every waiter: raise a fresh copy
            connection.release()
            raise ToolUnavailable(exc.detail, **exc.extra) from None
        except BaseException:
            connection.release()
            raise
        return connection

    def _sweep(self) -> None:
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + 1.0
        for key, connection in list(self._pool.items()):
            idle = connection.in_flight == 0 and now - connection.last_used > self._idle_timeout
            if connection.dead or idle:
                del self._pool[key]
                self._retire(connection)

    def _evict_over_limit(self) -> None:
        while len(self._pool) > self._max_connections:
            _, connection = self._pool.popitem(last=False)
            self._retire(connection)

    def _retire(self, connection: _Connection) -> None:
        connection.retire()
        if not connection.task.done():
            self._closing.add(connection.task)
            connection.task.add_done_callback(self._closing.discard)


class _Connection:
    """One pooled MCP connection, owned by its own task: the SDK's transport runs a task
    group that must be entered and exited by the same task, and a transport failure cancels
    that task, never a caller."""

    def __init__(self, url: str, headers: dict[str, str], connect_timeout: float) -> None:
        self.url = url
        self.in_flight = 0
        self.last_used = time.monotonic()
        self.dead = False
        self.retired = False
        # HTTP error statuses by idempotency key: the SDK reports any non-2xx as the same
        # JSON-RPC error, and a 401 must not be treated like a 503.
        self.http_statuses: dict[str, int] = {}
        # (when listed, the list) of this session; None until listed or after list_changed.
        self.tools: tuple[float, list[dict[str, Any]]] | None = None
        self.tools_generation = 0
        self._headers = headers
        self._connect_timeout = connect_timeout
        self._client: Client | None = None
        loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[None] = loop.create_future()
        self.ready.add_done_callback(_retrieve)
        self._close = asyncio.Event()
        self.task = loop.create_task(self._own(), name=f"mcp-connection {_safe_url(url)}")

    @property
    def client(self) -> Client:
        if self._client is None or self.dead:
            raise _unavailable(self.url, "connection closed", reason="connection")
        return self._client

    async def _own(self) -> None:
        timeout = httpx2.Timeout(self._connect_timeout, read=300.0)
        hooks: dict[str, list[Any]] = {"request": [_add_idempotency_header],
                                       "response": [self._note_status]}
        try:
            async with httpx2.AsyncClient(headers=self._headers, timeout=timeout,
                                          verify=tls.client_context(),
                                          event_hooks=hooks) as http:
                transport = streamable_http_client(self.url, http_client=http)
                async with Client(transport, cache=None,
                                  message_handler=self._on_message) as client:
                    self._client = client
                    self.ready.set_result(None)
                    await self._close.wait()
        except Exception as exc:  # the transport's task group fails as an ExceptionGroup
            if not self.ready.done():
                self.ready.set_exception(
                    _unavailable(self.url, f"cannot connect: {_describe(exc)}",
                                 reason="connect"))
            else:
                log.info("MCP connection to %s lost: %s", _safe_url(self.url), _describe(exc))
        finally:
            self.dead = True
            self._client = None
            if not self.ready.done():  # closed while connecting: waiters must not see a cancel
                self.ready.set_exception(
                    _unavailable(self.url, "connection closed", reason="connection"))

    async def _on_message(self, message: object) -> None:
        if isinstance(message, ToolListChangedNotification):
            self.tools = None
            self.tools_generation += 1

    async def _note_status(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            key = response.request.headers.get(IDEMPOTENCY_HEADER)
            if key is not None:
                self.http_statuses[key] = response.status_code

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
        self.dead = True
        self._close.set()


async def _add_idempotency_header(request: httpx2.Request) -> None:
    """Mirror ``_meta.idempotency_key`` into the ``Idempotency-Key`` header: the SDK has no
    per-request headers on a shared connection, and servers may key on either."""
    if request.method != "POST":
        return
    with contextlib.suppress(httpx2.RequestNotRead):
        body = request.content
        if b'"idempotency_key"' not in body:
            return
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            return
        params = message.get("params") if isinstance(message, dict) else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        key = meta.get(IDEMPOTENCY_META_KEY) if isinstance(meta, dict) else None
        if isinstance(key, str):
            request.headers[IDEMPOTENCY_HEADER] = key


def _outcome(result: CallToolResult) -> ToolOutcome:
    parts = [block.text if isinstance(block, TextContent) else f"[{block.type} content]"
             for block in result.content]
    text = "\n".join(parts)
    if not parts and result.structured_content is not None:
        text = orjson.dumps(result.structured_content).decode()
    if result.is_error:
        return ToolOutcome(False, text, text or "tool error")
    return ToolOutcome(True, text)


def _unavailable(url: str, what: str, **extra: Any) -> ToolUnavailable:
    return ToolUnavailable(f"MCP server {_safe_url(url)}: {what}", **extra)


def _safe_url(url: str) -> str:
    """The url without userinfo, query or fragment, which may carry credentials."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def _retrieve(future: asyncio.Future[None]) -> None:
    # Mark a failed connect as seen even when no caller is left waiting for it.
    if not future.cancelled():
        future.exception()
