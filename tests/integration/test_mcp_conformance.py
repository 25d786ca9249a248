"""The platform's own MCP client (tenantry.tools.mcp_client, written without the SDK) against
the official Python SDK's server in both protocol generations — 2026-07-28 with
``server/discover``, and the ``initialize`` handshake with session ids — and against a
third-party server, the reference TypeScript ``server-everything`` run with node."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tenantry.errors import ToolUnavailable
from tenantry.ids import TenantId
from tenantry.testing import EffectsMcpServer
from tenantry.tools.mcp_client import McpToolClient, ToolOutcome
from tests.support.api import Api
from tests.support.mcp_everything import everything_server, needs_node
from tests.support.session_server import LegacyEffectsMcpServer, SessionStateMcpServer


@pytest.fixture
async def mcp() -> AsyncIterator[McpToolClient]:
    async with McpToolClient() as client:
        yield client


def test_the_client_does_not_import_the_sdk() -> None:
    """The worker's tool and model paths must not pay for importing the SDK (most of a
    worker's start), nor a general HTTP stack."""
    probe = ("import sys, tenantry.tools.mcp_client, tenantry.tools.gateway, "
             "tenantry.models.openai_compat, tenantry.models.anthropic\n"
             "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
             "('mcp', 'mcp_types', 'anyio', 'httpcore', 'httpx2', 'pydantic'))\n"
             "print(heavy)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


# ---------------------------------------------------------------------- the SDK, 2026-07-28


async def test_a_modern_sdk_server_is_spoken_to_in_2026_07_28(mcp: McpToolClient) -> None:
    async with EffectsMcpServer() as server:
        outcome = await mcp.call(server.url, "effect", {"note": "pay"}, idempotency_key="k1")
        assert outcome == ToolOutcome(True, "applied pay")
        [call] = server.calls
        assert call.headers["mcp-protocol-version"] == "2026-07-28"
        assert call.headers["mcp-method"] == "tools/call"
        assert call.headers["mcp-name"] == "effect"
        assert "mcp-session-id" not in call.headers  # the modern protocol has no sessions
        assert (call.meta_key, call.header_key) == ("k1", "k1")


async def test_concurrent_calls_share_one_session_and_few_connections(
    mcp: McpToolClient,
) -> None:
    import asyncio

    async with EffectsMcpServer() as server:
        outcomes = await asyncio.gather(*(
            mcp.call(server.url, "add", {"a": i, "b": 1}) for i in range(20)))
        assert [o.content for o in outcomes] == [str(i + 1) for i in range(20)]
        assert mcp.open_connections == 1
        # And after the burst, calls one at a time reuse a pooled connection.
        for i in range(5):
            assert (await mcp.call(server.url, "echo", {"text": str(i)})).content == str(i)


async def test_list_tools_reads_names_and_schemas(mcp: McpToolClient) -> None:
    async with EffectsMcpServer() as server:
        tools = await mcp.list_tools(server.url)
        assert {t["name"] for t in tools} == {"effect", "echo", "add", "fail", "slow"}
        assert all(isinstance(t["input_schema"], dict) for t in tools)


# ---------------------------------------------------------------------- the SDK, handshake


async def test_a_legacy_sdk_server_gets_the_handshake_and_a_session(
    mcp: McpToolClient,
) -> None:
    async with LegacyEffectsMcpServer() as server:
        first = await mcp.call(server.url, "effect", {"note": "x"}, idempotency_key="k2")
        second = await mcp.call(server.url, "effect", {"note": "x"}, idempotency_key="k2")
        assert (first, second) == (ToolOutcome(True, "applied x"),
                                   ToolOutcome(True, "already applied x"))
        assert [c.headers["mcp-protocol-version"] for c in server.calls] == ["2025-11-25"] * 2
        sessions = {c.headers.get("mcp-session-id") for c in server.calls}
        assert len(sessions) == 1 and None not in sessions  # one session, carried each time
        assert [(c.meta_key, c.header_key) for c in server.calls] == [("k2", "k2")] * 2
        failed = await mcp.call(server.url, "fail", {"message": "declined"})
        assert not failed.ok and failed.error is not None and "declined" in failed.error
        unknown = await mcp.call(server.url, "no_such_tool", {})
        assert not unknown.ok and "no_such_tool" in (unknown.error or "")


async def test_a_server_known_to_speak_the_handshake_is_initialized_first() -> None:
    """The 2025 lifecycle: ``initialize`` is the first thing a client sends. Only a first
    contact with a server of unknown generation probes ``server/discover``; once its
    generation is known — stored with the server (``modern=False``), or learned by this
    process — every new session starts with the handshake."""
    async with LegacyEffectsMcpServer() as server:
        async with McpToolClient() as told:
            await told.call(server.url, "echo", {"text": "a"}, tenant=TenantId("t1"),
                            modern=False)
        assert server.methods[0] == "initialize" and "server/discover" not in server.methods

        server.methods.clear()
        async with McpToolClient() as learning:
            await learning.call(server.url, "echo", {"text": "a"}, tenant=TenantId("t1"))
            assert server.methods[:2] == ["server/discover", "initialize"]  # first contact
            assert learning.speaks_modern(server.url) is False
            server.methods.clear()
            # Another tenant's session (its own, never shared): the handshake first.
            await learning.call(server.url, "echo", {"text": "b"}, tenant=TenantId("t2"))
        assert server.methods[0] == "initialize" and "server/discover" not in server.methods


async def test_registering_stores_the_generation_a_server_speaks(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    """What a worker's first session to the server then starts with (migration 0047)."""
    async with LegacyEffectsMcpServer() as legacy, EffectsMcpServer() as modern:
        tenant, _ = await api.tenant()
        await api.tool_server(tenant, legacy.url, name="legacy")
        other, _ = await api.tenant("Other")
        await api.tool_server(other, modern.url, name="modern")
    stored = {r["name"]: r["speaks_modern"]
              for r in await admin_conn.fetch("SELECT name, speaks_modern FROM tool_servers")}
    assert stored == {"legacy": False, "modern": True}


async def test_a_forgotten_session_is_replaced_without_failing_the_call(
    mcp: McpToolClient,
) -> None:
    """A legacy server that restarts forgets its sessions and answers 404 to ours: the client
    opens a new session and the call goes through on it (the 404 means nothing ran)."""
    tenant = TenantId.parse("tenant-a")
    first = SessionStateMcpServer()
    async with first:
        url, port = first.url, int(first.url.split(":")[2].split("/")[0])
        assert (await mcp.call(url, "remember", {"note": "n1"}, tenant=tenant)).ok
    async with SessionStateMcpServer(port=port) as second:
        # The pooled session's id means nothing to the new server process.
        recalled = await mcp.call(url, "recall", {}, tenant=tenant)
        assert recalled == ToolOutcome(True, "nothing remembered")
        assert (await mcp.call(url, "remember", {"note": "n2"}, tenant=tenant)).ok
        assert (await mcp.call(url, "recall", {}, tenant=tenant)).content == "n2"
        assert second.sessions == 1


async def test_a_request_from_the_server_gets_an_error_answer_not_silence(
    mcp: McpToolClient,
) -> None:
    """The client answers a ping, and serves no sampling, elicitation or roots: it must say
    so, or the tool would wait for an answer until its own timeout."""
    async with SessionStateMcpServer(asks_client=True) as server:
        outcome = await mcp.call(server.url, "ask_client", {}, timeout=10)
        assert outcome.ok
        assert outcome.content.startswith("pinged; the client refused to elicit")


async def test_an_unreachable_legacy_server_is_unavailable(mcp: McpToolClient) -> None:
    server = LegacyEffectsMcpServer()
    await server.start()
    url = server.url
    await server.stop()
    with pytest.raises(ToolUnavailable) as caught:
        await mcp.call(url, "echo", {"text": "x"})
    assert caught.value.extra["reason"] == "connect"


# ---------------------------------------------------------------------- third party


@needs_node
async def test_the_reference_typescript_server(mcp: McpToolClient) -> None:
    """``server-everything`` (TypeScript SDK): no ``server/discover`` (it answers 400 without
    a session), so the handshake; its answers come as event streams with event ids."""
    async with everything_server() as url:
        tools = {t["name"]: t for t in await mcp.list_tools(url)}
        assert {"echo", "get-sum", "get-tiny-image"} <= tools.keys()
        assert tools["echo"]["input_schema"]["properties"].keys() == {"message"}
        echoed = await mcp.call(url, "echo", {"message": "hello"}, idempotency_key="k3")
        assert echoed == ToolOutcome(True, "Echo: hello")
        summed = await mcp.call(url, "get-sum", {"a": 2, "b": 40})
        assert summed.ok and "42" in summed.content
        image = await mcp.call(url, "get-tiny-image", {})
        assert image.ok and "[image content]" in image.content
        bad = await mcp.call(url, "get-sum", {"a": "two"})
        assert not bad.ok
        unknown = await mcp.call(url, "no_such_tool", {})
        assert not unknown.ok
        # Every call went on one session.
        assert mcp.open_connections == 1
        listed = await mcp.session_tools(url, max_age=3600)
        assert {t["name"] for t in listed} == tools.keys()
