"""chaos: 1,000 runs while worker processes are killed with SIGKILL at random moments.

Starts its own platform: a fresh migrated database (on ``TENANTRY_DATABASE_URL`` if set, else
an embedded Postgres in a temp dir), the HTTP API in this process, the fake model server and
the MCP test server (which counts idempotency keys and performs each key's effect once) in
this process, and 4 ``tenantry worker`` processes at the production lease (30 s: a killed
worker's runs move at the next claim, ADR 0018). It creates 1,000 runs through
the API across 4 tenants - each makes three keyed ``effect`` calls (some also a ``slow``
one; every fifth also a call of ``echo``, a tool the server has and the agent may not use,
as a model obeying injected text would) then answers - and every 0.5-2 s SIGKILLs a random
worker and starts a replacement, until every run has ended. Then it checks what the chaos
test checks (tests/chaos): every run finished, no gap in any log, no step twice, every
effect exactly once, and no call reached the server that its run's rules forbid.

Progress goes to stderr; the last stdout line is one JSON object:
``{"runs", "finished", "kills", "duplicate_effects", "gaps", "failed", "escapes",
"forbidden_calls", "refused_calls", "seconds", ...}`` (``seconds``: from the first run created
to the last one ended; ``escapes``: calls the server received that a rule forbade,
tests/support/escapes.py). Exit status 1 when any invariant broke. CHAOS_SEED replays a
kill schedule (timing still varies). It fails too when the chaos reached too little: fewer
than 10 kills, no run moved to another worker, or no call cut off and repeated with its key.
``make gate`` runs this beside the replay gate (benchmarks/gate.py); the suite's chaos tests
(tests/chaos) keep what the gate does not check, with the same harness.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
import uvicorn
from starlette.requests import ClientDisconnect

from _harness import Bench, console, emit
from tenantry.bootstrap.api import build_app
from tenantry.bootstrap.http_server import ApiServer
from tenantry.config import Settings
from tenantry.testing.fake_model import FakeModelServer
from tenantry.testing.mcp_server import EffectsMcpServer
from tenantry.vault import MasterKey

# The workload and the checks are the chaos test's own (tests/support/harness.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.harness import (
    FORBIDDEN,
    ChaosError,
    PlannedRun,
    Verdict,
    WorkerFleet,
    create_runs,
    create_tenants,
    kill_until_done,
    plan_runs,
    verify,
)

RUNS = 1000
#: Every fifth run also calls a tool its agent may not use, as injected text asks: the
#: gateway must refuse each, whatever the kills (0 tool-rule escapes).
FORBIDDEN_EVERY = 5
#: Fewer kills than this at 1,000 runs and the run tested little (it fails); 17-57 so far.
MIN_KILLS = 10
TENANTS = 4
WORKERS = 4
CONCURRENCY = 50  # per worker: 200 runs in flight, so every kill interrupts many
TIMEOUT_S = 600.0
PROGRESS_EVERY_S = 5.0
OPERATOR_TOKEN = "op_benchmark_chaos"


class _SkipClientDisconnects(logging.Filter):
    """A worker killed mid-request leaves the servers in this process a request whose client
    is gone: that is the experiment working, not an error worth a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], ClientDisconnect))


@asynccontextmanager
async def serve_api(dsn: str, master_key: str) -> AsyncIterator[str]:
    """The real HTTP app on a loopback port of its own, in this process."""
    settings = Settings(database_url=dsn, operator_token=OPERATOR_TOKEN, db_pool_min=1,
                        db_pool_max=10, master_key=master_key)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(build_app(settings, dsn), log_config=None, access_log=False,
                            lifespan="on")
    server = ApiServer(config)  # leaves SIGINT to asyncio.run: Ctrl-C cleans up in order
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("the API did not start")
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


async def chaos(bench: Bench, runs_total: int = RUNS, seed: int | None = None
                ) -> dict[str, Any]:
    """The chaos run on ``bench``'s platform: its JSON figures, ``"ok"`` saying whether
    every invariant held (benchmarks/gate.py runs this too, as the release gate)."""
    if seed is None:
        seed = int(os.environ.get("CHAOS_SEED") or random.randrange(2**32))
    rng = random.Random(seed)
    database = await bench.database()
    master_key = MasterKey.generate().encoded()
    async with (
        FakeModelServer() as model,
        EffectsMcpServer() as mcp,
        serve_api(database.dsn, master_key) as base_url,
        httpx2.AsyncClient(base_url=base_url, timeout=30) as client,
        WorkerFleet(dsn=database.dsn, model_url=model.base_url,
                    log_dir=bench.workdir / "workers", size=WORKERS, concurrency=CONCURRENCY,
                    lease_seconds=None, master_key=master_key) as fleet,
    ):
        console.log(f"starting {WORKERS} workers (CHAOS_SEED={seed})")
        await fleet.start()
        tenants = await create_tenants(client, {"Authorization": f"Bearer {OPERATOR_TOKEN}"},
                                       mcp.url, TENANTS)
        runs: dict[str, PlannedRun] = {}
        shown = time.monotonic()

        def progress(ended: int, kills: int, elapsed: float) -> None:
            nonlocal shown
            if time.monotonic() - shown >= PROGRESS_EVERY_S:
                shown = time.monotonic()
                console.log(f"{ended}/{runs_total} runs ended, {kills} kills, {elapsed:.0f} s")

        console.log(f"creating {runs_total} runs; killing a worker every 0.5-2 s until all end")
        conn = await asyncpg.connect(database.dsn)
        broken: str | None = None
        started = time.monotonic()
        plans = plan_runs(runs_total, rng, forbidden_every=FORBIDDEN_EVERY)
        try:
            seconds = await kill_until_done(
                fleet, conn, rng, total=runs_total, timeout=TIMEOUT_S, progress=progress,
                arrivals=create_runs(client, tenants, plans, runs))
        except (ChaosError, httpx2.HTTPError) as exc:
            broken = f"{type(exc).__name__}: {exc}"
            seconds = time.monotonic() - started
        await fleet.stop()  # every worker gone: nothing writes while we check
        try:
            verdict = await verify(conn, runs, mcp)
        finally:
            await conn.close()
        # Runs the API never accepted (a chaos error stopped creation) did not finish.
        verdict.failed += runs_total - len(runs)
        # The chaos must also have reached what it is there for (else a pass proves little):
        # kills, runs that moved to another worker, calls cut off and repeated with their key.
        reached = (fleet.kills >= MIN_KILLS and verdict.resumed_runs > 0
                   and verdict.retried_calls > 0)
        clean = broken is None and verdict.ok and verdict.finished == runs_total
        # A trial of fewer runs may end before the kills do much: it says so, not fails.
        ok = clean and (reached or runs_total < RUNS)
        if not reached:
            console.log(f"[red]the chaos reached too little (CHAOS_SEED={seed}): {fleet.kills} "
                        f"kills (at least {MIN_KILLS}), {verdict.resumed_runs} runs moved, "
                        f"{verdict.retried_calls} calls repeated (each must be > 0)")
        if not clean:
            console.log(f"[red]not every run finished cleanly (CHAOS_SEED={seed}); logs follow")
            console.log(broken or "", verdict.describe(), fleet.tails(), markup=False)
        if ok:
            console.log(f"all {runs_total} runs finished; {_summary(verdict)}")
        return {"runs": runs_total, "finished": verdict.finished, "kills": fleet.kills,
                "duplicate_effects": verdict.duplicate_effects, "gaps": verdict.gaps,
                "failed": verdict.failed, "escapes": verdict.escapes,
                "forbidden_calls": sum(p.calls.count((FORBIDDEN,)) for p in plans),
                "refused_calls": verdict.refused_calls,
                "tool_calls_received": len(mcp.calls), "resumed_runs": verdict.resumed_runs,
                "retried_calls": verdict.retried_calls, "seconds": round(seconds, 1),
                "seed": seed, "ok": ok}


def _summary(verdict: Verdict) -> str:
    return (f"{verdict.resumed_runs} runs moved between workers, {verdict.retried_calls} "
            f"tool calls repeated with the same key after a kill, {verdict.refused_calls} "
            f"calls of {FORBIDDEN!r} (not allowed) refused, {verdict.escapes} escapes")


def quiet_logs() -> None:
    # Before the MCP server is built: its SDK would install a rich handler at INFO otherwise.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("uvicorn.error").addFilter(_SkipClientDisconnects())


def main() -> None:
    quiet_logs()
    with Bench("chaos") as bench:
        result = asyncio.run(chaos(bench))
    emit(result)
    raise SystemExit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
