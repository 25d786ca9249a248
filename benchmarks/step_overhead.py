"""step_overhead: the platform's own time per step, with the model and the tool taking ~0.

A step is one decision of the run driver: call the model, call a tool, or end the run. Its
platform time is the step's wall time minus the time spent waiting on the model or the tool
(``Engine.stats.platform_ms``, recorded by the driver itself): reading the log for news,
deciding, and the append transaction that saves the result and renews the lease (ADR 0023).

Set-up: a fresh database (``TENANTRY_DATABASE_URL``, else an embedded Postgres), the fake
model server and the MCP test server each in their own process (so their CPU does not run in
the worker's event loop), and one worker in this process, built by the factory ``tenantry
worker`` uses (``tenantry.bootstrap.worker.engine``: same settings, same pool sizes). Every
run carries the script ``echo → echo → answer`` with no model delay: 6 steps per run
(3 model, 2 tool, 1 finish).

Phases: a warm-up (opens pooled connections, prepares statements), then the measured phase
(``STEP_OVERHEAD_RUNS`` runs, default 200, at most ``STEP_OVERHEAD_CONCURRENCY``, default 20,
at once; the headline figures), then a serial phase (a quarter as many runs, one at a time:
no queueing inside the process, the cost of a step on its own). All runs of a phase are
queued before the worker starts, so creating them does not share the event loop with steps.

With the model and tool instant, the measured phase keeps the process busy: a step then also
waits for the other runs' work in the same event loop (platform time ~ concurrency x CPU per
step), so ``worker_cpu_ms_per_step`` is reported too. ``cpu`` gives each process's share of a
core, what the rest of the machine used (``others``) and the share of time some task waited
for a CPU (``stalled``): figures from a busy machine are not comparable with a quiet one's.

The figures are cross-checked against the event log: per step, the time between consecutive
events of a run minus the model latency / tool duration recorded in the later event.

Prints progress on stderr and one JSON line last on stdout:
``{"p50_ms", "p99_ms", "per_s", "steps", "runs", ...}`` (per_s = steps per second).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from _harness import (
    Bench,
    BenchDatabase,
    CpuMeter,
    Tenancy,
    by_type,
    console,
    cpu_seconds,
    create_runs,
    env_positive,
    latency_summary,
    log_overheads,
    main,
    provision,
    read_log,
    scripted_input,
    source_state,
    wait_for,
)
from tenantry.bootstrap import worker as runtime
from tenantry.config import Settings
from tenantry.ids import RunId
from tenantry.runs.engine import Engine, StepStats
from tenantry.runs.worker import Worker

PHASE_TIMEOUT_S = 240.0
STEPS_PER_RUN = 6


def _script(index: int) -> dict[str, Any]:
    call = {"tool_calls": [{"name": "echo", "arguments": {"text": f"{{input}} {index}"}}]}
    return scripted_input([call, call, {"text": "done: {last_tool_result}"}], f"run-{index}")


@dataclass(slots=True)
class Phase:
    name: str
    runs: int
    steps: list[float]
    seconds: float
    log: list[tuple[str, float]]
    failed_ours: int
    cpu: dict[str, float]

    @property
    def per_s(self) -> float:
        return len(self.steps) / self.seconds if self.seconds > 0 else 0.0

    @property
    def worker_cpu_ms_per_step(self) -> float:
        """CPU the worker's process spent per step, all of it (model and MCP clients too):
        what bounds one process's steps per second, and less disturbed by a busy machine
        than the latencies are."""
        return self.cpu["worker"] * self.seconds * 1000 / max(len(self.steps), 1)


async def run_phase(
    name: str, engine: Engine, dsn: str, tenancy: Tenancy, *, runs: int, concurrency: int,
    cpu: CpuMeter, alongside: Callable[[], AbstractAsyncContextManager[object]] | None = None,
    script: Callable[[int], dict[str, Any]] = _script,
) -> Phase:
    """One phase: ``runs`` runs queued, then driven by a worker loop on ``engine`` until all
    have ended. ``alongside``: work running in the same process while the worker does, from
    its start to the last run's end (benchmarks/retention.py: a cleanup pass); ``script``:
    run ``i``'s input (default ``echo → echo → answer``, small outputs)."""
    ids = await create_runs(engine.db, tenancy, [script(i) for i in range(runs)])
    engine.stats = StepStats()
    stats = engine.stats
    worker = Worker(engine, dsn=dsn, concurrency=concurrency, poll_seconds=0.1,
                    drain_seconds=1.0)
    stop = asyncio.Event()
    console.log(f"{name}: {runs} runs, at most {concurrency} at once")
    async with contextlib.AsyncExitStack() as beside:
        if alongside is not None:
            await beside.enter_async_context(alongside())
        cpu.start()
        started = time.perf_counter()
        task = asyncio.create_task(worker.run(stop), name=f"worker {name}")
        try:
            try:
                await wait_for(
                    lambda: stats.runs_ended >= runs or task.done(), within=PHASE_TIMEOUT_S,
                    what=f"{runs} runs to end",
                    progress=lambda: f"{name}: {stats.runs_ended}/{runs} runs, "
                                     f"{stats.steps} steps")
            except RuntimeError:
                await _show_stuck(dsn, ids)
                raise
            elapsed = time.perf_counter() - started
            shares = cpu.shares()
        finally:
            stop.set()
            await task  # a crashed worker loop raises here
    log = log_overheads(await read_log(dsn, ids))
    phase = Phase(name, runs, list(stats.platform_ms), elapsed, log, stats.runs_failed_ours,
                  shares)
    console.log(f"{name}: {len(phase.steps)} steps in {elapsed:.2f} s "
                f"({phase.per_s:.0f}/s); platform ms {latency_summary(phase.steps)}; "
                f"log ms {latency_summary(ms for _, ms in log)}; cpu {shares}")
    return phase


async def _show_stuck(dsn: str, ids: list[RunId]) -> None:
    """What a run that never ends is doing: its driver's stack and its last events."""
    for task in asyncio.all_tasks():
        if task.get_name().startswith("run "):
            console.log(f"[yellow]{task.get_name()} is still being driven:")
            task.print_stack(file=sys.stderr)
    ended = {"RunFinished", "RunFailed", "RunCancelled", "BudgetStopped"}
    by_run: dict[str, list[str]] = {}
    for event in await read_log(dsn, ids):
        by_run.setdefault(event.run, []).append(event.type)
    for run, types in by_run.items():
        if not ended & set(types):
            console.log(f"[yellow]run {run} has not ended; its log: {types}")


@dataclass(frozen=True, slots=True)
class Rig:
    """What a step benchmark drives: the engine, its database and tenant, the CPU meter."""

    engine: Engine
    database: BenchDatabase
    tenancy: Tenancy
    cpu: CpuMeter


@contextlib.asynccontextmanager
async def step_rig(bench: Bench, settings: Settings) -> AsyncIterator[Rig]:
    """The fake model and MCP servers, the benchmark's database, a CPU meter over the
    worker, the fakes and Postgres, and the engine `tenantry worker` runs
    (tenantry.bootstrap.worker.engine: pool, model client, MCP client, tool gateway)
    pointed at the fake model, with a tenant provisioned. Shared by benchmarks/retention.py."""
    model_proc, mcp_proc = bench.fake_model(), bench.mcp_server()
    database = await bench.database()
    model_url, mcp_url = await asyncio.gather(model_proc.ready(), mcp_proc.ready())
    console.log(f"fake model at {model_url}, MCP server at {mcp_url}")
    cpu = CpuMeter({
        "worker": lambda: cpu_seconds(os.getpid()),
        "fake_model": lambda: cpu_seconds(model_proc.pid),
        "mcp_server": lambda: cpu_seconds(mcp_proc.pid),
        "postgres": bench.postgres_cpu(),
    })
    async with runtime.engine(settings.with_(model_base_url=model_url), database.dsn,
                              name="bench") as engine:
        yield Rig(engine, database, await provision(engine.db, mcp_url, ("echo",)), cpu)


async def _benchmark(bench: Bench) -> dict[str, Any]:
    runs = int(env_positive("STEP_OVERHEAD_RUNS", 200))
    concurrency = int(env_positive("STEP_OVERHEAD_CONCURRENCY", 20))
    async with step_rig(bench, Settings.from_env()) as rig:
        engine, database, tenancy, cpu = rig.engine, rig.database, rig.tenancy, rig.cpu
        await run_phase("warm-up", engine, database.dsn, tenancy, runs=concurrency,
                     concurrency=concurrency, cpu=cpu)
        measured = await run_phase("measured", engine, database.dsn, tenancy, runs=runs,
                                concurrency=concurrency, cpu=cpu)
        serial = await run_phase("serial", engine, database.dsn, tenancy,
                              runs=max(20, runs // 4), concurrency=1, cpu=cpu)

    failed = measured.failed_ours + serial.failed_ours
    if failed or len(measured.steps) != runs * STEPS_PER_RUN:
        raise RuntimeError(f"runs did not go as scripted: {len(measured.steps)} steps for "
                           f"{runs} runs, {failed} failed by the platform")
    head = latency_summary(measured.steps)
    return {
        "p50_ms": head["p50_ms"],
        "p99_ms": head["p99_ms"],
        "per_s": round(measured.per_s, 1),
        "steps": len(measured.steps),
        "runs": measured.runs,
        "concurrency": concurrency,
        "max_ms": head["max_ms"],
        "log": {**latency_summary(ms for _, ms in measured.log), "steps": len(measured.log),
                "by_type": by_type(measured.log)},
        "worker_cpu_ms_per_step": round(measured.worker_cpu_ms_per_step, 2),
        "serial": {**latency_summary(serial.steps), "steps": len(serial.steps),
                   "per_s": round(serial.per_s, 1),
                   "worker_cpu_ms_per_step": round(serial.worker_cpu_ms_per_step, 2)},
        "cpu": measured.cpu,
        "postgres": database.kind,
        "source": source_state(),
    }


if __name__ == "__main__":
    sys.exit(main("step_overhead", _benchmark))
