"""router: what `tenantry router` adds to a simple authenticated request.

One cell — its own Postgres cluster (tests/support/pgcluster.py), `tenantry migrate`,
`tenantry api` (TENANTRY_CELL=bench-1, region bench) — and a `tenantry router` process on a
directory database of its own in the same cluster, the cell registered with `tenantry cells
add`. A tenant and key are created through the router; then ``--requests`` rounds, each one
`GET /v1/agents` (authenticated, one agent) straight to the cell and one through the router,
alternating so both see the same machine. One keep-alive client each; the router's route
is cached after the first request (as in steady state). Warm-up rounds are not counted.

Progress on stderr; the last stdout line is one JSON object:
``{"router_p50_ms", "router_p99_ms", "direct_p50_ms", "direct_p99_ms", "requests"}``.

    .venv/bin/python benchmarks/router.py [--requests 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import asyncpg
import httpx2

from _harness import console, emit, percentile

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support.api_process import OPERATOR_TOKEN, api_process  # noqa: E402
from tests.support.cells import ROUTER_TOKEN, start_router  # noqa: E402
from tests.support.harness import tenantry_command, worker_env  # noqa: E402
from tests.support.outage import migrate  # noqa: E402
from tests.support.pgcluster import PgCluster  # noqa: E402

WARM_UP = 100


async def bench(requests: int, root: Path) -> dict[str, float | int]:
    with PgCluster(root / "pg") as cluster:
        await migrate(cluster.dsn(), root)
        admin = await asyncpg.connect(cluster.dsn())
        await admin.execute("CREATE DATABASE directory")
        await admin.close()
        directory = cluster.dsn("directory")
        identity = {"TENANTRY_CELL": "bench-1", "TENANTRY_REGION": "bench"}
        async with api_process(cluster.dsn(), root / "api", env=identity) as api:
            env = worker_env(root / "cli", lease_seconds=None, pool_max=None)
            env["TENANTRY_DIRECTORY_URL"] = directory
            added = await asyncio.create_subprocess_exec(
                *tenantry_command(), "cells", "add", "bench-1", "--region", "bench",
                "--api-url", api.base_url, "--operator-token", OPERATOR_TOKEN, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await added.communicate()
            if added.returncode != 0:
                raise RuntimeError((out + err).decode())
            router = await start_router(directory, root / "router")
            try:
                return await _measure(api.base_url, router.base_url, requests)
            finally:
                await router.stop()


async def _measure(cell_url: str, router_url: str, requests: int) -> dict[str, float | int]:
    operator = {"Authorization": f"Bearer {ROUTER_TOKEN}"}
    async with httpx2.AsyncClient(base_url=router_url, timeout=30) as via, \
            httpx2.AsyncClient(base_url=cell_url, timeout=30) as direct:
        r = await via.post("/admin/v1/tenants", headers=operator,
                           json={"name": "Bench", "region": "bench"})
        r.raise_for_status()
        tenant = r.json()["tenant_id"]
        r = await via.post(f"/admin/v1/tenants/{tenant}/api-keys", headers=operator)
        r.raise_for_status()
        key = {"Authorization": f"Bearer {r.json()['api_key']}"}
        r = await via.post("/v1/agents", headers=key, json={
            "name": "bench", "model": "scripted", "system_prompt": "Be brief."})
        r.raise_for_status()
        timings: dict[str, list[float]] = {"router": [], "direct": []}
        for i in range(WARM_UP + requests):
            for name, client in (("direct", direct), ("router", via)):
                started = time.perf_counter()
                r = await client.get("/v1/agents", headers=key)
                elapsed = (time.perf_counter() - started) * 1000
                if r.status_code != 200:
                    raise RuntimeError(f"{name}: {r.status_code} {r.text[:200]}")
                if i >= WARM_UP:
                    timings[name].append(elapsed)
            if i and i % 500 == 0:
                console.log(f"{i} rounds")
    router, direct_ms = sorted(timings["router"]), sorted(timings["direct"])
    return {"router_p50_ms": round(percentile(router, 0.5), 3),
            "router_p99_ms": round(percentile(router, 0.99), 3),
            "direct_p50_ms": round(percentile(direct_ms, 0.5), 3),
            "direct_p99_ms": round(percentile(direct_ms, 0.99), 3),
            "requests": requests}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tenantry-bench-router-") as tmp:
        result = asyncio.run(bench(args.requests, Path(tmp)))
    emit(result)


if __name__ == "__main__":
    main()
