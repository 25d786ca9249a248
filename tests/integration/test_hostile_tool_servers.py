"""A hostile tenant's tool server against a shared worker (docs/reference/security.md, "Tool
servers"): a real ``tenantry worker`` process at its production lease and pool, tenant A's runs
calling a server that floods each call with server-to-client requests or notifications, answers past
the size cap, or answers with JSON built to cost thirty times its size, while tenant B's runs call
an ordinary MCP server on the same worker.

What must hold: every run of both tenants finishes (A's model reads a tool error naming the
bound its server broke); the flood got at most a handful of replies; no lease of B's was
lost; B's tool calls kept their pace; and the worker's peak memory stayed within the bound
docs/reference/security.md states for one tenant's servers (its calls in flight on one worker,
``MAX_CALLS_PER_TENANT``, times the 4 MiB an answer may take, plus one answer's parsing)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest

from tenantry.errors import ToolUnavailable
from tenantry.ids import TenantId
from tenantry.testing import EffectsMcpServer
from tenantry.tools._mcp_messages import MAX_ANSWER_BYTES, MAX_REPLIES_IN_FLIGHT
from tenantry.tools.mcp_client import MAX_CALLS_PER_TENANT, McpToolClient, ToolOutcome
from tests.support.api import TEST_MASTER_KEY, Api
from tests.support.harness import WorkerFleet
from tests.support.hostile_mcp import TOOLS, HostileMcpServer
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes

#: Attack runs per tool, all in flight at once: together they fill tenant A's calls in flight.
RUNS_PER_ATTACK = MAX_CALLS_PER_TENANT // len(TOOLS)
BYSTANDER_RUNS = 20
MIB = 1024 * 1024
#: What one tenant's servers may add to a worker's peak memory: its answers in flight, one
#: answer parsed (about fifteen times its bytes, jsonutil.BYTES_PER_VALUE) and room for the
#: allocator's slack.
RSS_BOUND = MAX_CALLS_PER_TENANT * MAX_ANSWER_BYTES + 16 * MAX_ANSWER_BYTES + 64 * MIB
#: Tool calls of the bystander to an MCP server on loopback take milliseconds; before the
#: bounds, a worker answering a flood lagged 20 s and more. A liveness bound, far above both
#: the normal pace and any scheduling noise of a loaded 2-core machine.
BYSTANDER_CALL_BOUND_MS = 5_000


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


@pytest.mark.timeout(300)
async def test_a_hostile_tool_server_leaves_other_tenants_runs_alone(
    api: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    async with HostileMcpServer() as hostile:
        tenant_a, h_a = await api.tenant("Hostile")
        await api.tool_server(tenant_a, hostile.url, name="hostile")
        agent_a = await api.agent(h_a, tools=list(TOOLS))
        tenant_b, h_b = await api.tenant("Bystander")
        await api.tool_server(tenant_b, fakes.mcp.url)
        agent_b = await api.agent(h_b, tools=["effect"])

        async with WorkerFleet(dsn=database_dsn, model_url=fakes.model.base_url,
                               log_dir=tmp_path, size=1, concurrency=100, lease_seconds=None,
                               pool_max=None, master_key=TEST_MASTER_KEY.encoded()) as fleet:
            await fleet.start()
            worker = fleet.live[0]
            idle_kib = _status_kib(worker.pid, "VmRSS")
            for tool in TOOLS:
                for _ in range(RUNS_PER_ATTACK):
                    await api.start(h_a, agent_a, scripted(call(tool), answer("survived")))
            for i in range(BYSTANDER_RUNS):
                await api.start(h_b, agent_b, scripted(
                    call("effect", note=f"b{i}-1"), call("effect", note=f"b{i}-2"),
                    answer("ok")))

            async def all_ended() -> bool:
                left = await admin_conn.fetchval(
                    "SELECT count(*) FROM runs WHERE status NOT IN "
                    "('finished', 'failed', 'cancelled')")
                return left == 0 or worker.exited

            await until(all_ended, "every run ended", within=240, details=fleet.tails)
            peak_kib = _status_kib(worker.pid, "VmHWM")
            assert not worker.exited, fleet.tails()
            lost = [line for line in worker.log().splitlines() if b"lease lost" in line]

    statuses = dict(await admin_conn.fetch(
        "SELECT tenant_id, array_agg(DISTINCT status) FROM runs GROUP BY tenant_id"))
    assert statuses == {tenant_a: ["finished"], tenant_b: ["finished"]}

    # A's model read why each call failed; its server got no more of the worker than that.
    errors = sorted(await admin_conn.fetchval(
        "SELECT array_agg(DISTINCT data->>'error') FROM run_events "
        "WHERE tenant_id = $1 AND type = 'ToolCompleted'", tenant_a))
    assert len(errors) == len(TOOLS), errors
    assert any("faster than they can be answered" in e for e in errors)
    assert any("allowance of messages" in e for e in errors)
    assert any(f"larger than {MAX_ANSWER_BYTES} bytes" in e for e in errors)
    assert any("too dense to read" in e for e in errors)
    assert hostile.replies <= RUNS_PER_ATTACK * MAX_REPLIES_IN_FLIGHT * 2
    assert hostile.calls.count("flood") == RUNS_PER_ATTACK  # a tool error: never retried

    # B's runs kept their leases and their pace.
    assert lost == []
    durations = [row["ms"] for row in await admin_conn.fetch(
        "SELECT (data->>'duration_ms')::float AS ms FROM run_events "
        "WHERE tenant_id = $1 AND type = 'ToolCompleted'", tenant_b)]
    assert len(durations) == 2 * BYSTANDER_RUNS
    assert max(durations) < BYSTANDER_CALL_BOUND_MS, sorted(durations)[-5:]
    assert all(r == "ok" for r in await admin_conn.fetchval(
        "SELECT array_agg(answer #>> '{}') FROM runs WHERE tenant_id = $1", tenant_b))

    # The worker's peak memory, over its memory when idle, within the stated bound.
    assert (peak_kib - idle_kib) * 1024 < RSS_BOUND, (
        f"peak {peak_kib // 1024} MiB, idle {idle_kib // 1024} MiB")


async def test_a_tenants_calls_in_flight_are_capped_on_a_worker_and_no_one_else_waits() -> None:
    """What bounds one tenant's share of a worker's answers: past its slots, its next call
    waits (and gives up at its own deadline), while another tenant's call goes straight on."""
    a, b = TenantId.parse("tenant-a"), TenantId.parse("tenant-b")
    async with EffectsMcpServer() as server, McpToolClient(max_calls_per_tenant=1) as mcp:
        held = asyncio.create_task(mcp.call(server.url, "slow", {"seconds": 60}, tenant=a,
                                            timeout=120))
        await until(_recorded(server, "slow"), "A's slow call reached the server", within=10)
        assert await mcp.call(server.url, "echo", {"text": "b"}, tenant=b) == \
            ToolOutcome(True, "b")
        with pytest.raises(ToolUnavailable, match="calls in flight on this worker"):
            await mcp.call(server.url, "echo", {"text": "a"}, tenant=a, timeout=0.5)
        assert [c.tool for c in server.calls] == ["slow", "echo"]  # A's second never left
        held.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await held
        # The slot came back with the cancelled call.
        assert await mcp.call(server.url, "echo", {"text": "a"}, tenant=a) == \
            ToolOutcome(True, "a")


async def test_an_answer_nested_past_the_parsers_depth_is_refused_with_a_clear_reason() -> None:
    """100,000 levels of nesting in 900 KB: refused at the parser's depth bound (1,024
    levels) as an answer that cannot be parsed, never a crash of the worker's stack; the
    server's next answer is read as usual."""
    async with HostileMcpServer() as server, McpToolClient() as mcp:
        with pytest.raises(ToolUnavailable, match="cannot parse the server's answer: depth"):
            await mcp.call(server.url, "deep", {}, tenant=TenantId.parse("tenant-a"))
        after = await mcp.call(server.url, "dense", {}, tenant=TenantId.parse("tenant-a"))
        assert not after.ok and "too dense" in (after.error or "")
    assert server.calls == ["deep", "dense"]


def _recorded(server: EffectsMcpServer, tool: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return any(c.tool == tool for c in server.calls)
    return check
