"""An MCP server that keeps state per MCP session, as real servers may (a scratchpad, a
login, a cart): ``remember(note)`` stores a note for the calling session, ``recall()``
answers what that session stored, ``grow()`` adds a tool and tells the calling session
its tool list changed, and ``ask_client()`` (served with ``asks_client=True``) sends the
client requests (``ping``, ``elicitation/create``) and says what the client answered.
It speaks only the session-ful ``initialize`` handshake (``server/discover`` is refused,
like a server on an older SDK), so every connection is a session with its own
``Mcp-Session-Id``."""

from __future__ import annotations

from typing import Any

import orjson
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tenantry.models.loopback import LoopbackServer
from tenantry.testing.mcp_server import EffectsMcpServer


class SessionStateMcpServer:
    def __init__(self, *, port: int = 0, asks_client: bool = False) -> None:
        self._port = port
        self.notes: dict[str, str] = {}  # Mcp-Session-Id → what that session stored
        self.mcp: MCPServer = MCPServer("scratchpad", log_level="WARNING")

        async def remember(note: str, ctx: Context) -> str:
            """Keep a note for this session."""
            self.notes[_session(ctx)] = note
            return "remembered"

        async def recall(ctx: Context) -> str:
            """The note this session kept, if any."""
            return self.notes.get(_session(ctx), "nothing remembered")

        async def grow(ctx: Context) -> str:
            """Serve one more tool, and say so to this session (tools/list_changed)."""
            async def forget(ctx: Context) -> str:
                """Drop this session's note."""
                self.notes.pop(_session(ctx), None)
                return "forgotten"

            self.mcp.add_tool(forget)
            await ctx.session.send_tool_list_changed()
            return "grown"

        async def ask_client(ctx: Context) -> str:
            """Ping the client, then ask it to elicit a name from its user: requests from
            the server to the client."""
            await ctx.session.send_ping()
            try:
                await ctx.session.elicit_form(
                    "Your name?", {"type": "object", "properties": {"name": {"type": "string"}}},
                    related_request_id=ctx.request_id)
            except MCPError as exc:
                return f"pinged; the client refused to elicit: {exc}"
            return "pinged; the client elicited"

        if asks_client:
            self.mcp.add_tool(ask_client)
        self.mcp.add_tool(remember)
        self.mcp.add_tool(recall)
        self.mcp.add_tool(grow)
        self._http: LoopbackServer | None = None

    @property
    def sessions(self) -> int:
        return len(self.notes)

    @property
    def url(self) -> str:
        assert self._http is not None
        return f"http://127.0.0.1:{self._http.port}/mcp"

    async def __aenter__(self) -> SessionStateMcpServer:
        self._http = LoopbackServer(handshake_only(self.mcp.streamable_http_app(
            host="127.0.0.1")), port=self._port)
        await self._http.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        assert self._http is not None
        await self._http.stop()


def _session(ctx: Context) -> str:
    session = (ctx.headers or {}).get("mcp-session-id")
    assert session, "the handshake should have given this connection a session"
    return session


def handshake_only(app: ASGIApp, methods: list[str] | None = None) -> ASGIApp:
    """Answer ``server/discover`` with 404, so clients fall back to ``initialize``. Every
    POSTed JSON-RPC method is appended to ``methods``, in the order they came."""
    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            parsed: Any = orjson.loads(body)
        except orjson.JSONDecodeError:
            parsed = None
        if methods is not None and isinstance(parsed, dict) and "method" in parsed:
            methods.append(str(parsed["method"]))
        if isinstance(parsed, dict) and parsed.get("method") == "server/discover":
            await Response(b"", 404)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    return wrapped


class LegacyEffectsMcpServer(EffectsMcpServer):
    """The SDK's test server (tenantry.testing.mcp_server) as a server of the previous
    protocol generation sees it: ``server/discover`` refused, the ``initialize`` handshake,
    a session id per client. ``methods``: every JSON-RPC method it was sent, in order."""

    def _app(self) -> ASGIApp:
        self.methods: list[str] = []
        return handshake_only(super()._app(), self.methods)
