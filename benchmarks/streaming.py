"""streaming: live token streaming (ADR 0030) — how soon a watcher sees a reply's first
token, and what streaming costs a step.

Part 1, first delta: the whole path across processes. A ``tenantry api`` process and a
``tenantry worker`` process on the benchmark's database; the fake model server runs in this
process, streaming each reply a word every ``STREAMING_PIECE_MS`` (default 20) after a
``STREAMING_TTFT_MS`` (default 150) wait for its first token (a provider's time to first
token: the SSE client is connected and announced by then, as a person watching is). For
each of ``STREAMING_RUNS`` runs (default 300, ``STREAMING_CONCURRENCY`` at once, default
10) this process starts the run through the API and opens its event stream; the run makes
a 50 ms tool call first (the MCP test server's ``slow``: a call streams when a listener is
known as it starts, ADR 0030), then answers 31 words. Measured: from the moment the fake
model writes the answer's first text piece to the moment the stream delivers the first
``model_delta`` (same process, same clock): provider → worker (parse, publish) → Postgres
NOTIFY → API hub → SSE → client. Every run's deltas are checked to join into its
``ModelReplied`` text.

Part 2, step overhead: step_overhead.py's method (``Engine.stats``, wall time minus model
and tool time, recorded by the driver) on a worker in this process, built by the factory
``tenantry worker`` uses, against the fake model (its own process, instant, streaming on
request) and the MCP test server. Each run: two tool calls, then a 60-word answer (6
steps). Three configurations, each ``STREAMING_STEP_RUNS`` runs (default 300) at 20 at once,
the whole sequence twice (ABCABC, after a warm-up):

- ``off``: every account called without streaming (``TENANTRY_MODEL_NO_STREAM=*``);
- ``on``: streaming on, nobody watching (most runs): calls ask for whole answers, as
  ``off``'s do, with the delta sink in place;
- ``watched``: streaming on, every run announced as watched (this process LISTENs on a
  delta channel and announces each run on it, as an API process with an open stream
  does): every call streams, the worker publishes each reply's text and waits for its last
  delta before the step's commit.

``overhead_ratio`` = p50 platform ms per step, the dearer of ``watched`` and ``on``, ÷
``off``; ``overhead_ratio_watched`` / ``overhead_ratio_unwatched`` each; the means' and
the worker CPU per step's ratios are reported too.

Prints progress on stderr and one JSON line last on stdout:
``{"first_delta_p50_ms", "first_delta_p99_ms", "overhead_ratio", ...}``.

    .venv/bin/python benchmarks/streaming.py
    STREAMING_PARTS=first_delta .venv/bin/python benchmarks/streaming.py   # one part only
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx2
import orjson

from _harness import (
    Bench,
    CpuMeter,
    Tenancy,
    console,
    cpu_seconds,
    create_runs,
    env_positive,
    free_port,
    latency_summary,
    main,
    percentile,
    provision,
    scripted_input,
    source_state,
    tenantry_command,
    wait_for,
)
from tenantry.bootstrap import worker as runtime
from tenantry.config import Settings
from tenantry.ids import RunId
from tenantry.models.scripted import Reply
from tenantry.models.wire import Chat
from tenantry.runs.deltas import DELTA_CHANNEL_PREFIX, LISTENERS_CHANNEL, ROLL_CALL_CHANNEL
from tenantry.runs.engine import Engine, StepStats
from tenantry.runs.worker import Worker
from tenantry.testing.fake_model import FakeModelServer

OPERATOR_TOKEN = "op_bench_streaming"
PHASE_TIMEOUT_S = 300.0
STEPS_PER_RUN = 6
ANSWER_WORDS = 60
BENCH_CHANNEL = f"{DELTA_CHANNEL_PREFIX}benchmark0000000"


# -- part 1: first delta, end to end ---------------------------------------------------------


class TimedFake(FakeModelServer):
    """The fake model, noting when it writes each reply's first piece (perf_counter)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.first_piece: dict[str, float] = {}  # reply text -> when its first piece went

    def _piece(self, completion_id: str, chat: Chat, reply: Reply, index: int) -> None:
        super()._piece(completion_id, chat, reply, index)
        if index == 0 and reply.text:
            self.first_piece[reply.text] = time.perf_counter()


@dataclass(slots=True)
class Watched:
    text: str
    first_delta: float | None = None
    deltas: str = ""
    replied: str | None = None


async def _api_ready(base: str, proc_alive: Callable[[], bool]) -> None:
    async with httpx2.AsyncClient(base_url=base, timeout=2) as client:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not proc_alive():
                raise RuntimeError("the API process exited before it was ready")
            with contextlib.suppress(httpx2.TransportError):
                if (await client.get("/healthz")).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise RuntimeError("the API process was not ready within 60 s")


async def _caller(http: httpx2.AsyncClient, mcp_url: str) -> tuple[dict[str, str], str]:
    operator = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    r = await http.post("/admin/v1/tenants", headers=operator, json={"name": "stream"})
    r.raise_for_status()
    tenant = r.json()["tenant_id"]
    r = await http.post(f"/admin/v1/tenants/{tenant}/api-keys", headers=operator)
    r.raise_for_status()
    key = {"Authorization": f"Bearer {r.json()['api_key']}"}
    r = await http.post(f"/admin/v1/tenants/{tenant}/tool-servers", headers=operator,
                        json={"name": "effects", "url": mcp_url,
                              "honours_idempotency_keys": True})
    r.raise_for_status()
    r = await http.post("/v1/agents", headers=key, json={
        "name": "streamer", "model": "scripted", "system_prompt": "Be brief.",
        "tools": ["slow"]})
    r.raise_for_status()
    return key, r.json()["agent_id"]


async def _watch_one(http: httpx2.AsyncClient, key: dict[str, str], agent: str,
                     index: int, ttft_ms: int) -> Watched:
    text = f"run-{index} " + " ".join(f"word{i}" for i in range(30))
    watched = Watched(text)
    # A short tool call first: a call streams if a listener is known as it starts, and
    # the run's first call is made within milliseconds of its creation.
    script = scripted_input([{"tool_calls": [{"name": "slow", "arguments": {"seconds": 0.05}}]},
                             {"text": text, "delay_ms": ttft_ms}], f"r{index}")
    r = await http.post("/v1/runs", headers=key, json={"agent_id": agent, "input": script})
    r.raise_for_status()
    run_id = r.json()["run_id"]
    async with http.stream("GET", f"/v1/runs/{run_id}/events", headers=key,
                           timeout=httpx2.Timeout(30, read=60)) as stream:
        async for line in stream.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line.startswith('data: {"type":"model_delta"'):
                if watched.first_delta is None:
                    watched.first_delta = time.perf_counter()
                watched.deltas += orjson.loads(line[6:])["text"]
                continue
            event = orjson.loads(line[6:])
            if event["type"] == "ModelReplied" and event["data"]["text"]:
                watched.replied = event["data"]["text"]
            if event["type"] in ("RunFinished", "RunFailed", "RunCancelled", "BudgetStopped"):
                break
    return watched


async def first_delta(bench: Bench, dsn: str) -> dict[str, Any]:
    runs = int(env_positive("STREAMING_RUNS", 300))
    concurrency = int(env_positive("STREAMING_CONCURRENCY", 10))
    piece_ms = env_positive("STREAMING_PIECE_MS", 20)
    ttft_ms = int(env_positive("STREAMING_TTFT_MS", 150))
    mcp = bench.mcp_server()
    mcp_url = await mcp.ready()
    async with TimedFake(chunk_delay_ms=piece_ms) as fake:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        env = {"TENANTRY_OPERATOR_TOKEN": OPERATOR_TOKEN, "TENANTRY_LOG_FORMAT": "json",
               "TENANTRY_DATA_DIR": str(bench.workdir / "data"),
               "TENANTRY_MODEL_BASE_URL": fake.base_url,
               "TENANTRY_SSE_MAX_STREAMS_PER_TENANT": "1000"}
        api = bench.start("api", tenantry_command("api", "--database-url", dsn, "--host",
                                                  "127.0.0.1", "--port", str(port)), env)
        worker = bench.start("worker", tenantry_command(
            "worker", "--processes", "1", "--database-url", dsn), env)
        await _api_ready(base, lambda: api.proc.poll() is None)
        console.log(f"first delta: API at {base}, worker pid {worker.pid}, fake model "
                    f"in this process ({piece_ms:g} ms a word, {ttft_ms} ms to the first)")
        try:
            async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
                key, agent = await _caller(http, mcp_url)
                gate = asyncio.Semaphore(concurrency)

                async def one(index: int) -> Watched:
                    async with gate:
                        return await _watch_one(http, key, agent, index, ttft_ms)

                await asyncio.gather(*(one(-i - 1) for i in range(concurrency)))  # warm-up
                started = time.perf_counter()
                watched = await asyncio.gather(*(one(i) for i in range(runs)))
                elapsed = time.perf_counter() - started
        finally:
            # Part 2 drives its own worker: this one must not claim its runs.
            worker.stop()
            api.stop()
            mcp.stop()
    latencies, wrong, missing = [], 0, 0
    for w in watched:
        written = fake.first_piece.get(w.text)
        if w.first_delta is None or written is None:
            missing += 1
            continue
        latencies.append((w.first_delta - written) * 1000)
        if w.deltas != w.replied or w.replied != w.text:
            wrong += 1
    if missing or wrong:
        raise RuntimeError(f"first delta: {missing} runs without a delta, {wrong} whose "
                           "deltas did not join into their ModelReplied")
    summary = latency_summary(latencies)
    ordered = sorted(latencies)
    console.log(f"first delta: {runs} runs in {elapsed:.1f} s; ms {summary}; slowest "
                f"{[round(v, 1) for v in ordered[-10:]]}")
    return {**summary, "runs": runs, "concurrency": concurrency, "piece_ms": piece_ms,
            "ttft_ms": ttft_ms, "min_ms": round(min(latencies), 2),
            "mean_ms": round(statistics.fmean(latencies), 2)}


# -- part 2: step overhead, streaming on and off ----------------------------------------------


def _script(index: int) -> dict[str, Any]:
    call = {"tool_calls": [{"name": "echo", "arguments": {"text": f"{{input}} {index}"}}]}
    words = " ".join(f"word{i}" for i in range(ANSWER_WORDS - 1))
    return scripted_input([call, call, {"text": f"done: {{last_tool_result}} {words}"}],
                          f"run-{index}")


@dataclass(slots=True)
class Phase:
    name: str
    steps: list[float]
    seconds: float
    worker_cpu: float

    @property
    def cpu_ms_per_step(self) -> float:
        return self.worker_cpu * 1000 / max(len(self.steps), 1)


class Watchers:
    """Plays an API process watching every run: a session LISTENing on a delta channel of
    its own, announcing runs on it — again every few seconds, and when a worker asks (its
    roll call as its session opens), as the hub does."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self.received = 0
        self.runs: list[tuple[str, str]] = []
        self._conn: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._asked = asyncio.Event()

    async def __aenter__(self) -> Watchers:
        self._conn = await asyncpg.connect(self._dsn)
        await self._conn.add_listener(BENCH_CHANNEL, self._on_delta)
        await self._conn.add_listener(ROLL_CALL_CHANNEL, self._on_roll_call)
        self._task = asyncio.create_task(self._again())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._conn is not None:
            await self._conn.close()

    def _on_delta(self, *_args: object) -> None:
        self.received += 1

    def _on_roll_call(self, *_args: object) -> None:
        self._asked.set()

    async def watch(self, tenant: str, runs: list[RunId]) -> None:
        self.runs = [(tenant, str(run.uuid)) for run in runs]
        await self._announce()

    async def _announce(self) -> None:
        assert self._conn is not None
        lines = [f"+{tenant} {run}" for tenant, run in self.runs]
        for start in range(0, len(lines), 100):
            await self._conn.execute("SELECT pg_notify($1, $2)", LISTENERS_CHANNEL,
                                     "\n".join([BENCH_CHANNEL, *lines[start:start + 100]]))

    async def _again(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(4.0):
                    await self._asked.wait()
            self._asked.clear()
            if self.runs:
                await self._announce()


async def _phase(name: str, engine: Engine, dsn: str, tenancy: Tenancy, runs: int,
                 watchers: Watchers | None) -> Phase:
    ids = await create_runs(engine.db, tenancy, [_script(i) for i in range(runs)])
    if watchers is not None:
        await watchers.watch(tenancy.tenant.value, ids)
    engine.stats = StepStats()
    stats = engine.stats
    worker = Worker(engine, dsn=dsn, concurrency=20, poll_seconds=0.1, drain_seconds=1.0)
    stop = asyncio.Event()
    cpu_before = cpu_seconds(os.getpid())
    started = time.perf_counter()
    task = asyncio.create_task(worker.run(stop), name=f"worker {name}")
    try:
        await wait_for(lambda: stats.runs_ended >= runs or task.done(),
                       within=PHASE_TIMEOUT_S, what=f"{runs} runs to end",
                       progress=lambda: f"{name}: {stats.runs_ended}/{runs} runs")
        elapsed = time.perf_counter() - started
        worker_cpu = cpu_seconds(os.getpid()) - cpu_before
    finally:
        stop.set()
        await task
    if stats.runs_failed_ours or len(stats.platform_ms) != runs * STEPS_PER_RUN:
        raise RuntimeError(f"{name}: runs did not go as scripted ({len(stats.platform_ms)} "
                           f"steps, {stats.runs_failed_ours} failed by the platform)")
    phase = Phase(name, list(stats.platform_ms), elapsed, worker_cpu)
    console.log(f"{name}: {len(phase.steps)} steps in {elapsed:.2f} s; platform ms "
                f"{latency_summary(phase.steps)}; worker CPU {phase.cpu_ms_per_step:.2f} "
                "ms/step")
    return phase


@contextlib.asynccontextmanager
async def _engine(settings: Settings, dsn: str) -> AsyncIterator[Engine]:
    async with runtime.engine(settings, dsn, name="bench") as engine:
        yield engine


async def step_overhead(bench: Bench, dsn: str) -> dict[str, Any]:
    runs = int(env_positive("STREAMING_STEP_RUNS", 300))
    model_proc, mcp_proc = bench.fake_model(), bench.mcp_server()
    model_url, mcp_url = await asyncio.gather(model_proc.ready(), mcp_proc.ready())
    cpu = CpuMeter({"fake_model": lambda: cpu_seconds(model_proc.pid),
                    "postgres": bench.postgres_cpu()})
    base = Settings.from_env().with_(model_base_url=model_url, sandbox_backend="none")
    configs: dict[str, Settings] = {"off": base.with_(model_no_stream=("*",)),
                                    "on": base, "watched": base}
    found: dict[str, list[Phase]] = {name: [] for name in configs}
    tenancy: Tenancy | None = None
    cpu.start()
    async with Watchers(dsn) as watchers:
        for round_ in range(3):
            for name, settings in configs.items():
                async with _engine(settings, dsn) as engine:
                    if tenancy is None:
                        tenancy = await provision(engine.db, mcp_url, ("echo",))
                    if round_ == 0:  # a warm-up of each: pools, statements, connections
                        if name == "off":
                            await _phase("warm-up", engine, dsn, tenancy, 20, None)
                        continue
                    found[name].append(await _phase(
                        f"{name} ({round_})", engine, dsn, tenancy, runs,
                        watchers if name == "watched" else None))
        received = watchers.received
    if received == 0:
        raise RuntimeError("the watched phases published no delta")

    def merged(name: str) -> dict[str, float]:
        steps = sorted(ms for phase in found[name] for ms in phase.steps)
        cpu_ms = sum(p.worker_cpu for p in found[name]) * 1000 / len(steps)
        return {"p50_ms": round(percentile(steps, 0.5), 3),
                "p99_ms": round(percentile(steps, 0.99), 3),
                "mean_ms": round(statistics.fmean(steps), 3),
                "worker_cpu_ms_per_step": round(cpu_ms, 3), "steps": len(steps)}

    figures = {name: merged(name) for name in configs}
    off = figures["off"]

    def ratio(name: str, key: str) -> float:
        return round(figures[name][key] / off[key], 3)

    return {"overhead_ratio": max(ratio("watched", "p50_ms"), ratio("on", "p50_ms")),
            "overhead_ratio_unwatched": ratio("on", "p50_ms"),
            "overhead_ratio_watched": ratio("watched", "p50_ms"),
            "overhead_ratio_mean": max(ratio("watched", "mean_ms"), ratio("on", "mean_ms")),
            "cpu_ratio": max(ratio("watched", "worker_cpu_ms_per_step"),
                             ratio("on", "worker_cpu_ms_per_step")),
            "platform": figures, "deltas_published": received, "cpu": cpu.shares()}


async def _benchmark(bench: Bench) -> dict[str, Any]:
    database = await bench.database()
    parts: list[tuple[str, Callable[[Bench, str], Awaitable[dict[str, Any]]]]] = [
        ("first_delta", first_delta), ("steps", step_overhead)]
    chosen = os.environ.get("STREAMING_PARTS", "first_delta,steps").split(",")
    found: dict[str, dict[str, Any]] = {}
    for name, part in parts:
        found[name] = await part(bench, database.dsn) if name in chosen else {}
    first, steps = found["first_delta"], found["steps"]
    return {
        "first_delta_p50_ms": first.get("p50_ms"),
        "first_delta_p99_ms": first.get("p99_ms"),
        "overhead_ratio": steps.pop("overhead_ratio", None),
        "first_delta": first,
        **steps,
        "postgres": database.kind,
        "source": source_state(),
    }


if __name__ == "__main__":
    sys.exit(main("streaming", _benchmark))
