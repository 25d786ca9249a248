"""Tool gateway overhead: the latency the gateway adds to a tool call, over calling the same
MCP server directly with the same client.

Each gateway call runs the whole pipeline — allow-list, directory lookup (cached 5 s),
breaker, vault credential (decrypted at most once a minute), the version's pin compared
with the call's own session's tool list (listed again at most once a minute),
idempotency key, the MCP call, output cap — plus the audit row the driver writes in the
ToolCompleted transaction (one statement), against a real MCP server in its own process.
The added latency of a call is its gateway wall time minus the time spent in the MCP call
inside it, measured per call. Target (issue): p99 < 5 ms on this machine.

    .venv/bin/python benchmarks/tool_gateway.py   # prints one JSON line last
"""

from __future__ import annotations

import os
import time
from typing import Any

from _harness import Bench, console, create_runs, latency_summary, main, percentile, provision
from tenantry.agents.spec import AgentSpec
from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.tools import audit
from tenantry.tools.gateway import ToolGateway
from tenantry.tools.mcp_client import McpToolClient, ToolOutcome
from tenantry.vault import MasterKey, Vault

CALLS = int(os.environ.get("TOOL_GATEWAY_CALLS", "1000"))
# The pins a version published now would hold (agents/queries.sql `current_tool_pins`).
PINS = load("tenantry.agents").current_tool_pins
WARMUP = 50


class TimedClient(McpToolClient):
    """Records how long each inner MCP call took, so the gateway's own share is exact."""

    def __init__(self) -> None:
        super().__init__()
        self.inner_ms: list[float] = []

    async def call(self, *args: Any, **kwargs: Any) -> ToolOutcome:
        started = time.perf_counter()
        try:
            return await super().call(*args, **kwargs)
        finally:
            self.inner_ms.append((time.perf_counter() - started) * 1000)


async def benchmark(bench: Bench) -> dict[str, Any]:
    database = await bench.database()
    mcp_url = await bench.mcp_server().ready()
    db = await Database.connect(database.dsn, min_size=2, max_size=4)
    try:
        tenancy = await provision(db, mcp_url, ("echo",))
        vault = Vault(db, MasterKey.generate())
        await vault.put(tenancy.tenant, "token", "bench-credential")
        async with db.tenant_tx(tenancy.tenant) as conn:  # the server needs the credential
            await conn.execute("UPDATE tool_servers SET secret_ref = 'token'")
        spec = AgentSpec(model="scripted", system_prompt="", tools=("echo",))
        async with db.tenant_tx(tenancy.tenant) as conn:  # what publishing the version pins
            pins = {r["tool"]: {"server": r["server"], "sha256": r["sha256"]}
                    for r in await conn.fetch(PINS, tenancy.tenant.value, ["echo"])}
        if "echo" not in pins:
            raise RuntimeError("the benchmark's tool server does not serve echo")
        [run] = await create_runs(db, tenancy, ["gateway benchmark"])
        async with TimedClient() as mcp:
            gateway = ToolGateway(db, mcp, vault=vault)
            headers = {"Authorization": "Bearer bench-credential"}
            direct: list[float] = []
            added: list[float] = []
            console.log(f"{CALLS} direct calls, then {CALLS} through the gateway")
            for i in range(WARMUP + CALLS):
                started = time.perf_counter()
                await mcp.call(mcp_url, "echo", {"text": "ping"}, idempotency_key=f"d{i}",
                               headers=headers, tenant=tenancy.tenant)
                if i >= WARMUP:
                    direct.append((time.perf_counter() - started) * 1000)
            mcp.inner_ms.clear()
            async with db.tenant_tx(tenancy.tenant) as conn:
                for i in range(WARMUP + CALLS):
                    started = time.perf_counter()
                    key = f"{run}:{i}:0"
                    result = await gateway.call(tenancy.tenant, spec, "echo", {"text": "ping"},
                                                key, run=run, pins=pins)
                    # The driver writes the audit row inside the ToolCompleted transaction:
                    # one more statement in a transaction it opens anyway.
                    await audit.record(conn, tenancy.tenant, run,
                                       result.audit("echo", key, {"text": "ping"}))
                    total = (time.perf_counter() - started) * 1000
                    if result.error is not None:
                        raise RuntimeError(f"gateway call failed: {result.error}")
                    if i >= WARMUP:
                        added.append(total - mcp.inner_ms[-1])
    finally:
        await db.close()
    summary = latency_summary(added)
    ordered = sorted(direct)
    return {
        "p50_ms": summary["p50_ms"], "p99_ms": summary["p99_ms"],
        "per_s": round(1000 / (sum(added) / len(added) + sum(direct) / len(direct)), 1),
        "calls": CALLS,
        "direct_p50_ms": round(percentile(ordered, 0.50), 2),
        "direct_p99_ms": round(percentile(ordered, 0.99), 2),
        "postgres": database.kind,
    }


if __name__ == "__main__":
    raise SystemExit(main("tool_gateway", benchmark))
