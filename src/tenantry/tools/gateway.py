"""The one place every tool call of every run goes through.

This is the engine's call path: resolve the tool to the tenant's server, refuse tools the
agent version does not allow, send the idempotency key, bound time and output, and turn
every failure into a result the model can read. Approvals, vault credentials, breakers,
fencing of output and audit (the tool-gateway issue) slot in here."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from tenantry.agents.spec import AgentSpec
from tenantry.db import Database
from tenantry.errors import ToolUnavailable
from tenantry.ids import TenantId
from tenantry.tools.mcp_client import McpToolClient
from tenantry.tools.servers import ToolServer, list_servers

#: Tool output kept in the log and shown to the model (invariant 10).
OUTPUT_CAP_BYTES = 8192
#: Retries for a server that could not be reached, with the same key each time.
UNAVAILABLE_RETRIES = 2


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What goes into ToolCompleted: ``result`` or ``error``, never both."""

    result: str | None
    error: str | None
    server: str | None
    duration_ms: float
    output_bytes: int = 0
    truncated: bool = False

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"server": self.server, "duration_ms": round(self.duration_ms, 3)}
        if self.error is not None:
            data["error"] = self.error
        else:
            data["result"] = self.result
        if self.truncated:
            data["truncated"] = True
            data["output_bytes"] = self.output_bytes
        return data


class ToolGateway:
    def __init__(
        self, db: Database, mcp: McpToolClient, *, timeout: float = 30.0,
        directory_ttl: float = 5.0,
    ) -> None:
        self._db = db
        self._mcp = mcp
        self._timeout = timeout
        self._ttl = directory_ttl
        self._directory: dict[str, tuple[float, dict[str, ToolServer]]] = {}

    async def definitions(self, tenant: TenantId, spec: AgentSpec) -> list[dict[str, Any]]:
        """The allowed tools, in the OpenAI ``tools`` shape, in the version's order."""
        directory = await self._servers(tenant)
        definitions = []
        for name in spec.tools:
            server = directory.get(name)
            if server is None:
                continue
            tool = next(t for t in server.tools if t["name"] == name)
            definitions.append({"type": "function", "function": {
                "name": name, "description": tool["description"],
                "parameters": tool["input_schema"]}})
        return definitions

    async def call(
        self, tenant: TenantId, spec: AgentSpec, tool: str, arguments: dict[str, Any], key: str
    ) -> ToolResult:
        started = time.perf_counter()

        def refused(error: str, server: str | None = None) -> ToolResult:
            return ToolResult(None, error, server, (time.perf_counter() - started) * 1000)

        if tool not in spec.tools:
            return refused(f"tool {tool!r} is not available to this agent")
        server = (await self._servers(tenant)).get(tool)
        if server is None:
            return refused(f"tool {tool!r} is not served by any registered tool server")
        for attempt in range(UNAVAILABLE_RETRIES + 1):
            try:
                outcome = await self._mcp.call(
                    server.url, tool, arguments, idempotency_key=key, timeout=self._timeout)
                break
            except ToolUnavailable as exc:
                # A call that may have reached the server is repeated only where the server
                # honours keys; one that never connected is safe to repeat anywhere.
                safe = server.honours_idempotency_keys or exc.extra.get("reason") == "connect"
                if attempt == UNAVAILABLE_RETRIES or not safe:
                    return refused(f"tool server unavailable: {exc.detail}", server.name)
                await asyncio.sleep(0.2 * 2**attempt)
        text = outcome.content
        encoded = text.encode()
        truncated = len(encoded) > OUTPUT_CAP_BYTES
        if truncated:
            text = encoded[:OUTPUT_CAP_BYTES].decode(errors="ignore")
        elapsed = (time.perf_counter() - started) * 1000
        if not outcome.ok:
            return ToolResult(None, text or outcome.error or "tool error", server.name, elapsed,
                              len(encoded), truncated)
        return ToolResult(text, None, server.name, elapsed, len(encoded), truncated)

    async def _servers(self, tenant: TenantId) -> dict[str, ToolServer]:
        """tool name → server, cached briefly: registering a server is rare, calls are not."""
        now = time.monotonic()
        cached = self._directory.get(tenant.value)
        if cached is not None and now - cached[0] < self._ttl:
            return cached[1]
        directory = {name: server for server in await list_servers(self._db, tenant)
                     for name in server.tool_names()}
        self._directory[tenant.value] = (now, directory)
        return directory
