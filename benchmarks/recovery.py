"""recovery: how soon a SIGKILLed worker's runs take their next step on another worker, with
the default 30 s lease (ADR 0018); and how soon a fresh ``tenantry worker`` makes its first
claim.

Set-up: a fresh database (``TENANTRY_DATABASE_URL``, else an embedded Postgres), the fake
model server and the MCP test server in their own processes, and 3 ``tenantry worker``
processes at default settings (lease 30 s, poll 1 s; a small pool each). About 24 runs are
kept in flight (one that ends is replaced), each a script of 40 instant steps (a model reply
calling the ``echo`` tool, again and again). Then, 8 times: pick a worker holding runs, note
its runs and the wall-clock time, SIGKILL it, and wait until each of those runs has an
event created after the kill (by another worker: the dead one writes nothing more); then
start a replacement and let it settle before the next kill.

``p50_ms`` / ``p99_ms``: per killed worker's run, from the SIGKILL to the ``created_at`` of
that run's next event (its append transaction's start, on the same host clock), nearest
rank. ``claim``: the part of that until the claimer logged the takeover (the rest is
loading the run and taking its next step). ``first_claim_s``: from spawning the first
worker (before any run exists) to its ``first claim`` log line;
``first_claim_under_load_s``: the same for the replacements (median), which start while
the others are busy. ``takeovers``: what the workers logged when they took runs over,
split by whether the old owner was seen dead (``dead_owner``) or its lease had expired
(``expired``: none expected). ``load_avg_1m``: the machine's, at the end (figures taken
on a busy machine are not comparable).

Prints progress on stderr and one JSON line last on stdout:
``{"p50_ms", "p99_ms", "first_claim_s", "runs", "kills", ...}``.
Environment overrides: RECOVERY_KILLS (8), RECOVERY_RUNS (24), RECOVERY_WORKERS (3).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import orjson

from _harness import (
    Bench,
    Helper,
    console,
    create_runs,
    latency_summary,
    main,
    provision,
    scripted_input,
    source_state,
    tenantry_command,
)
from tenantry.agents.spec import Limits
from tenantry.config import Settings
from tenantry.db import Database

#: Tool steps per run: a few seconds of work. Runs that end are replaced (TOP_UP_EVERY_S),
#: so about RECOVERY_RUNS are always in flight: a kill always finds runs to move, and
#: conversations stay short (each model call sends the whole conversation: runs of
#: hundreds of steps would measure that, not recovery).
STEPS_PER_RUN = 40
TOP_UP_EVERY_S = 0.25
LIMITS = Limits(max_steps=10_000, max_tokens=2_000_000_000, max_cost_micros=10**12)
#: Between a replacement's first claim and the next kill: the runs spread over it.
SETTLE_S = 2.0
RECOVERY_TIMEOUT_S = 90.0
READY_TIMEOUT_S = 60.0
POOL_MAX = "6"


def _count(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    try:
        value = int(raw) if raw else default
    except ValueError:
        value = 0
    if value <= 0:
        raise SystemExit(f"{name} must be a positive integer, got {raw!r}")
    return value


@dataclass(slots=True)
class Worker:
    helper: Helper
    spawned: float  # wall clock, seconds
    worker_id: str = ""
    first_claim_s: float | None = None

    def log_lines(self, msg: str) -> list[dict[str, Any]]:
        found = []
        text = self.helper.stderr.read_bytes() if self.helper.stderr.exists() else b""
        for raw in text.splitlines():
            if raw.startswith(b"{"):
                try:
                    line = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if line.get("msg") == msg:
                    found.append(line)
        return found

    async def claiming(self) -> None:
        """Until its first claim is logged: its id and how long it took from the spawn."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if self.helper.proc.poll() is not None:
                raise RuntimeError(f"{self.helper.name} exited:\n{self.helper.tail()}")
            found = self.log_lines("first claim")
            if found:
                self.worker_id = str(found[0]["worker"])
                at = datetime.fromisoformat(found[0]["ts"]).timestamp()
                self.first_claim_s = at - self.spawned
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.helper.name} made no claim within "
                                   f"{READY_TIMEOUT_S:.0f} s:\n{self.helper.tail()}")
            await asyncio.sleep(0.02)


class Fleet:
    def __init__(self, bench: Bench, env: dict[str, str]) -> None:
        self.bench = bench
        self.env = env
        self.live: list[Worker] = []
        self.gone: list[Worker] = []
        self.spawned: list[Worker] = []  # in the order they were started

    async def spawn(self) -> Worker:
        started = time.time()
        # One process per worker: a kill takes exactly the runs of the id its log names.
        helper = self.bench.start(f"worker{len(self.spawned) + 1:02d}",
                                  tenantry_command("worker", "--processes", "1",
                                                   "--concurrency", "100"),
                                  env=self.env)
        worker = Worker(helper, started)
        self.live.append(worker)
        self.spawned.append(worker)
        await worker.claiming()
        return worker

    async def kill(self, worker: Worker) -> datetime:
        """SIGKILL; returns the wall-clock moment just before the signal."""
        at = datetime.now(UTC)
        worker.helper.proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(worker.helper.proc.wait)
        self.live.remove(worker)
        self.gone.append(worker)
        return at


# `ended`: the run ended in a transaction the victim began before the kill (Postgres stamps
# now(), the transaction's start) — it was still committing when the runs were read, and
# has no next step anywhere.
NEXT_EVENT = """SELECT r.run_id, min(e.created_at) AS next_at,
       bool_or(x.status IN ('finished', 'failed', 'cancelled') AND x.finished_at <= $2)
           AS ended
FROM unnest($1::uuid[]) AS r(run_id)
JOIN runs x ON x.run_id = r.run_id
LEFT JOIN run_events e ON e.run_id = r.run_id AND e.created_at > $2
GROUP BY r.run_id"""


async def _recovered(conn: asyncpg.Connection, runs: list[Any],
                     killed_at: datetime) -> list[float]:
    """Milliseconds from the kill to each run's next event, once every run has one."""
    deadline = time.monotonic() + RECOVERY_TIMEOUT_S
    while True:
        rows = [r for r in await conn.fetch(NEXT_EVENT, runs, killed_at)
                if r["next_at"] is not None or not r["ended"]]
        if all(r["next_at"] is not None for r in rows):
            return [(r["next_at"] - killed_at) / timedelta(milliseconds=1) for r in rows]
        if time.monotonic() > deadline:
            stuck = sum(1 for r in rows if r["next_at"] is None)
            raise RuntimeError(f"{stuck} runs of the killed worker took no step within "
                               f"{RECOVERY_TIMEOUT_S:.0f} s")
        await asyncio.sleep(0.05)


async def _benchmark(bench: Bench) -> dict[str, Any]:
    kills, total, size = (_count("RECOVERY_KILLS", 8), _count("RECOVERY_RUNS", 24),
                          _count("RECOVERY_WORKERS", 3))
    if size < 2:
        raise SystemExit("RECOVERY_WORKERS must be at least 2: one must survive each kill")
    settings = Settings.from_env()
    model_proc, mcp_proc = bench.fake_model(), bench.mcp_server()
    database = await bench.database()
    model_url, mcp_url = await asyncio.gather(model_proc.ready(), mcp_proc.ready())
    console.log(f"fake model at {model_url}, MCP server at {mcp_url}")
    env = {"TENANTRY_DATABASE_URL": database.dsn, "TENANTRY_MODEL_BASE_URL": model_url,
           "TENANTRY_LOG_FORMAT": "json", "TENANTRY_DB_POOL_MIN": "1",
           "TENANTRY_DB_POOL_MAX": POOL_MAX}
    if "TENANTRY_LEASE_SECONDS" in os.environ:
        console.log("[yellow]TENANTRY_LEASE_SECONDS is set: the workers use it, not 30 s")
    fleet = Fleet(bench, env)

    # The first worker starts on a quiet platform: its time to first claim is the figure.
    first = await fleet.spawn()
    console.log(f"{first.helper.name} made its first claim {first.first_claim_s:.2f} s after "
                "its spawn")
    for _ in range(size - 1):
        await fleet.spawn()

    db = await Database.connect(database.dsn, role=settings.db_role or None, min_size=1,
                                max_size=4)
    tenancy = await provision(db, mcp_url, ("echo",), limits=LIMITS)
    # Each step's call differs (a step number): the same call again and again would be
    # stopped by repeat detection (ADR 0031) after three.
    script = [{"tool_calls": [{"name": "echo", "arguments": {"text": f"step {n}"}}]}
              for n in range(STEPS_PER_RUN)]
    created = 0

    async def top_up(conn: asyncpg.Connection) -> None:
        nonlocal created
        while True:
            going = await conn.fetchval(
                "SELECT count(*) FROM runs WHERE status IN ('queued', 'running')")
            if going < total:
                inputs = [scripted_input(script, f"run-{created + i}")
                          for i in range(total - going)]
                await create_runs(db, tenancy, inputs)
                created += len(inputs)
            await asyncio.sleep(TOP_UP_EVERY_S)

    console.log(f"~{total} runs of {STEPS_PER_RUN} instant tool steps in flight over {size} "
                "workers")
    rng = random.Random(19)
    samples: list[float] = []
    kill_times: dict[str, datetime] = {}  # the killed worker's id -> when
    conn = await asyncpg.connect(database.dsn)
    feeder_conn = await asyncpg.connect(database.dsn)
    feeder = asyncio.create_task(top_up(feeder_conn))
    steps_before = await conn.fetchval("SELECT count(*) FROM run_events")
    measured_from = time.monotonic()
    try:
        await asyncio.sleep(SETTLE_S)
        for kill in range(1, kills + 1):
            holding = {r["lease_owner"]: r["n"] for r in await conn.fetch(
                "SELECT lease_owner, count(*) AS n FROM runs WHERE status = 'running' "
                "GROUP BY lease_owner")}
            candidates = [w for w in fleet.live if holding.get(w.worker_id)]
            if not candidates:
                raise RuntimeError(f"no worker holds a run (runs ended too soon?): {holding}")
            victim = rng.choice(candidates)
            before = await conn.fetch(
                "SELECT run_id FROM runs WHERE status = 'running' AND lease_owner = $1",
                victim.worker_id)
            killed_at = await fleet.kill(victim)
            kill_times[victim.worker_id] = killed_at
            # A run the victim ended between that read and the kill has no next step.
            runs = [r["run_id"] for r in await conn.fetch(
                "SELECT run_id FROM runs WHERE run_id = ANY($1) AND NOT (status IN "
                "('finished', 'failed', 'cancelled') AND finished_at <= $2)",
                [r["run_id"] for r in before], killed_at)]
            waits = await _recovered(conn, runs, killed_at)
            samples += waits
            console.log(f"kill {kill}/{kills}: {victim.helper.name} held {len(runs)} runs; "
                        + (f"next steps {min(waits):.0f}-{max(waits):.0f} ms after the kill"
                           if waits else "all of them ended as it died"))
            if kill < kills:
                await fleet.spawn()
                await asyncio.sleep(SETTLE_S)
        steps = await conn.fetchval("SELECT count(*) FROM run_events") - steps_before
        elapsed = time.monotonic() - measured_from
        failed = await conn.fetchval("SELECT count(*) FROM runs WHERE status = 'failed'")
    finally:
        feeder.cancel()
        await asyncio.gather(feeder, return_exceptions=True)
        await feeder_conn.close()
        await conn.close()
        await db.close()
    for worker in fleet.live:  # all at once; the bench waits for each as it cleans up
        worker.helper.proc.send_signal(signal.SIGTERM)

    takeovers = [t for w in fleet.spawned for t in w.log_lines("took over a run")]
    dead_owner = sum(1 for t in takeovers if t.get("owner_gone") is True)
    replacements = [w.first_claim_s for w in fleet.spawned[size:]
                    if w.first_claim_s is not None]
    summary = latency_summary(samples)
    # The claim alone: from the kill to the takeover's log line on the claimer.
    claims = latency_summary(
        (datetime.fromisoformat(t["ts"]) - kill_times[t["taken_from"]])
        / timedelta(milliseconds=1)
        for t in takeovers if t.get("taken_from") in kill_times)
    console.log(f"{len(samples)} runs taken over after {kills} kills: {summary}; "
                f"{dead_owner} of {len(takeovers)} takeovers from a dead owner; "
                f"{steps / elapsed:.0f} events/s; {created} runs created, {failed} failed")
    return {
        "p50_ms": summary["p50_ms"],
        "p99_ms": summary["p99_ms"],
        "first_claim_s": round(first.first_claim_s or 0.0, 2),
        "runs": len(samples),
        "kills": kills,
        "max_ms": summary["max_ms"],
        "claim": claims,
        "first_claim_under_load_s": (round(statistics.median(replacements), 2)
                                     if replacements else None),
        "takeovers": {"dead_owner": dead_owner, "expired": len(takeovers) - dead_owner},
        "workers": size,
        "runs_in_flight": total,
        "runs_created": created,
        "runs_failed": failed,
        "events_per_s": round(steps / elapsed, 1),
        "lease_s": settings.lease_seconds,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "postgres": database.kind,
        "source": source_state(),
    }


if __name__ == "__main__":
    sys.exit(main("recovery", _benchmark))
