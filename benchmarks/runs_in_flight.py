"""runs_in_flight: one worker process holding 2,000 runs whose model replies take 1-2 s.

Set-up: a fresh database (``TENANTRY_DATABASE_URL``, else an embedded Postgres), the fake
model server and the MCP test server in their own processes, and ONE ``tenantry worker
--processes 1 --concurrency 2000`` process (default settings otherwise:
``TENANTRY_DB_POOL_MAX`` 20), so its memory can be read from ``/proc/<pid>/status`` and
nothing else runs in its event loop. The benchmark's one tenant gets a policy that holds
every run (``max_running`` = the runs, ``max_queued`` at least as many), as an operator sets
one with ``PUT /admin/v1/tenants/{id}/policy``: the default ``max_running`` of 100 would cap
what is measured, not the worker. With ``RUNS_IN_FLIGHT_PROCESSES=2`` the worker is
``--processes 2`` (each process ``--concurrency 2000``): its memory and CPU are the
supervisor's and its processes' together.

Every run carries its own script: a call to the ``echo`` tool, then an answer, each model
reply delayed 1000-2000 ms (seeded, uniform): 4 steps per run (2 model, 1 tool, 1 finish).
All runs are queued — and held back with ``available_at`` — before the worker starts; once
it is idle its resident set is read (the baseline), then the runs are released at once.

While they run, every 0.5 s: runs the database shows as ``running`` (all leased to this
worker: the in-flight count), the worker's RSS and CPU. Afterwards, from the event log:
platform overhead per step (the time between consecutive events of a run minus the model
latency / tool duration recorded in the later one), steps per second, and how much longer
model calls took than their scripted delay (a fake server or an event loop that cannot keep
up shows there).

``runs_in_flight`` is the peak of those samples; ``max_ms`` the longest platform time of any
step (with one process it must stay far below the 30 s lease: < 5 s); ``rss_mib`` the
worker's VmHWM (peak resident set, summed over its processes); ``kib_per_run`` the growth
over its idle RSS per run held; ``ramp_s`` how long after the release the peak came;
``held_95pct_s`` how long at least 95% of the runs were in flight at once;
``worker_cpu_ms_per_step`` all the worker's CPU divided by the steps; ``cpu`` each process's
share of a core plus the rest of the machine's (``others``) and the share of time some task
waited for a CPU (``stalled``); ``lease_lost`` the worker's "lease lost" log lines (leases
that lapsed because the worker fell behind).

Prints progress on stderr and one JSON line last on stdout:
``{"runs_in_flight", "p99_ms", "max_ms", "rss_mib", "steps_per_s", "runs", "processes", ...}``.
Environment overrides: RUNS_IN_FLIGHT_RUNS (2000), RUNS_IN_FLIGHT_DELAY_MS ("1000-2000"),
RUNS_IN_FLIGHT_PROCESSES (1).
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from _harness import (
    Bench,
    CpuMeter,
    Helper,
    LoggedEvent,
    by_type,
    console,
    cpu_seconds,
    create_runs,
    latency_summary,
    log_overheads,
    main,
    provision,
    read_log,
    scripted_input,
    source_state,
    tenantry_command,
    tree_cpu_seconds,
    tree_memory_kib,
)
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.ids import RunId
from tenantry.scheduler.policy import TenantPolicy, set_policy

SAMPLE_EVERY_S = 0.5
FINISH_TIMEOUT_S = 420.0
IDLE_SETTLE_S = 1.0
TERMINAL = ("finished", "failed", "cancelled")


def _config() -> tuple[int, int, int, int]:
    runs_raw = os.environ.get("RUNS_IN_FLIGHT_RUNS", "2000")
    delay_raw = os.environ.get("RUNS_IN_FLIGHT_DELAY_MS", "1000-2000")
    processes_raw = os.environ.get("RUNS_IN_FLIGHT_PROCESSES", "1")
    try:
        runs, processes = int(runs_raw), int(processes_raw)
        low, _, high = delay_raw.partition("-")
        delay = (int(low), int(high or low))
    except ValueError:
        raise SystemExit("RUNS_IN_FLIGHT_RUNS and RUNS_IN_FLIGHT_PROCESSES are integers, "
                         "RUNS_IN_FLIGHT_DELAY_MS is 'MIN-MAX' milliseconds") from None
    if runs <= 0 or processes <= 0 or not 0 <= delay[0] <= delay[1]:
        raise SystemExit(f"bad settings: runs={runs_raw!r} delay={delay_raw!r} "
                         f"processes={processes_raw!r}")
    return runs, delay[0], delay[1], processes


def _scripts(runs: int, low: int, high: int) -> list[tuple[dict[str, Any], list[int]]]:
    """Each run's input and the model delays it scripts (seeded: every pass is alike)."""
    rng = random.Random(2000)
    made = []
    for index in range(runs):
        delays = [rng.randint(low, high), rng.randint(low, high)]
        steps = [
            {"tool_calls": [{"name": "echo", "arguments": {"text": "{input}"}}],
             "delay_ms": delays[0]},
            {"text": "done: {last_tool_result}", "delay_ms": delays[1]},
        ]
        made.append((scripted_input(steps, f"run-{index}"), delays))
    return made


@dataclass(slots=True)
class Samples:
    running: list[tuple[float, int]] = field(default_factory=list)
    ended: int = 0
    rss_kib: int = 0
    hwm_kib: int = 0


async def _sample(
    conn: asyncpg.Connection, worker: Helper, released: float, total: int, samples: Samples,
) -> None:
    """Until every run has ended (or the worker died): in-flight count, RSS, progress."""
    next_note = 0.0
    while samples.ended < total:
        if worker.proc.poll() is not None:
            raise RuntimeError(f"the worker exited with {worker.proc.returncode}:\n"
                               f"{worker.tail()}")
        row = await conn.fetchrow(
            "SELECT count(*) FILTER (WHERE status = 'running') AS running, "
            "count(*) FILTER (WHERE status = ANY($1::text[])) AS ended FROM runs",
            list(TERMINAL))
        assert row is not None
        now = time.perf_counter() - released
        samples.running.append((now, row["running"]))
        samples.ended = row["ended"]
        memory = tree_memory_kib(worker.pid)
        samples.rss_kib = memory.get("VmRSS", samples.rss_kib)
        samples.hwm_kib = max(samples.hwm_kib, memory.get("VmHWM", 0))
        if now >= next_note:
            console.log(f"{now:5.1f} s: {row['running']} running, {samples.ended}/{total} "
                        f"ended, worker RSS {samples.rss_kib / 1024:.0f} MiB")
            next_note = now + 5.0
        if time.perf_counter() - released > FINISH_TIMEOUT_S:
            raise RuntimeError(f"runs still going after {FINISH_TIMEOUT_S:.0f} s")
        await asyncio.sleep(SAMPLE_EVERY_S)


def _model_excess(events: list[LoggedEvent], delays: dict[str, list[int]]) -> list[float]:
    """Per model call: the latency the worker recorded minus the delay the script asked for
    (HTTP, the fake server's own work, and event-loop lag on either side)."""
    excess: list[float] = []
    index: dict[str, int] = {}
    for event in events:
        if event.type != "ModelReplied":
            continue
        i = index.get(event.run, 0)
        index[event.run] = i + 1
        scripted = delays[event.run]
        if i < len(scripted):
            excess.append(float(event.data["latency_ms"]) - scripted[i])
    return excess


async def _all_started(worker: Helper, processes: int) -> None:
    """Until each of the worker's processes logged its first claim."""
    deadline = time.monotonic() + 120
    while worker.stderr.read_bytes().count(b'"msg":"worker started"') < processes:
        if worker.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{processes} worker process(es) not claiming:\n{worker.tail()}")
        await asyncio.sleep(0.05)


async def _benchmark(bench: Bench) -> dict[str, Any]:
    total, low, high, processes = _config()
    settings = Settings.from_env()
    model_proc, mcp_proc = bench.fake_model(), bench.mcp_server()
    database = await bench.database()
    model_url, mcp_url = await asyncio.gather(model_proc.ready(), mcp_proc.ready())
    console.log(f"fake model at {model_url}, MCP server at {mcp_url}")

    db = await Database.connect(database.dsn, role=settings.db_role or None, min_size=1,
                                max_size=8)
    try:
        tenancy = await provision(db, mcp_url, ("echo",))
        # One tenant holds every run, as an operator lets a large tenant: the default
        # policy's max_running (100) would cap what is measured here, not the worker.
        await set_policy(db, tenancy.tenant, TenantPolicy(max_running=total,
                                                          max_queued=max(total, 10_000)))
        made = _scripts(total, low, high)
        console.log(f"queueing {total} runs (model delays {low}-{high} ms)")
        ids: list[RunId] = await create_runs(db, tenancy, [value for value, _ in made])
    finally:
        await db.close()
    delays = {str(run.uuid): scripted for run, (_, scripted) in zip(ids, made, strict=True)}

    admin = await asyncpg.connect(database.dsn)
    try:
        # Held back until the worker is up and idle, so its baseline RSS can be read.
        await admin.execute("UPDATE runs SET available_at = 'infinity'")
        worker = bench.start("worker", tenantry_command(
            "worker", "--processes", str(processes), "--concurrency", str(total)),
            env={"TENANTRY_DATABASE_URL": database.dsn, "TENANTRY_MODEL_BASE_URL": model_url,
                 "TENANTRY_LOG_FORMAT": "json"})
        await _all_started(worker, processes)
        await asyncio.sleep(IDLE_SETTLE_S)
        idle_kib = tree_memory_kib(worker.pid).get("VmRSS", 0)
        console.log(f"worker {worker.pid} idle at {idle_kib / 1024:.0f} MiB; releasing runs")
        cpu = CpuMeter({
            "worker": lambda: tree_cpu_seconds(worker.pid),
            "fake_model": lambda: cpu_seconds(model_proc.pid),
            "mcp_server": lambda: cpu_seconds(mcp_proc.pid),
            "postgres": bench.postgres_cpu(),
        })
        cpu.start()
        released = time.perf_counter()
        await admin.execute("UPDATE runs SET available_at = NULL; NOTIFY tenantry_runnable")
        samples = Samples()
        await _sample(admin, worker, released, total, samples)
        elapsed = time.perf_counter() - released
        shares = cpu.shares()
        samples.hwm_kib = max(samples.hwm_kib, tree_memory_kib(worker.pid).get("VmHWM", 0))
        statuses: dict[str, int] = {row["status"]: row["count"] for row in await admin.fetch(
            "SELECT status, count(*) FROM runs GROUP BY status")}
    finally:
        await admin.close()
    stopped = worker.stop()
    events = await read_log(database.dsn, ids)

    peak = max(count for _, count in samples.running)
    ramp = next(at for at, count in samples.running if count == peak)
    held = [at for at, count in samples.running if count >= 0.95 * total]
    overheads = log_overheads(events)
    head = latency_summary(ms for _, ms in overheads)
    steps = sum(1 for e in events if e.seq >= 2)
    excess = latency_summary(_model_excess(events, delays))
    worker_log = worker.stderr.read_text(errors="replace")
    errors = worker_log.count('"level":"error"')
    # Leases that lapsed under load: the worker re-claims its own runs and drivers stop.
    lease_lost = worker_log.count('"msg":"lease lost')
    console.log(f"peak {peak} in flight ({ramp:.1f} s after release); {steps} steps in "
                f"{elapsed:.1f} s; overhead {head}; model excess {excess}; cpu {shares}; "
                f"runs {statuses}; worker exit {stopped}, {errors} error lines, "
                f"{lease_lost} lost leases")
    if statuses.get("finished", 0) != total:
        raise RuntimeError(f"not every run finished: {statuses}")
    return {
        "runs_in_flight": peak,
        "p99_ms": head["p99_ms"],
        "rss_mib": round(samples.hwm_kib / 1024, 1),
        "steps_per_s": round(steps / elapsed, 1),
        "max_ms": head["max_ms"],
        "runs": statuses.get("finished", 0),
        "processes": processes,
        "p50_ms": head["p50_ms"],
        "by_type": by_type(overheads),
        "idle_rss_mib": round(idle_kib / 1024, 1),
        "kib_per_run": round((samples.hwm_kib - idle_kib) / max(peak, 1), 1),
        "ramp_s": round(ramp, 1),
        "held_95pct_s": round(held[-1] - held[0], 1) if held else 0.0,
        "seconds": round(elapsed, 1),
        "model_delay_ms": [low, high],
        "model_excess": excess,
        "cpu": shares,
        "worker_cpu_ms_per_step": round(shares["worker"] * elapsed * 1000 / max(steps, 1), 2),
        "lease_lost": lease_lost,
        "error_lines": errors,
        "db_pool_max": settings.db_pool_max,
        "postgres": database.kind,
        "source": source_state(),
    }


if __name__ == "__main__":
    sys.exit(main("runs_in_flight", _benchmark))
