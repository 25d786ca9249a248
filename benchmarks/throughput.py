"""throughput: durable agent steps per second with 1, 2 and 4 worker processes on one
Postgres, against what that Postgres itself can durably write.

A step is one model call or one tool call, saved (its event appended and committed) before
the run moves on. Mirrors the peer figure (shared/notes/peer-figures.md): 300 runs of 5
steps — the script ``echo → echo → answer``: 3 model calls, 2 tool calls — with 20 in flight,
the instant OpenAI-format fake model (``tenantry.testing.fake_model``) and the MCP test server
(``tenantry.testing.mcp_server``) each in their own process.

Set-up: a fresh database per pass (``TENANTRY_DATABASE_URL``'s server, else an embedded
Postgres), one tenant whose policy holds every run, and ``tenantry worker --processes N
--concurrency 20/N`` (so 20 in flight in all, shared evenly). All runs are queued and held
back before the workers start; once every worker process logged ``worker started`` they are
released at once. ``steps_per_s`` is the model and tool events of the pass divided by the
time from the release to the last event (both Postgres clock readings).

The ceiling, in the same run on the same server: single-row INSERTs into a table with a
primary key, each its own transaction (autocommit), from 20 asyncpg connections for
``THROUGHPUT_RAW_SECONDS`` (5); ``fsync`` and ``synchronous_commit`` as the server has them
(reported; on for a meaningful ceiling). ``ratio`` is the best steps/s over that rate.

``cpu`` gives, per pass, each process's share of a core (``workers``: the supervisor and its
worker processes), the rest of the machine's (``others``) and the share of time some task
waited for a CPU (``stalled``): on a 2-core machine 4 processes cannot run 4x, and figures
from a busy machine are not comparable with a quiet one's.

Prints progress on stderr and one JSON line last on stdout:
``{"steps_per_s": {"1", "2", "4"}, "raw_insert_per_s", "ratio", ...}``.
Environment overrides: THROUGHPUT_RUNS (300), THROUGHPUT_IN_FLIGHT (20),
THROUGHPUT_PROCESSES ("1,2,4"), THROUGHPUT_RAW_SECONDS (5).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import asyncpg
import orjson

from _harness import (
    Bench,
    BenchDatabase,
    CpuMeter,
    Helper,
    console,
    cpu_seconds,
    create_runs,
    env_positive,
    main,
    provision,
    read_log,
    scripted_input,
    source_state,
    tenantry_command,
    tree_cpu_seconds,
)
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.scheduler.policy import TenantPolicy, set_policy

RAW_CONNECTIONS = 20
FINISH_TIMEOUT_S = 600.0
STEP_EVENTS = ("ModelReplied", "ToolCompleted")
TERMINAL = ("finished", "failed", "cancelled")
SCRIPT = [
    {"tool_calls": [{"name": "echo", "arguments": {"text": "{input}"}}]},
    {"tool_calls": [{"name": "echo", "arguments": {"text": "{last_tool_result}"}}]},
    {"text": "done: {last_tool_result}"},
]


def _config() -> tuple[int, int, list[int], float]:
    runs = int(env_positive("THROUGHPUT_RUNS", 300))
    in_flight = int(env_positive("THROUGHPUT_IN_FLIGHT", 20))
    raw = os.environ.get("THROUGHPUT_PROCESSES", "1,2,4")
    try:
        processes = [int(n) for n in raw.split(",")]
    except ValueError:
        raise SystemExit(f"THROUGHPUT_PROCESSES is a comma-separated list, got {raw!r}") from None
    if not processes or min(processes) < 1 or max(processes) > in_flight:
        raise SystemExit(f"THROUGHPUT_PROCESSES must be 1..{in_flight}, got {raw!r}")
    return runs, in_flight, processes, env_positive("THROUGHPUT_RAW_SECONDS", 5.0)


async def raw_insert_rate(dsn: str, seconds: float) -> dict[str, Any]:
    """Durable single-row INSERTs per second: 20 connections, one transaction per row."""
    setup = await asyncpg.connect(dsn)
    try:
        await setup.execute("CREATE TABLE raw_inserts (id bigint GENERATED ALWAYS AS IDENTITY "
                            "PRIMARY KEY, payload jsonb NOT NULL, at timestamptz NOT NULL "
                            "DEFAULT now())")
        server = {name: await setup.fetchval(f"SHOW {name}")
                  for name in ("fsync", "synchronous_commit", "server_version")}
    finally:
        await setup.close()
    connections = [await asyncpg.connect(dsn) for _ in range(RAW_CONNECTIONS)]
    deadline = time.perf_counter() + seconds
    counts = [0] * RAW_CONNECTIONS

    async def insert(index: int, conn: asyncpg.Connection) -> None:
        statement = await conn.prepare("INSERT INTO raw_inserts (payload) VALUES ($1::jsonb)")
        while time.perf_counter() < deadline:
            await statement.fetch('{"step": "model", "n": 1}')
            counts[index] += 1

    try:
        started = time.perf_counter()
        await asyncio.gather(*(insert(i, c) for i, c in enumerate(connections)))
        elapsed = time.perf_counter() - started
    finally:
        await asyncio.gather(*(c.close() for c in connections))
    return {"per_s": round(sum(counts) / elapsed, 1), "rows": sum(counts), **server}


async def _pass(bench: Bench, database: BenchDatabase, model: Helper, mcp: Helper,
                mcp_url: str, model_url: str, processes: int, runs: int,
                in_flight: int) -> dict[str, Any]:
    settings = Settings.from_env()
    db = await Database.connect(database.dsn, role=settings.db_role or None, min_size=1,
                                max_size=8)
    try:
        tenancy = await provision(db, mcp_url, ("echo",))
        # The workers' concurrency is the cap measured here, not the tenant's policy.
        await set_policy(db, tenancy.tenant, TenantPolicy(max_running=runs,
                                                          max_queued=max(runs, 10_000)))
        ids = await create_runs(db, tenancy, [scripted_input(SCRIPT, f"run-{i}")
                                              for i in range(runs)])
    finally:
        await db.close()
    admin = await asyncpg.connect(database.dsn)
    try:
        await admin.execute("UPDATE runs SET available_at = 'infinity'")
        worker = bench.start(
            f"worker-{processes}",
            tenantry_command("worker", "--processes", str(processes),
                             "--concurrency", str(in_flight // processes)),
            env={"TENANTRY_DATABASE_URL": database.dsn, "TENANTRY_MODEL_BASE_URL": model_url,
                 "TENANTRY_LOG_FORMAT": "json"})
        started = await _all_started(worker, processes)
        console.log(f"{processes} worker process(es) claiming (first claim after "
                    f"{started} ms of CPU each); releasing {runs} runs")
        cpu = CpuMeter({"workers": lambda: tree_cpu_seconds(worker.pid),
                        "fake_model": lambda: cpu_seconds(model.pid),
                        "mcp_server": lambda: cpu_seconds(mcp.pid),
                        "postgres": bench.postgres_cpu()})
        cpu.start()
        released = await admin.fetchval(
            "WITH go AS (UPDATE runs SET available_at = NULL) SELECT clock_timestamp()")
        await admin.execute("NOTIFY tenantry_runnable")
        await _until_ended(admin, worker, runs)
        shares = cpu.shares()
        statuses = {r["status"]: r["count"] for r in await admin.fetch(
            "SELECT status, count(*) FROM runs GROUP BY status")}
    finally:
        await admin.close()
    worker.stop()
    if statuses.get("finished", 0) != runs:
        raise RuntimeError(f"not every run finished with {processes} processes: {statuses}\n"
                           f"{worker.tail()}")
    events = await read_log(database.dsn, ids)
    steps = [e for e in events if e.type in STEP_EVENTS]
    seconds = (max(e.at for e in events) - released).total_seconds()
    per_s = len(steps) / seconds
    console.log(f"{processes} process(es): {len(steps)} steps in {seconds:.2f} s = "
                f"{per_s:.1f} steps/s; cpu {shares}")
    return {"steps_per_s": round(per_s, 1), "steps": len(steps), "seconds": round(seconds, 2),
            "first_claim_cpu_ms": started, "cpu": shares,
            "worker_cpu_ms_per_step": round(shares["workers"] * seconds * 1000 / len(steps),
                                            2)}


async def _all_started(worker: Helper, processes: int) -> list[int]:
    """Each worker process's CPU at its first claim, once all of them are claiming."""
    deadline = time.monotonic() + 120
    while True:
        lines = [orjson.loads(line) for line in worker.stderr.read_bytes().splitlines()
                 if b'"worker started"' in line]
        if len(lines) >= processes:
            return [int(line.get("process_cpu_ms", -1)) for line in lines]
        if worker.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{processes} worker process(es) not claiming:\n{worker.tail()}")
        await asyncio.sleep(0.05)


async def _until_ended(admin: asyncpg.Connection, worker: Helper, runs: int) -> None:
    deadline = time.monotonic() + FINISH_TIMEOUT_S
    while await admin.fetchval("SELECT count(*) FROM runs WHERE status = ANY($1::text[])",
                               list(TERMINAL)) < runs:
        if worker.proc.poll() is not None:
            raise RuntimeError(f"the worker exited with {worker.proc.returncode}:\n"
                               f"{worker.tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"runs still going after {FINISH_TIMEOUT_S:.0f} s")
        await asyncio.sleep(0.1)


async def _benchmark(bench: Bench) -> dict[str, Any]:
    runs, in_flight, processes, raw_seconds = _config()
    model, mcp = bench.fake_model(), bench.mcp_server()
    first = await bench.database()
    model_url, mcp_url = await asyncio.gather(model.ready(), mcp.ready())
    console.log(f"fake model at {model_url}, MCP server at {mcp_url}")
    console.log(f"raw durable INSERTs from {RAW_CONNECTIONS} connections for {raw_seconds} s")
    raw = await raw_insert_rate(first.dsn, raw_seconds)
    console.log(f"raw INSERTs: {raw}")
    passes: dict[str, dict[str, Any]] = {}
    for count in processes:
        database = await bench.another_database()
        passes[str(count)] = await _pass(bench, database, model, mcp, mcp_url, model_url,
                                         count, runs, in_flight)
    per_s = {n: p["steps_per_s"] for n, p in passes.items()}
    one = per_s.get("1")
    return {
        "steps_per_s": per_s,
        "raw_insert_per_s": raw["per_s"],
        "ratio": round(max(per_s.values()) / raw["per_s"], 4),
        "scaling": {n: round(v / one, 2) for n, v in per_s.items()} if one else {},
        "passes": passes,
        "raw": raw,
        "runs": runs,
        "steps_per_run": 5,
        "in_flight": in_flight,
        "postgres": first.kind,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "source": source_state(),
    }


if __name__ == "__main__":
    sys.exit(main("throughput", _benchmark))
