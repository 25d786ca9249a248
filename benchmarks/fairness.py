"""fairness: a whale's backlog against two steady tenants, the fair claim against FIFO.

Set-up, once per claim order (``fair``, then ``fifo``), each on a fresh migrated database
(``TENANTRY_DATABASE_URL``, else an embedded Postgres): the fake model server, a real API
process (``tenantry api``) and ``FAIRNESS_WORKERS`` real ``tenantry worker --concurrency
FAIRNESS_CONCURRENCY`` processes pointed at the fake model, with ``TENANTRY_CLAIM_ORDER`` set
to the order measured. Tenants, keys, agents and policies are made over HTTP as an operator
and a tenant would: all weight 1; the whale A may run as many runs as there are slots (it
borrows every idle one), B and C at most 10 each; ``max_queued`` above what each submits.

Load: at t=0 A submits ``FAIRNESS_WHALE_RUNS`` runs (default 3,000) over
``FAIRNESS_CLIENTS`` concurrent connections, as fast as the API takes them; B and C each
submit one run every ``FAIRNESS_INTERVAL_S`` (0.5 s, offset by half an interval from each
other, on schedule whatever the API's latency) until A has nothing left queued. Every run
is one scripted model reply after ``FAIRNESS_DELAY_MS``, then finish.

Why 80 slots and 2 s (not, say, 40 and 0.4 s): everything one tenant's runs do locks its
one ``tenant_load`` row (admission, each budget reservation and settlement, each status
change), so on a 2-core box a tenant's run rate tops out at ~40-50 runs/s, and near that
the row has a queue of lock waiters. A claim must lock the row to hand out the whale's next
run, so it waits in that queue while slots stand idle (utilization measured ~0.8 at 40
slots x 0.4 s). 80 x 2 s offers A ~40 runs/s: a backlog of ~90 s, both passes in ~3.5 min.

Sampled every 100 ms (superuser connection, one statement, so one snapshot): queued and
running runs per tenant, counted from ``runs`` and as ``tenant_load`` holds them. The
backlog is the span of samples in which A had runs queued. Measured, per tenant, for the
runs created during the backlog: queue wait = ``started_at - created_at`` (p50 / p95 / max,
seconds, nearest rank). ``utilization`` (fair pass): busy slot-seconds over slot-seconds
while A had runs queued, from the samples (running runs / slots, weighted by time);
``fifo_utilization`` is the same for the baseline.

Also reported, per pass (``details``): the backlog length; how long A's submission took;
the API's answer time for each tenant's submissions during A's burst and after; how long
runs held their slot; utilization recomputed from the rows (claim to end) and the time from
a run's end to the claim that refilled a slot (``refill_ms``); the most runs each tenant
held at once; samples where ``tenant_load`` disagreed with the rows or a tenant exceeded its
``max_running`` (FIFO ignores it by design; under fair it is a fault); runs that did not
finish; worker processes that died (each is started again, as a supervisor would, so the
pass can finish: the death is a finding, not hidden); each process's CPU share (``cpu``;
``others`` is the rest of the machine, ``stalled`` the share of time some task waited for
a CPU).

Prints progress on stderr and one JSON line last on stdout:
``{"whale": "A", "fair": {tenant: {"p50_wait_s", "p95_wait_s", "max_wait_s"}},
"fifo": {same}, "utilization", "fifo_utilization", "steady_submit_p95_ms_during_whale":
{tenant: ms}, "slots", "backlog_s", ...}``.
Environment overrides: FAIRNESS_WHALE_RUNS (3000), FAIRNESS_WORKERS (2),
FAIRNESS_CONCURRENCY (40), FAIRNESS_DELAY_MS (2000), FAIRNESS_INTERVAL_S (0.5),
FAIRNESS_CLIENTS (32).
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import itertools
import math
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg
import httpx2
import orjson

from _harness import (
    Bench,
    BenchDatabase,
    CpuMeter,
    Helper,
    console,
    cpu_seconds,
    env_positive,
    free_port,
    main,
    percentile,
    scripted_input,
    source_state,
    tenantry_command,
)

OPERATOR_TOKEN = "op_benchmark_fairness"
WHALE = "A"
STEADY = ("B", "C")
TENANTS = (WHALE, *STEADY)
STEADY_MAX_RUNNING = 10
SAMPLE_EVERY_S = 0.1
STARTUP_TIMEOUT_S = 120.0
BACKLOG_TIMEOUT_S = 300.0
DRAIN_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 30.0
NOTE_EVERY_S = 5.0


@dataclass(frozen=True, slots=True)
class Config:
    whale_runs: int
    workers: int
    concurrency: int
    delay_ms: int
    interval_s: float
    clients: int

    @property
    def slots(self) -> int:
        return self.workers * self.concurrency


def _config() -> Config:
    return Config(
        whale_runs=int(env_positive("FAIRNESS_WHALE_RUNS", 3000)),
        workers=int(env_positive("FAIRNESS_WORKERS", 2)),
        concurrency=int(env_positive("FAIRNESS_CONCURRENCY", 40)),
        delay_ms=int(env_positive("FAIRNESS_DELAY_MS", 2000)),
        interval_s=env_positive("FAIRNESS_INTERVAL_S", 0.5),
        clients=int(env_positive("FAIRNESS_CLIENTS", 32)),
    )


# -- the platform under test -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tenant:
    label: str
    tenant_id: str
    api_key: str
    agent_id: str
    max_running: int


def _expect(response: httpx2.Response, status: int) -> dict[str, Any]:
    if response.status_code != status:
        raise RuntimeError(f"{response.request.method} {response.request.url} -> "
                           f"{response.status_code}: {response.text[:500]}")
    body: dict[str, Any] = response.json()
    return body


async def _start_api(bench: Bench, order: str, dsn: str) -> tuple[Helper, str]:
    port = free_port()
    api = bench.start(f"api-{order}", tenantry_command("api", "--host", "127.0.0.1",
                                                       "--port", str(port)),
                      env={"TENANTRY_DATABASE_URL": dsn,
                           "TENANTRY_DATA_DIR": str(bench.workdir / f"data-{order}"),
                           "TENANTRY_OPERATOR_TOKEN": OPERATOR_TOKEN,
                           "TENANTRY_LOG_FORMAT": "json"})
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    async with httpx2.AsyncClient(base_url=base, timeout=2.0, trust_env=False) as http:
        while time.monotonic() < deadline:
            if api.proc.poll() is not None:
                raise RuntimeError(f"tenantry api exited with {api.proc.returncode}:\n"
                                   f"{api.tail()}")
            try:
                if (await http.get("/healthz")).status_code == 200:
                    return api, base
            except httpx2.TransportError:
                pass  # not listening yet
            await asyncio.sleep(0.1)
    raise RuntimeError(f"tenantry api not healthy after {STARTUP_TIMEOUT_S:.0f} s:\n"
                       f"{api.tail()}")


async def _provision(base: str, cfg: Config) -> dict[str, Tenant]:
    """Tenants, keys, agents and policies, through the operator and tenant APIs."""
    admin = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    made: dict[str, Tenant] = {}
    async with httpx2.AsyncClient(base_url=base, timeout=REQUEST_TIMEOUT_S,
                                  trust_env=False) as http:
        for label in TENANTS:
            tenant = _expect(await http.post(
                "/admin/v1/tenants", json={"name": f"fairness {label}"}, headers=admin), 201)
            tid = tenant["tenant_id"]
            key = _expect(await http.post(f"/admin/v1/tenants/{tid}/api-keys",
                                          json={"name": "bench"}, headers=admin), 201)
            whale = label == WHALE
            max_running = cfg.slots if whale else STEADY_MAX_RUNNING
            # Room for everything this tenant submits: admission must refuse nothing.
            steady_runs = math.ceil(BACKLOG_TIMEOUT_S / cfg.interval_s) + 10
            _expect(await http.put(f"/admin/v1/tenants/{tid}/policy", json={
                "weight": 1, "max_running": max_running,
                "max_queued": cfg.whale_runs + 100 if whale else steady_runs,
            }, headers=admin), 200)
            agent = _expect(await http.post(
                "/v1/agents", json={"name": "fairness-agent", "model": "scripted",
                                    "system_prompt": "Answer briefly."},
                headers={"Authorization": f"Bearer {key['api_key']}"}), 201)
            made[label] = Tenant(label, tid, key["api_key"], agent["agent_id"], max_running)
    return made


@dataclass(slots=True)
class Workers:
    """The pass's ``tenantry worker`` processes. One that dies is started again, as a
    supervisor would, and the death is reported (a platform fault, not a figure to hide):
    its runs go back to the queue (the worker releases its leases on the way out)."""

    bench: Bench
    order: str
    cfg: Config
    dsn: str
    model_url: str
    live: list[Helper] = field(default_factory=list)
    every: list[Helper] = field(default_factory=list)
    crashes: list[dict[str, Any]] = field(default_factory=list)
    _cpu: dict[int, float] = field(default_factory=dict)

    def _start(self, slot: int) -> Helper:
        generation = sum(1 for h in self.every if h.name.startswith(f"worker-{self.order}-{slot}"))
        suffix = f".{generation}" if generation else ""
        helper = self.bench.start(
            f"worker-{self.order}-{slot}{suffix}",
            # One process each: its pid's CPU is the worker's, and a dead one is restarted
            # here.
            tenantry_command("worker", "--processes", "1",
                             "--concurrency", str(self.cfg.concurrency)),
            env={"TENANTRY_DATABASE_URL": self.dsn, "TENANTRY_MODEL_BASE_URL": self.model_url,
                 "TENANTRY_CLAIM_ORDER": self.order,
                 "TENANTRY_DATA_DIR": str(self.bench.workdir / f"data-{self.order}"),
                 "TENANTRY_LOG_FORMAT": "json"})
        self.every.append(helper)
        return helper

    async def start(self) -> None:
        self.live = [self._start(i) for i in range(self.cfg.workers)]
        await asyncio.gather(*(w.line(w.stderr, lambda line: '"worker started"' in line)
                               for w in self.live))

    def restart_dead(self, elapsed: float) -> None:
        for slot, helper in enumerate(self.live):
            if helper.proc.poll() is None:
                continue
            errors = [line.strip() for line in helper.tail(20_000).splitlines()
                      if "Error:" in line or "Error " in line]
            what = errors[-1] if errors else f"exit status {helper.proc.returncode}"
            self.crashes.append({"worker": helper.name, "at_s": round(elapsed, 1),
                                 "exit": helper.proc.returncode, "error": what})
            console.log(f"[red]{helper.name} died after {elapsed:.1f} s ({what}); "
                        "starting it again")
            self.live[slot] = self._start(slot)

    def cpu_seconds(self) -> float:
        """CPU of every worker process of the pass, the dead ones' as last read."""
        for helper in self.every:
            used = cpu_seconds(helper.pid)
            if not math.isnan(used):
                self._cpu[helper.pid] = used
        return sum(self._cpu.values())

    def stop(self) -> None:
        for helper in self.live:
            helper.stop()


# -- load ------------------------------------------------------------------------------------


@dataclass(slots=True)
class Submissions:
    """What one tenant's client sent: answer times (s) of accepted runs, and refusals."""

    latencies: list[float] = field(default_factory=list)
    sent: list[float] = field(default_factory=list)  # perf_counter() at each accepted send
    errors: int = 0

    def answer_ms(self, start: float, end: float) -> dict[str, float]:
        """API answer time of the runs sent in [start, end)."""
        return _ms_summary([latency for at, latency in zip(self.sent, self.latencies,
                                                           strict=True) if start <= at < end])

    def note_error(self, label: str, what: str) -> None:
        self.errors += 1
        if self.errors <= 5:  # the first few: a broken platform would flood the terminal
            console.log(f"[red]{label}: run refused: {what}")


def _client(base: str, tenant: Tenant, connections: int) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        base_url=base, timeout=REQUEST_TIMEOUT_S, trust_env=False,
        limits=httpx2.Limits(max_connections=connections,
                             max_keepalive_connections=connections),
        headers={"Authorization": f"Bearer {tenant.api_key}",
                 "Content-Type": "application/json"})


def _body(tenant: Tenant, index: int, delay_ms: int) -> bytes:
    value = scripted_input([{"text": "done", "delay_ms": delay_ms}], f"{tenant.label}-{index}")
    return orjson.dumps({"agent_id": tenant.agent_id, "input": value})


async def _submit(http: httpx2.AsyncClient, body: bytes, label: str, into: Submissions) -> None:
    sent = time.perf_counter()
    try:
        response = await http.post("/v1/runs", content=body)
    except httpx2.HTTPError as exc:
        into.note_error(label, repr(exc))
        return
    if response.status_code == 202:
        into.latencies.append(time.perf_counter() - sent)
        into.sent.append(sent)
    else:
        into.note_error(label, f"{response.status_code} {response.text[:200]}")


async def _whale(base: str, tenant: Tenant, cfg: Config, into: Submissions) -> float:
    """All of A's runs, closed loop over ``clients`` connections; returns the seconds taken."""
    bodies = iter([_body(tenant, i, cfg.delay_ms) for i in range(cfg.whale_runs)])
    started = time.perf_counter()
    async with _client(base, tenant, cfg.clients) as http:
        async def loop() -> None:
            for body in bodies:  # shared iterator: each body is sent once
                await _submit(http, body, tenant.label, into)

        await asyncio.gather(*(loop() for _ in range(cfg.clients)))
    return time.perf_counter() - started


async def _steady(
    base: str, tenant: Tenant, cfg: Config, offset: float, stop: asyncio.Event,
    into: Submissions,
) -> None:
    """One run every ``interval_s`` on a fixed schedule until ``stop``; a slow answer does
    not delay the next send (each send is its own task)."""
    sends: list[asyncio.Task[None]] = []
    async with _client(base, tenant, 8) as http:
        slot = time.perf_counter() + offset
        index = 0
        while not stop.is_set():
            delay = slot - time.perf_counter()
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                    break
                except TimeoutError:
                    pass
            sends.append(asyncio.create_task(
                _submit(http, _body(tenant, index, cfg.delay_ms), tenant.label, into)))
            index += 1
            slot += cfg.interval_s
        await asyncio.gather(*sends)


# -- sampling --------------------------------------------------------------------------------

# One statement, one snapshot: the rows' counts and the scheduler's counters side by side.
SAMPLE_SQL = """
WITH counted AS (
    SELECT tenant_id, count(*) FILTER (WHERE status = 'queued') AS queued,
           count(*) FILTER (WHERE status = 'running') AS running
    FROM runs WHERE status IN ('queued', 'running') GROUP BY tenant_id
)
SELECT l.tenant_id, coalesce(c.queued, 0) AS queued, coalesce(c.running, 0) AS running,
       l.queued AS load_queued, l.running AS load_running, clock_timestamp() AS at
FROM tenant_load l LEFT JOIN counted c ON c.tenant_id = l.tenant_id
WHERE l.tenant_id = ANY($1::text[])
"""


@dataclass(frozen=True, slots=True)
class Sample:
    at: datetime  # database clock, comparable with runs.created_at
    queued: dict[str, int]  # by tenant label
    running: dict[str, int]
    load_mismatch: dict[str, tuple[int, int, int, int]]  # label: rows q, r; load q, r

    @property
    def total_running(self) -> int:
        return sum(self.running.values())


@dataclass(slots=True)
class Sampler:
    conn: asyncpg.Connection
    tenants: dict[str, Tenant]
    workers: Workers
    api: Helper
    samples: list[Sample] = field(default_factory=list)
    backlog_over: asyncio.Event = field(default_factory=asyncio.Event)
    whale_submitted: bool = False

    async def run(self, stop: asyncio.Event, started: float) -> None:
        labels = {t.tenant_id: label for label, t in self.tenants.items()}
        ids = list(labels)
        next_note = 0.0
        while not stop.is_set():
            if self.api.proc.poll() is not None:
                raise RuntimeError(f"{self.api.name} exited with {self.api.proc.returncode}:"
                                   f"\n{self.api.tail()}")
            self.workers.restart_dead(time.perf_counter() - started)
            rows = await self.conn.fetch(SAMPLE_SQL, ids)
            sample = Sample(
                at=rows[0]["at"],
                queued={labels[r["tenant_id"]]: r["queued"] for r in rows},
                running={labels[r["tenant_id"]]: r["running"] for r in rows},
                load_mismatch={
                    labels[r["tenant_id"]]: (r["queued"], r["running"], r["load_queued"],
                                             r["load_running"])
                    for r in rows
                    if (r["queued"], r["running"]) != (r["load_queued"], r["load_running"])
                },
            )
            self.samples.append(sample)
            # Once A has sent everything, its queue only shrinks: empty means the backlog
            # is over (or never formed: _figures says so).
            if self.whale_submitted and sample.queued[WHALE] == 0:
                self.backlog_over.set()
            now = time.perf_counter() - started
            if now >= next_note:
                console.log(f"{now:5.1f} s: queued {sample.queued}, running {sample.running}")
                next_note = now + NOTE_EVERY_S
            await asyncio.sleep(SAMPLE_EVERY_S)


# -- one pass --------------------------------------------------------------------------------


def _wait_summary(waits: list[float]) -> dict[str, float]:
    ordered = sorted(waits)
    if not ordered:
        return {"p50_wait_s": math.nan, "p95_wait_s": math.nan, "max_wait_s": math.nan}
    return {"p50_wait_s": round(percentile(ordered, 0.50), 3),
            "p95_wait_s": round(percentile(ordered, 0.95), 3),
            "max_wait_s": round(ordered[-1], 3)}


def _ms_summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    if not ordered:
        return {"p50_ms": math.nan, "p95_ms": math.nan, "max_ms": math.nan}
    return {"p50_ms": round(percentile(ordered, 0.50) * 1000, 2),
            "p95_ms": round(percentile(ordered, 0.95) * 1000, 2),
            "max_ms": round(ordered[-1] * 1000, 2) if ordered else math.nan}


async def _drain(conn: asyncpg.Connection) -> None:
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while True:
        left = await conn.fetchval(
            "SELECT count(*) FROM runs WHERE status IN ('queued', 'running', 'waiting')")
        if left == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{left} runs still not ended {DRAIN_TIMEOUT_S:.0f} s after "
                               "the backlog")
        await asyncio.sleep(0.2)


async def _pass(
    bench: Bench, cfg: Config, order: str, database: BenchDatabase, model: Helper,
    model_url: str,
) -> dict[str, Any]:
    console.rule(f"{order} claim")
    api, base = await _start_api(bench, order, database.dsn)
    tenants = await _provision(base, cfg)
    workers = Workers(bench, order, cfg, database.dsn, model_url)
    await workers.start()
    console.log(f"API at {base}; {cfg.workers} workers x {cfg.concurrency} slots "
                f"(TENANTRY_CLAIM_ORDER={order}); tenants "
                + ", ".join(f"{t.label}={t.tenant_id}" for t in tenants.values()))
    cpu = CpuMeter({
        "workers": workers.cpu_seconds,
        "api": lambda: cpu_seconds(api.pid),
        "fake_model": lambda: cpu_seconds(model.pid),
        "postgres": bench.postgres_cpu(),
        "bench": functools.partial(cpu_seconds, os.getpid()),  # the load generator
    })
    submitted = {label: Submissions() for label in TENANTS}
    # The sampler's own connection: its 100 ms statements never queue behind other reads.
    sampling_conn = await asyncpg.connect(database.dsn)
    conn = await asyncpg.connect(database.dsn)
    tasks: list[asyncio.Task[Any]] = []
    try:
        sampler = Sampler(sampling_conn, tenants, workers, api)
        stop_sampling = asyncio.Event()
        cpu.start()
        started = time.perf_counter()
        sampling = asyncio.create_task(sampler.run(stop_sampling, started))
        steady = [asyncio.create_task(_steady(base, tenants[label], cfg,
                                              i * cfg.interval_s / len(STEADY),
                                              sampler.backlog_over, submitted[label]))
                  for i, label in enumerate(STEADY)]
        backlog_over = asyncio.create_task(sampler.backlog_over.wait())
        tasks = [sampling, *steady, backlog_over]
        whale_s = await _whale(base, tenants[WHALE], cfg, submitted[WHALE])
        sampler.whale_submitted = True
        console.log(f"A's {cfg.whale_runs} runs submitted in {whale_s:.1f} s "
                    f"({submitted[WHALE].errors} refused)")
        await asyncio.wait([backlog_over, sampling], timeout=BACKLOG_TIMEOUT_S,
                           return_when=asyncio.FIRST_COMPLETED)
        if sampling.done():
            sampling.result()  # a helper died: raise its error
        if not sampler.backlog_over.is_set():
            raise RuntimeError(f"A still had runs queued after {BACKLOG_TIMEOUT_S:.0f} s")
        until_empty_s = time.perf_counter() - started
        await asyncio.gather(*steady)
        console.log(f"A's queue empty after {until_empty_s:.1f} s; waiting for the last runs")
        await _drain(conn)
        stop_sampling.set()
        await sampling
        shares = cpu.shares()
        rows = await conn.fetch(
            "SELECT tenant_id, status, created_at, started_at, finished_at, "
            "error->>'type' AS error_type, error->>'message' AS error_message FROM runs "
            "WHERE tenant_id = ANY($1::text[])", [t.tenant_id for t in tenants.values()])
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await sampling_conn.close()
        await conn.close()
    workers.stop()
    api.stop()
    result = _figures(cfg, order, tenants, sampler.samples, rows, submitted,
                      (started, started + whale_s), until_empty_s, shares)
    result["worker_crashes"] = workers.crashes
    return result


def _utilization(samples: list[Sample], slots: int) -> float:
    """Busy slot-seconds over slot-seconds while A had runs queued: each sample's running
    count holds until the next sample (the sampler's period stretches when this process is
    busy submitting, so samples are weighted by time, not counted)."""
    busy = span = 0.0
    for sample, after in itertools.pairwise(samples):
        if sample.queued[WHALE] > 0:
            seconds = (after.at - sample.at).total_seconds()
            busy += sample.total_running * seconds
            span += seconds
    return busy / (span * slots) if span else math.nan


def _row_utilization(
    spans: list[tuple[datetime, datetime]], first: datetime, last: datetime, slots: int,
) -> float:
    """The same share from the rows: each run busy from its claim to its end (both the
    start of their transactions), clipped to the backlog. A check on the sampled figure."""
    window = (last - first).total_seconds()
    busy = sum(max(0.0, (min(end, last) - max(start, first)).total_seconds())
               for start, end in spans)
    return busy / (window * slots) if window > 0 else math.nan


def _refill_gaps(
    spans: list[tuple[datetime, datetime]], first: datetime, last: datetime,
) -> list[float]:
    """How long a slot stood empty: each run that ended during the backlog is matched, in
    order, with the next claim made at or after its end (while A has runs queued, every
    slot that frees is claimed again). Both ends are transaction starts, so this spans the
    finishing transaction (its lock waits included), the worker noticing the free slot, and
    the claim up to its start (not the claim's own waits for a tenant row)."""
    starts = sorted(start for start, _ in spans)
    ends = sorted(end for _, end in spans if first <= end <= last)
    gaps: list[float] = []
    j = 0
    for end in ends:
        j = max(j, bisect.bisect_left(starts, end))
        if j >= len(starts):
            break
        gaps.append((starts[j] - end).total_seconds())
        j += 1
    return gaps


def _figures(
    cfg: Config, order: str, tenants: dict[str, Tenant], samples: list[Sample],
    rows: list[asyncpg.Record], submitted: dict[str, Submissions],
    whale_window: tuple[float, float], until_empty_s: float, shares: dict[str, float],
) -> dict[str, Any]:
    backlog = [s for s in samples if s.queued[WHALE] > 0]
    if not backlog:
        raise RuntimeError(f"{order}: A never had runs queued (the workers kept up with its "
                           "submissions); use fewer slots or a longer FAIRNESS_DELAY_MS")
    first, last = backlog[0].at, backlog[-1].at
    label_of = {t.tenant_id: label for label, t in tenants.items()}
    statuses: dict[str, int] = {}
    failures: dict[str, int] = {}
    per_tenant: dict[str, Any] = {}
    for label in TENANTS:
        mine = [r for r in rows if label_of[r["tenant_id"]] == label]
        for r in mine:
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
            if r["status"] != "finished":
                what = f"{r['error_type']}: {(r['error_message'] or '')[:160]}"
                failures[what] = failures.get(what, 0) + 1
        # The runs created while A had work queued (all of A's; B's and C's from then).
        during = [r for r in mine if label == WHALE or r["created_at"] <= last]
        waits = [(r["started_at"] - r["created_at"]).total_seconds() for r in during
                 if r["started_at"] is not None]
        per_tenant[label] = {
            **_wait_summary(waits),
            "runs": len(during),
            "never_started": len(during) - len(waits),
            # started_at is the claim transaction's now(): a claim that first waited for a
            # busy tenant row picks up runs created meanwhile, so some waits are below zero.
            "min_wait_s": round(min(waits), 3) if waits else math.nan,
            "negative_waits": sum(1 for w in waits if w < 0),
            "peak_running": max(s.running[label] for s in samples),
            "max_running": tenants[label].max_running,
            # Claim to end (both transaction starts): the model delay plus the platform's
            # steps, among them waits for the tenant's tenant_load row lock.
            "run_held_ms": _ms_summary([(r["finished_at"] - r["started_at"]).total_seconds()
                                        for r in mine if r["finished_at"] and r["started_at"]]),
            # The API's answer time while A was submitting, and after (seconds of the run's
            # life before created_at, so not in its queue wait).
            "submit_ms_during_whale": submitted[label].answer_ms(*whale_window),
            "submit_ms_after_whale": submitted[label].answer_ms(whale_window[1], math.inf),
            "refused": submitted[label].errors,
        }
    utilization = _utilization(samples, cfg.slots)
    spans = [(r["started_at"], r["finished_at"]) for r in rows
             if r["finished_at"] is not None and r["started_at"] is not None]
    over_ceiling = sum(1 for s in samples for label in TENANTS
                       if s.running[label] > tenants[label].max_running)
    mismatches = [s for s in samples if s.load_mismatch]
    for s in mismatches[:3]:
        console.log(f"[red]{order}: tenant_load disagrees with runs at {s.at}: "
                    f"{s.load_mismatch} (rows queued, running; load queued, running)")
    console.log(f"{order}: " + "; ".join(
        f"{label} p50/p95/max {v['p50_wait_s']}/{v['p95_wait_s']}/{v['max_wait_s']} s "
        f"({v['runs']} runs, peak {v['peak_running']} running)"
        for label, v in per_tenant.items())
        + f"; utilization {utilization:.3f}; backlog {(last - first).total_seconds():.1f} s; "
        f"statuses {statuses}; cpu {shares}")
    for what, count in failures.items():
        console.log(f"[red]{order}: {count} run(s) did not finish: {what}")
    return {
        "tenants": per_tenant,
        "utilization": round(utilization, 3),
        "backlog_s": round((last - first).total_seconds(), 3),
        "utilization_from_rows": round(_row_utilization(spans, first, last, cfg.slots), 3),
        "refill_ms": _ms_summary(_refill_gaps(spans, first, last)),
        "whale_submit_s": round(whale_window[1] - whale_window[0], 3),
        "until_empty_s": round(until_empty_s, 1),
        "samples": len(backlog),
        "over_max_running_samples": over_ceiling,
        "load_mismatch_samples": len(mismatches),
        "statuses": statuses,
        "failures": failures,
        "cpu": shares,
    }


async def _benchmark(bench: Bench) -> dict[str, Any]:
    cfg = _config()
    began = time.perf_counter()
    model = bench.fake_model()
    first = await bench.database()
    model_url = await model.ready()
    console.log(f"fake model at {model_url}; {cfg.slots} slots, A submits {cfg.whale_runs} "
                f"runs, B and C one every {cfg.interval_s:g} s; model delay {cfg.delay_ms} ms")
    fair = await _pass(bench, cfg, "fair", first, model, model_url)
    fifo = await _pass(bench, cfg, "fifo", await bench.another_database(), model, model_url)
    result: dict[str, Any] = {
        "whale": WHALE,
        "fair": {label: {k: v[k] for k in ("p50_wait_s", "p95_wait_s", "max_wait_s")}
                 for label, v in fair["tenants"].items()},
        "fifo": {label: {k: v[k] for k in ("p50_wait_s", "p95_wait_s", "max_wait_s")}
                 for label, v in fifo["tenants"].items()},
        "utilization": fair["utilization"],
        "fifo_utilization": fifo["utilization"],
        # The steady tenants' own POST /v1/runs answer time while A submits (fair pass):
        # a whale's admissions must not hold the API's pool from them (ADR 0019).
        "steady_submit_p95_ms_during_whale": {
            label: v["submit_ms_during_whale"]["p95_ms"]
            for label, v in fair["tenants"].items() if label != WHALE},
        "slots": cfg.slots,
        "whale_runs": cfg.whale_runs,
        "workers": cfg.workers,
        "concurrency": cfg.concurrency,
        "model_delay_ms": cfg.delay_ms,
        "interval_s": cfg.interval_s,
        "runs": {label: {"fair": fair["tenants"][label]["runs"],
                         "fifo": fifo["tenants"][label]["runs"]} for label in TENANTS},
        "backlog_s": {"fair": fair["backlog_s"], "fifo": fifo["backlog_s"]},
        # Platform faults seen on the way (both should be 0; FIFO ignores max_running, so
        # only the fair pass's ceiling count means anything).
        "worker_crashes": {"fair": len(fair["worker_crashes"]),
                           "fifo": len(fifo["worker_crashes"])},
        "failed_runs": {"fair": sum(fair["failures"].values()),
                        "fifo": sum(fifo["failures"].values())},
        "fair_over_max_running_samples": fair["over_max_running_samples"],
        "load_mismatch_samples": {"fair": fair["load_mismatch_samples"],
                                  "fifo": fifo["load_mismatch_samples"]},
        "details": {"fair": fair, "fifo": fifo},
        "seconds": round(time.perf_counter() - began, 1),
        "postgres": first.kind,
        "source": source_state(),
    }
    return result


if __name__ == "__main__":
    sys.exit(main("fairness", _benchmark))
