"""retention: how fast the cleaner deletes, and what a cleanup pass costs the runs beside it.

(a) Deletion rate. ``RETENTION_RUNS`` (default 20,000) terminal runs of 10 events each,
ended 40 days ago (past the default 30-day retention), are written straight into a fresh
database (``tests/support/retention.py``, as the retention tests seed them), vacuumed and
checkpointed — 30-day-old rows have long been — then one cleaner pass over their tenant
deletes them in batches of ``TENANTRY_RETENTION_BATCH`` (default 500), each batch one
transaction that writes a tombstone per run and deletes its events, usage-fact links,
reservations and row. ``runs_deleted_per_s`` = runs / the pass's wall time.

(b) Interference. The step-overhead benchmark's phases (benchmarks/step_overhead.py: its
worker loop on ``tenantry worker``'s engine, the fake model and MCP servers in their own
processes, ``STEP_OVERHEAD_RUNS`` runs of 6 steps, ``STEP_OVERHEAD_CONCURRENCY`` at once)
run without cleanup and while a cleaner pass works through a backlog of
``RETENTION_BACKLOG`` (default 60,000) more such runs of another tenant — in the same
process, on the engine's own pool, as ``tenantry worker`` runs its cleaner — alternating,
``RETENTION_ROUNDS`` (default 2) of each. ``step_p99_ratio`` = platform time per step p99
with the pass / without, each over its rounds' steps pooled.
``backlog_left`` is what the pass had not deleted yet when the phase ended (0: it ran out
first, and the ratio understates a pass's cost).

``RETENTION_REST`` overrides the cleaner's rest after each batch (``CleanupSettings.rest_ratio``,
its default 1: as long as the batch took; 0: flat out).

Targets: ``runs_deleted_per_s`` >= 2,000; ``step_p99_ratio`` <= 1.25.

Prints progress on stderr and one JSON line last on stdout:
``{"runs_deleted_per_s", "step_p99_ratio", ...}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg

from _harness import (
    Bench,
    console,
    env_positive,
    latency_summary,
    main,
    percentile,
    source_state,
)
from step_overhead import STEPS_PER_RUN, Phase, run_phase, step_rig
from tenantry.blobs import Blobs
from tenantry.bootstrap import worker as runtime
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.retention.cleaner import Cleaner, CleanupSettings, PassResult

# The seeding helper is the retention tests' own.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.retention import Seeded, ended_runs, tenant_and_agent

SEED_CHUNK = 2000
EVENTS_PER_RUN = 10
TARGET_RUNS_PER_S = 2000.0
TARGET_P99_RATIO = 1.25


async def _seed(dsn: str, db: Database, name: str, runs: int) -> Seeded:
    """``runs`` runs that ended 40 days ago, then vacuumed, analysed and checkpointed."""
    seeded = await tenant_and_agent(db, name)
    started = time.perf_counter()
    conn = await asyncpg.connect(dsn)
    try:
        for done in range(0, runs, SEED_CHUNK):
            await ended_runs(conn, seeded, min(SEED_CHUNK, runs - done),
                             events=EVENTS_PER_RUN, ended_days_ago=40)
        await conn.execute("VACUUM (ANALYZE) runs, run_events, usage_facts")
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()
    console.log(f"seeded {runs} ended runs ({runs * EVENTS_PER_RUN} events) for {name} "
                f"in {time.perf_counter() - started:.1f} s")
    return seeded


async def _deletion_rate(cleaner: Cleaner, seeded: Seeded, runs: int) -> dict[str, Any]:
    """(a): one pass over the seeded tenant, alone; each batch's wall time too."""
    marks = [time.perf_counter()]

    def batch_done(_: PassResult) -> None:
        marks.append(time.perf_counter())

    result = await cleaner.clean(seeded.tenant, progress=batch_done)
    seconds = time.perf_counter() - marks[0]  # the whole pass: lease, batches, release
    if result is None or result.runs != runs or result.lease_lost:
        raise RuntimeError(f"the pass did not delete the {runs} runs: {result}")
    batches = sorted((b - a) * 1000 for a, b in itertools.pairwise(marks))
    rate = runs / seconds
    console.log(f"deleted {result.runs} runs ({result.events} events) in {seconds:.2f} s: "
                f"{rate:.0f} runs/s, {result.batches} batches")
    return {"runs": result.runs, "events": result.events, "seconds": round(seconds, 3),
            "batches": result.batches, "per_s": round(rate, 1),
            "batch_p50_ms": round(percentile(batches, 0.5), 1),
            "batch_p99_ms": round(percentile(batches, 0.99), 1),
            "batch_max_ms": round(batches[-1], 1)}


class Backlog:
    """(b): the worker's cleaner loop (:meth:`Cleaner.run`, every tenant due at once) over
    the backlog tenant, running while a phase runs."""

    def __init__(self, db: Database, blobs: Blobs, cleanup: CleanupSettings,
                 seeded: Seeded, dsn: str) -> None:
        self.cleaner = Cleaner(db, blobs, dataclasses.replace(
            cleanup, every_seconds=0.0, poll_seconds=0.05))
        self.seeded, self.dsn = seeded, dsn
        # Over every phase it ran beside; what was left when the last one ended.
        self.seconds = 0.0
        self.deleted = 0
        self.left = -1

    @contextlib.asynccontextmanager
    async def cleaning(self) -> AsyncIterator[None]:
        stop = asyncio.Event()
        started, before = time.perf_counter(), self.cleaner.deleted_total
        task = asyncio.create_task(self.cleaner.run(stop), name="retention-cleaner")
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - started
            self.deleted += self.cleaner.deleted_total - before
            self.left = await self._left()
            stop.set()
            await task

    async def _left(self) -> int:
        conn = await asyncpg.connect(self.dsn)
        try:
            left: int = await conn.fetchval("SELECT count(*) FROM runs WHERE tenant_id = $1",
                                            self.seeded.tenant.value)
        finally:
            await conn.close()
        return left


def _steps(phases: list[Phase]) -> dict[str, Any]:
    """The phases' steps pooled; CPU shares of the last."""
    steps = [s for p in phases for s in p.steps]
    seconds = sum(p.seconds for p in phases)
    return {**latency_summary(steps), "steps": len(steps),
            "per_s": round(len(steps) / seconds, 1),
            "worker_cpu_ms_per_step": round(
                sum(p.worker_cpu_ms_per_step * len(p.steps) for p in phases) / len(steps), 2),
            "seconds": round(seconds, 2), "cpu": [p.cpu for p in phases]}


async def _benchmark(bench: Bench) -> dict[str, Any]:
    runs = int(env_positive("RETENTION_RUNS", 20_000))
    backlog_runs = int(env_positive("RETENTION_BACKLOG", 60_000))
    step_runs = int(env_positive("STEP_OVERHEAD_RUNS", 200))
    concurrency = int(env_positive("STEP_OVERHEAD_CONCURRENCY", 20))
    rounds = int(env_positive("RETENTION_ROUNDS", 2))
    settings = Settings.from_env()
    async with step_rig(bench, settings) as rig:
        engine, database, tenancy, cpu = rig.engine, rig.database, rig.tenancy, rig.cpu
        # As run_worker builds it: the engine's pool and blob store, the configured batch.
        cleanup = runtime.cleanup_settings(settings)
        if os.environ.get("RETENTION_REST"):  # trying another rest than the default
            cleanup = dataclasses.replace(cleanup, rest_ratio=float(os.environ["RETENTION_REST"]))
        assert engine.blobs is not None  # the worker's engine always has one
        cleaner = Cleaner(engine.db, engine.blobs, cleanup)
        deletion = await _deletion_rate(
            cleaner, await _seed(database.dsn, engine.db, "deletion", runs), runs)

        backlog = Backlog(engine.db, engine.blobs, cleanup,
                          await _seed(database.dsn, engine.db, "backlog", backlog_runs),
                          database.dsn)
        await run_phase("warm-up", engine, database.dsn, tenancy, runs=concurrency,
                        concurrency=concurrency, cpu=cpu)
        # Alternating, so that a drift of the machine's load weighs on both sides alike.
        without, with_ = [], []
        for round_ in range(1, rounds + 1):
            without.append(await run_phase(
                f"without cleanup {round_}/{rounds}", engine, database.dsn, tenancy,
                runs=step_runs, concurrency=concurrency, cpu=cpu))
            with_.append(await run_phase(
                f"with cleanup {round_}/{rounds}", engine, database.dsn, tenancy,
                runs=step_runs, concurrency=concurrency, cpu=cpu, alongside=backlog.cleaning))

    for phase in without + with_:
        if phase.failed_ours or len(phase.steps) != step_runs * STEPS_PER_RUN:
            raise RuntimeError(f"{phase.name}: runs did not go as scripted: "
                               f"{len(phase.steps)} steps, {phase.failed_ours} failed by us")
    p99 = (latency_summary(s for p in without for s in p.steps)["p99_ms"],
           latency_summary(s for p in with_ for s in p.steps)["p99_ms"])
    ratio = p99[1] / p99[0]
    deleted = backlog.deleted
    console.log(f"step p99 {p99[0]} ms without, {p99[1]} ms with cleanup: ratio {ratio:.2f}; "
                f"{deleted} backlog runs deleted meanwhile, {backlog.left} left")
    if backlog.left == 0:
        console.log("[yellow]the backlog ran out before the phase ended: the ratio "
                    "understates a pass's cost (raise RETENTION_BACKLOG)")
    return {
        "runs_deleted_per_s": deletion["per_s"],
        "step_p99_ratio": round(ratio, 3),
        "met": {"runs_deleted_per_s": deletion["per_s"] >= TARGET_RUNS_PER_S,
                "step_p99_ratio": ratio <= TARGET_P99_RATIO},
        "deletion": {**deletion, "batch": cleanup.batch, "rest_ratio": cleanup.rest_ratio,
                     "events_per_run": EVENTS_PER_RUN},
        "steps_without": _steps(without),
        "steps_with": {**_steps(with_), "runs_deleted_meanwhile": deleted,
                       "cleanup_runs_per_s": round(deleted / backlog.seconds, 1),
                       "backlog_left": backlog.left},
        "rounds": [{"p99_ms_without": latency_summary(a.steps)["p99_ms"],
                    "p99_ms_with": latency_summary(b.steps)["p99_ms"]}
                   for a, b in zip(without, with_, strict=True)],
        "concurrency": concurrency,
        "postgres": database.kind,
        "source": source_state(),
    }


if __name__ == "__main__":
    sys.exit(main("retention", _benchmark))
