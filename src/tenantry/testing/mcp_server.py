"""An MCP test server (official ``mcp`` SDK, streamable HTTP) that counts idempotency keys.

In a test::

    async with EffectsMcpServer() as tools:
        ...  # register tools.url ("http://127.0.0.1:PORT/mcp") as a tenant's tool server
        assert tools.key_counts()["run_x:3:0"] == KeyCount(calls=2, effects=1)

As a process (multi-process and chaos tests)::

    python -m tenantry.testing.mcp_server --port 0 --state effects.jsonl
    # prints "READY http://127.0.0.1:PORT/mcp"; counters at GET http://127.0.0.1:PORT/stats

Tools: ``effect(note)`` performs its effect once per idempotency key (read from the call's
``_meta.idempotency_key``, else the ``Idempotency-Key`` header; both are recorded),
``echo(text)``, ``add(a, b)``, ``fail(message)`` (a tool error) and ``slow(seconds)``.
Every call's arguments, keys and ``Authorization`` header are recorded. ``fail_next(n,
status=503)`` makes the next ``n`` tool calls fail at the HTTP level, before any tool runs;
those are recorded apart, in ``refused`` (a retry of one must carry the same key).

With a state file, every call is appended to it as one JSON line *before* the tool answers,
and the file is replayed on start: a server killed and restarted on the same file still
performs each key's effect at most once.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tenantry.models.loopback import LoopbackService

try:  # the MCP SDK is the [testing] extra's: the platform's own MCP client needs none
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
except ModuleNotFoundError as missing:
    if missing.name != "mcp":
        raise
    _NO_SDK = "tenantry.testing.mcp_server needs the MCP SDK: pip install 'tenantry[testing]'"
    if __name__ == "__main__":
        sys.exit(f"error: {_NO_SDK}")
    raise ModuleNotFoundError(_NO_SDK, name="mcp") from None

__all__ = ["EffectsMcpServer", "KeyCount", "ToolCallRecord", "main"]

META_KEY = "idempotency_key"
HEADER_KEY = "idempotency-key"


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """One tool call as the server saw it. ``headers`` has lower-cased names."""

    tool: str
    arguments: dict[str, Any]
    meta_key: str | None
    header_key: str | None
    authorization: str | None
    headers: dict[str, str] = field(default_factory=dict)
    applied: bool | None = None  # for ``effect``: whether this call performed the effect

    @property
    def key(self) -> str | None:
        return self.meta_key if self.meta_key is not None else self.header_key

    def to_data(self) -> dict[str, Any]:
        return {"tool": self.tool, "arguments": self.arguments, "meta_key": self.meta_key,
                "header_key": self.header_key, "authorization": self.authorization,
                "headers": self.headers, "applied": self.applied}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ToolCallRecord:
        return cls(str(data["tool"]), dict(data.get("arguments") or {}), data.get("meta_key"),
                   data.get("header_key"), data.get("authorization"),
                   dict(data.get("headers") or {}), data.get("applied"))


@dataclass(frozen=True, slots=True)
class KeyCount:
    calls: int
    effects: int


class EffectsMcpServer(LoopbackService):
    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        state_file: str | Path | None = None,
        handle_signals: bool = False,
    ) -> None:
        self.calls: list[ToolCallRecord] = []
        # Calls fail_next answered with an HTTP error: no tool ran, nothing was counted.
        self.refused: list[ToolCallRecord] = []
        self._calls_by_key: dict[str, int] = {}
        self._effects_by_key: dict[str, int] = {}
        self._unkeyed_effects = 0
        self._faults: list[int] = []
        self._slow_gate: asyncio.Event | None = None
        self._state_file = Path(state_file) if state_file is not None else None
        super().__init__(host=host, port=port, handle_signals=handle_signals)
        if self._state_file is not None and self._state_file.exists():
            self._replay(self._state_file)

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        """The MCP endpoint: ``http://127.0.0.1:PORT/mcp``."""
        return f"{self.base_url}/mcp"

    @property
    def base_url(self) -> str:
        return self.origin

    def _app(self) -> ASGIApp:
        # A fresh SDK server per start: its session manager runs once per app.
        return self._inject_faults(_build_app(self).streamable_http_app(host=self._host))

    # ------------------------------------------------------------------ fault hooks

    def fail_next(self, n: int = 1, *, status: int = 503) -> None:
        """Answer the next ``n`` ``tools/call`` requests with a bare HTTP ``status`` before
        they reach a tool (503: server down; 401: credential refused). They are not counted
        as calls; each is kept in ``refused``."""
        if not 400 <= status <= 599:
            raise ValueError("status must be an HTTP error status")
        self._faults.extend([status] * n)

    def hold_slow_calls(self) -> None:
        """From now on a ``slow`` call answers only once its seconds have passed *and*
        :meth:`release_slow_calls` was called: a test crashes what waits on the calls while
        they are in flight by arrangement, not by racing their seconds."""
        self._slow_gate = asyncio.Event()

    def release_slow_calls(self) -> None:
        """Let the held ``slow`` calls answer (each after its seconds), and stop holding."""
        if self._slow_gate is not None:
            self._slow_gate.set()
            self._slow_gate = None

    def _inject_faults(self, app: ASGIApp) -> ASGIApp:
        async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
            if not self._faults or scope["type"] != "http" or scope["method"] != "POST":
                await app(scope, receive, send)
                return
            # Read the body to see the JSON-RPC method, then replay it to the app.
            chunks: list[bytes] = []
            while True:
                message = await receive()
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    break
            body = b"".join(chunks)
            try:
                rpc: Any = orjson.loads(body)
                method = rpc.get("method")
            except (orjson.JSONDecodeError, AttributeError):
                rpc, method = None, None
            if method == "tools/call" and self._faults:
                self.refused.append(_refused_call(rpc, scope))
                await Response(b"injected failure", self._faults.pop(0))(scope, receive, send)
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

    # ------------------------------------------------------------------ counters

    def key_counts(self) -> dict[str, KeyCount]:
        """Per idempotency key: calls that carried it, effects performed for it."""
        return {key: KeyCount(calls, self._effects_by_key.get(key, 0))
                for key, calls in self._calls_by_key.items()}

    @property
    def authorizations(self) -> list[str | None]:
        """The ``Authorization`` header of every call, in order."""
        return [c.authorization for c in self.calls]

    @property
    def effects_total(self) -> int:
        return sum(self._effects_by_key.values()) + self._unkeyed_effects

    def stats(self, *, include_calls: bool = True) -> dict[str, Any]:
        """Everything as plain JSON (what ``GET /stats`` answers)."""
        data: dict[str, Any] = {
            "keys": {k: {"calls": c.calls, "effects": c.effects}
                     for k, c in self.key_counts().items()},
            "calls_total": len(self.calls),
            "effects_total": self.effects_total,
            "unkeyed_effects": self._unkeyed_effects,
            "duplicate_effects": sum(n - 1 for n in self._effects_by_key.values() if n > 1),
            "key_mismatches": sum(1 for c in self.calls if c.meta_key is not None
                                  and c.header_key is not None and c.meta_key != c.header_key),
        }
        if include_calls:
            data["calls"] = [c.to_data() for c in self.calls]
        return data

    # ------------------------------------------------------------------ recording

    def record(self, tool: str, arguments: dict[str, Any], ctx: Context | None) -> ToolCallRecord:
        """Count a call (and, for ``effect``, decide whether it applies) and persist it."""
        meta: Mapping[str, Any] = {}
        headers: dict[str, str] = {}
        if ctx is not None:
            meta = ctx.request_context.meta or {}
            headers = {k.lower(): v for k, v in (ctx.headers or {}).items()}
        meta_key = meta.get(META_KEY)
        record = ToolCallRecord(
            tool=tool,
            arguments=arguments,
            meta_key=meta_key if isinstance(meta_key, str) else None,
            header_key=headers.get(HEADER_KEY),
            authorization=headers.get("authorization"),
            headers=headers,
        )
        if tool == "effect":
            key = record.key
            applied = key is None or self._effects_by_key.get(key, 0) == 0
            record = ToolCallRecord(record.tool, record.arguments, record.meta_key,
                                    record.header_key, record.authorization, record.headers,
                                    applied)
        # Persisted before counting and before the tool answers: a server killed after
        # this line has the effect on file, and one killed before never performed it.
        if self._state_file is not None:
            with self._state_file.open("ab") as f:
                f.write(orjson.dumps(record.to_data()) + b"\n")
        self._count(record)
        return record

    def _count(self, record: ToolCallRecord) -> None:
        self.calls.append(record)
        key = record.key
        if key is not None:
            self._calls_by_key[key] = self._calls_by_key.get(key, 0) + 1
        if record.applied:
            if key is None:
                self._unkeyed_effects += 1
            else:
                self._effects_by_key[key] = self._effects_by_key.get(key, 0) + 1

    def _replay(self, path: Path) -> None:
        for line in path.read_bytes().splitlines():
            try:
                data = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a line torn by kill -9: that call never answered
            if isinstance(data, dict):
                self._count(ToolCallRecord.from_data(data))


def _refused_call(message: Any, scope: Scope) -> ToolCallRecord:
    """A ``tools/call`` request as it arrived, from its JSON-RPC body and HTTP headers."""
    found = message.get("params") if isinstance(message, dict) else None
    params: dict[str, Any] = found if isinstance(found, dict) else {}
    given = params.get("_meta")
    meta: dict[str, Any] = given if isinstance(given, dict) else {}
    arguments = params.get("arguments")
    headers = {k.decode("latin-1").lower(): v.decode("latin-1")
               for k, v in scope.get("headers", [])}
    meta_key = meta.get(META_KEY)
    return ToolCallRecord(str(params.get("name")),
                          arguments if isinstance(arguments, dict) else {},
                          meta_key if isinstance(meta_key, str) else None,
                          headers.get(HEADER_KEY), headers.get("authorization"), headers)


def _build_app(state: EffectsMcpServer) -> MCPServer:
    server: MCPServer = MCPServer("tenantry-effects", log_level="WARNING")

    async def effect(note: str, ctx: Context) -> str:
        """Perform a side effect once per idempotency key; repeats report it was done."""
        record = state.record("effect", {"note": note}, ctx)
        return f"applied {note}" if record.applied else f"already applied {note}"

    async def echo(text: str, ctx: Context) -> str:
        """Return the text unchanged."""
        state.record("echo", {"text": text}, ctx)
        return text

    async def add(a: int, b: int, ctx: Context) -> int:
        """Add two integers."""
        state.record("add", {"a": a, "b": b}, ctx)
        return a + b

    async def fail(message: str, ctx: Context) -> str:
        """Always fail with the given message (a tool error, not a protocol error)."""
        state.record("fail", {"message": message}, ctx)
        raise ToolError(message)

    async def slow(seconds: float, ctx: Context) -> str:
        """Sleep, then answer."""
        state.record("slow", {"seconds": seconds}, ctx)
        held = state._slow_gate
        await asyncio.sleep(seconds)
        if held is not None:
            await held.wait()
        return f"slept {seconds}"

    for fn in (effect, echo, add, fail, slow):
        server.add_tool(fn)

    async def stats(request: Request) -> Response:
        include_calls = request.query_params.get("calls", "true").lower() not in ("0", "false")
        return Response(orjson.dumps(state.stats(include_calls=include_calls)),
                        media_type="application/json")

    server.custom_route("/stats", methods=["GET"])(stats)
    return server


# ---------------------------------------------------------------------- process mode


async def _serve(host: str, port: int, state_file: str | None) -> None:
    server = EffectsMcpServer(host=host, port=port, state_file=state_file, handle_signals=True)
    await server.start()
    print(f"READY {server.url}", flush=True)
    await server.wait()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tenantry.testing.mcp_server",
                                     description="MCP test server counting idempotency keys.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--state", help="JSON-lines journal of calls, replayed on start")
    args = parser.parse_args(argv)
    # Configure logging before the SDK does (it installs a rich handler at INFO otherwise).
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(_serve(args.host, args.port, args.state))


if __name__ == "__main__":
    main()
