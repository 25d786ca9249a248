"""create_run: latency and throughput of ``POST /v1/runs`` over real HTTP.

Starts the platform itself (``tenantry up --demo`` in a fresh temp data dir, on the Postgres at
``TENANTRY_DATABASE_URL``, else the embedded one), creates tenants, keys and agents through the
operator and tenant APIs (each tenant's ``max_queued`` raised so admission never refuses),
warms up, then measures two cases, each in two phases. The platform runs without a worker
(TENANTRY_WORKERS=0 unless set), so created runs stay queued and only the API path is timed.

Cases: ``one_tenant`` — every client is the same tenant (its admissions all meet on one
tenant's limits: ADR 0004, ADR 0019); ``fifty_tenants`` — the clients spread over 50 tenants.
Phases:

* paced: together the clients offer a fixed rate (default 200 runs/s); latency is measured
  from each send. These are the headline figures compared with the target (p99 < 20 ms).
* saturated: closed loop, each client sends its next request as soon as the last answered;
  this gives the maximum throughput (target >= 1,000 runs/s) and the latency at it.

The load generator shares the machine's cores with the platform and Postgres, so it is made
cheap: each client is one keep-alive HTTP/1.1 connection over asyncio streams writing a
request pre-built but for its Idempotency-Key, and reading the answer by Content-Length
(an httpx client cost ~0.6 ms of CPU per request, most of a core at 1,000 runs/s). Its own
CPU share is reported (``client_cpu``). After each case, every tenant's ``tenant_load``
(the operator API's policy view) is compared with the runs it accepted (``load_exact``).

Progress goes to stderr; the last line on stdout is one JSON object: the
one-tenant paced figures at the top level (as before), then ``one_tenant`` and
``fifty_tenants``, each ``{"paced": {...}, "saturated": {...}, "load_exact"}``, and the
machine's ``load_average`` when it started.
Environment overrides: CREATE_RUN_CLIENTS (50), CREATE_RUN_SATURATED_CLIENTS (100),
CREATE_RUN_RATE (runs/s, 200), CREATE_RUN_SECONDS (paced phase, 20; the saturated phase
runs three quarters of it), CREATE_RUN_TENANTS (50).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
import orjson
from rich.console import Console
from rich.status import Status

from _harness import child_pids, cpu_seconds, emit, env_positive, percentile

OPERATOR_TOKEN = "op_benchmark_create_run"
STARTUP_TIMEOUT_S = 120.0  # initdb + migrations on a cold, busy 2-core box
STOP_TIMEOUT_S = 15.0
REQUEST_TIMEOUT_S = 10.0
WARMUP_S = 3.0

console = Console(stderr=True)


@dataclass(frozen=True, slots=True)
class Config:
    clients: int
    saturated_clients: int
    rate: float
    paced_s: float
    saturated_s: float
    tenants: int


@dataclass(frozen=True, slots=True)
class Caller:
    """One tenant as the load sees it."""

    tenant_id: str
    api_key: str
    agent_id: str


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    port: int
    postgres: str
    api_pid: int
    postgres_pid: int | None  # the embedded postmaster (its backends are its children)

    def cpu(self) -> tuple[float, float]:
        """CPU seconds so far of the API process and of Postgres (NaN: not ours to see)."""
        if self.postgres_pid is None:
            return cpu_seconds(self.api_pid), math.nan
        pg = cpu_seconds(self.postgres_pid, children=True) + sum(
            cpu_seconds(child) for child in child_pids(self.postgres_pid))
        return cpu_seconds(self.api_pid), pg


@dataclass(slots=True)
class Phase:
    """What one phase observed. Latencies are seconds, successful (202) requests only."""

    name: str
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    # How late paced sends left after their slot: shows whether the offered rate was kept.
    max_lag: float = 0.0
    started: float = 0.0
    ended: float = 0.0
    client_cpu: float = 0.0  # the load generator's own CPU share (1.0 = one core)
    # CPU milliseconds per accepted run: the API process's and Postgres's. Unlike rates
    # and latencies on a shared machine, these hardly depend on what else runs.
    api_cpu_ms_per_run: float = math.nan
    postgres_cpu_ms_per_run: float = math.nan

    @property
    def runs(self) -> int:
        return len(self.latencies) + self.errors

    @property
    def per_s(self) -> float:
        elapsed = self.ended - self.started
        return len(self.latencies) / elapsed if elapsed > 0 else 0.0

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.latencies)
        return {
            "p50_ms": round(percentile(ordered, 0.50) * 1000, 2),
            "p99_ms": round(percentile(ordered, 0.99) * 1000, 2),
            "per_s": round(self.per_s, 1),
            "api_cpu_ms_per_run": round(self.api_cpu_ms_per_run, 3),
            "postgres_cpu_ms_per_run": round(self.postgres_cpu_ms_per_run, 3),
        }


def _config() -> Config:
    paced = env_positive("CREATE_RUN_SECONDS", 20)
    return Config(
        clients=int(env_positive("CREATE_RUN_CLIENTS", 50)),
        saturated_clients=int(env_positive("CREATE_RUN_SATURATED_CLIENTS", 100)),
        rate=env_positive("CREATE_RUN_RATE", 200),
        paced_s=paced,
        saturated_s=paced * 0.75,
        tenants=int(env_positive("CREATE_RUN_TENANTS", 50)),
    )


# -- the platform under test -----------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _start_platform(data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    tenantry = Path(sys.executable).parent / "tenantry"
    env = {
        **os.environ,
        "TENANTRY_DATA_DIR": str(data_dir),
        "TENANTRY_OPERATOR_TOKEN": OPERATOR_TOKEN,
        "TENANTRY_HOST": "127.0.0.1",
        "TENANTRY_PORT": str(port),
        # No worker loop by default: `up` would run one in the API's own process and event
        # loop, so its step execution (step_overhead.py's subject) would be timed here too.
        # Set TENANTRY_WORKERS=1 to measure the all-in-one process instead.
        "TENANTRY_WORKERS": os.environ.get("TENANTRY_WORKERS", "0"),
    }
    # Output goes to files, not pipes: nobody reads a pipe during the run, and a full one
    # would stall the server mid-measurement. A new session keeps a terminal Ctrl-C from
    # reaching the server directly; we stop it ourselves, in order.
    with (data_dir / "stdout.log").open("wb") as out, (data_dir / "stderr.log").open("wb") as err:
        return subprocess.Popen(
            [str(tenantry), "up", "--demo", "--port", str(port)],
            env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True,
        )


def _stop_platform(proc: subprocess.Popen[bytes], data_dir: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            console.log("[yellow]platform did not stop within 15 s; killing it")
            proc.kill()
            proc.wait()
    # A killed `tenantry up` cannot stop its embedded Postgres; do it so none is left behind
    # serving a directory we are about to delete.
    if (data_dir / "postgres" / "postmaster.pid").exists():
        from tenantry.db.embedded import EmbeddedPostgres

        EmbeddedPostgres(data_dir).stop()


def _log_tail(data_dir: Path) -> str:
    path = data_dir / "stderr.log"
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


async def _wait_healthy(
    http: httpx2.AsyncClient, proc: subprocess.Popen[bytes], data_dir: Path
) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"tenantry up exited with {proc.returncode}:\n{_log_tail(data_dir)}")
        try:
            if (await http.get("/healthz")).status_code == 200:
                return
        except httpx2.TransportError:
            pass  # not listening yet
        await asyncio.sleep(0.2)
    raise RuntimeError(f"platform not healthy after {STARTUP_TIMEOUT_S:.0f} s")


def _postgres_kind(data_dir: Path) -> str:
    """What the platform says it runs on (banner line), not what we guess from our env."""
    banner = (data_dir / "stdout.log").read_text(errors="replace")
    found = re.search(r"\(Postgres: (\w+)\)", banner)
    if found:
        return found.group(1)
    return "external" if os.environ.get("TENANTRY_DATABASE_URL") else "embedded"


def _postmaster(data_dir: Path) -> int | None:
    """The embedded Postgres's postmaster (first line of its pid file), if it is ours."""
    try:
        return int((data_dir / "postgres" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _expect(response: httpx2.Response, status: int) -> dict[str, str]:
    if response.status_code != status:
        raise RuntimeError(f"{response.request.method} {response.request.url} -> "
                           f"{response.status_code}: {response.text[:500]}")
    body: dict[str, str] = response.json()
    return body


async def _provision(http: httpx2.AsyncClient, name: str) -> Caller:
    """A tenant, key and agent of our own, made the way an operator and a tenant would;
    its max_queued raised so that admission measures its cost, never refuses."""
    admin = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    tenant = _expect(await http.post(
        "/admin/v1/tenants", json={"name": name}, headers=admin), 201)
    _expect(await http.put(f"/admin/v1/tenants/{tenant['tenant_id']}/policy",
                           json={"max_queued": 10_000_000}, headers=admin), 200)
    key = _expect(await http.post(
        f"/admin/v1/tenants/{tenant['tenant_id']}/api-keys", json={"name": "bench"},
        headers=admin), 201)
    agent = _expect(await http.post(
        "/v1/agents",
        json={"name": "bench-agent", "model": "scripted", "system_prompt": "Answer briefly."},
        headers={"Authorization": f"Bearer {key['api_key']}"}), 201)
    return Caller(tenant["tenant_id"], key["api_key"], agent["agent_id"])


async def _queued(http: httpx2.AsyncClient, caller: Caller) -> int:
    """The tenant's live runs as its load counters hold them (the operator's view)."""
    shown = _expect(await http.get(f"/admin/v1/tenants/{caller.tenant_id}/policy",
                                   headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}),
                    200)
    load: dict[str, int] = shown["load"]  # type: ignore[assignment]
    return load["queued"] + load["running"] + load["waiting"]


# -- load ----------------------------------------------------------------------------------


class RunClient:
    """One tenant-side caller on its own keep-alive connection. The request is built once;
    only its Idempotency-Key changes (a fresh one per request, as a careful caller sends)."""

    _prefix = uuid.uuid4().hex[:12]

    def __init__(self, target: Target, caller: Caller, index: int) -> None:
        self.target = target
        self.caller = caller
        body = orjson.dumps({"agent_id": caller.agent_id, "input": "benchmark run"})
        self.head = (f"POST /v1/runs HTTP/1.1\r\nHost: {target.host}:{target.port}\r\n"
                     f"Authorization: Bearer {caller.api_key}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                     f"Idempotency-Key: bench-{self._prefix}-{index}-").encode()
        self.tail = b"\r\n\r\n" + body
        self.sent = 0
        self.accepted = 0
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.reader is None or self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.target.host,
                                                                     self.target.port)
        return self.reader, self.writer

    async def start_run(self, phase: Phase) -> None:
        self.sent += 1
        if self.writer is not None and self.reader is not None and self.reader.at_eof():
            await self.close()  # the server closed it while idle (its keep-alive timeout)
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                reader, writer = await self._connect()
                sent = time.perf_counter()
                writer.write(self.head + str(self.sent).encode() + self.tail)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head[9:12])
                found = _CONTENT_LENGTH.search(head)
                body = await reader.readexactly(int(found[1])) if found else b""
                elapsed = time.perf_counter() - sent
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                TimeoutError, ValueError) as exc:
            phase.errors += 1
            _note_error(phase, repr(exc))
            await self.close()  # a fresh connection for the next request
            return
        if status == 202:
            self.accepted += 1
            phase.latencies.append(elapsed)
        else:
            phase.errors += 1
            _note_error(phase, f"{status} {body[:200]!r}")

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
        self.reader = self.writer = None


_CONTENT_LENGTH = re.compile(rb"(?i)\r\ncontent-length:\s*(\d+)")


def _note_error(phase: Phase, what: str) -> None:
    # The first few only: a broken platform would otherwise flood the terminal.
    if phase.errors <= 5:
        console.log(f"[red]{phase.name}: request failed: {what}")


Worker = Callable[[RunClient, int, Phase], Awaitable[None]]


def _paced(cfg: Config) -> Worker:
    """Send on a fixed schedule. Clients are offset evenly within one interval so the
    offered load is a smooth stream, not a burst of every client at once. A late send
    goes out at once and keeps its schedule, so the offered count stays fixed."""
    interval = cfg.clients / cfg.rate

    async def work(client: RunClient, index: int, phase: Phase) -> None:
        slot = phase.started + interval * index / cfg.clients
        end = phase.started + cfg.paced_s
        # A platform far slower than the offered rate would stretch the phase without
        # bound; past this the backlog is dropped (visible as runs < rate x seconds).
        give_up = end + cfg.paced_s / 2
        while slot < end and time.perf_counter() < give_up:
            delay = slot - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            phase.max_lag = max(phase.max_lag, time.perf_counter() - slot)
            await client.start_run(phase)
            slot += interval

    return work


def _closed_loop(seconds: float) -> Worker:
    async def work(client: RunClient, _index: int, phase: Phase) -> None:
        end = phase.started + seconds
        while time.perf_counter() < end:
            await client.start_run(phase)

    return work


async def _run_phase(
    name: str, clients: list[RunClient], seconds: float, worker: Worker
) -> Phase:
    phase = Phase(name)
    target = clients[0].target
    api_before, pg_before = target.cpu()
    cpu_before = time.process_time()
    phase.started = time.perf_counter()
    with console.status(f"{name}: starting") as status:
        ticker = asyncio.create_task(_tick(status, phase, seconds))
        try:
            await asyncio.gather(*(worker(c, i, phase) for i, c in enumerate(clients)))
        finally:
            ticker.cancel()
    phase.ended = time.perf_counter()
    # Our own CPU share tells whether the load generator, not the server, was the limit.
    phase.client_cpu = round((time.process_time() - cpu_before) / (phase.ended - phase.started),
                             3)
    api_after, pg_after = target.cpu()
    if phase.latencies:
        phase.api_cpu_ms_per_run = (api_after - api_before) * 1000 / len(phase.latencies)
        phase.postgres_cpu_ms_per_run = (pg_after - pg_before) * 1000 / len(phase.latencies)
    console.log(f"{name}: {phase.summary()} runs={phase.runs} errors={phase.errors} "
                f"max_send_lag_ms={phase.max_lag * 1000:.1f} "
                f"client_cpu={phase.client_cpu:.0%}")
    return phase


async def _tick(status: Status, phase: Phase, seconds: float) -> None:
    while True:
        await asyncio.sleep(1.0)
        done = time.perf_counter() - phase.started
        status.update(f"{phase.name}: {done:.0f}/{seconds:.0f} s, "
                      f"{len(phase.latencies)} runs, {phase.errors} errors")


async def _case(
    name: str, target: Target, callers: list[Caller], cfg: Config, http: httpx2.AsyncClient,
) -> dict[str, object]:
    """One case: warm-up, paced, saturated; clients take the callers round-robin."""
    n = max(cfg.clients, cfg.saturated_clients)
    clients = [RunClient(target, callers[i % len(callers)], i) for i in range(n)]
    paced_clients = clients[:cfg.clients]
    before = {c.tenant_id: await _queued(http, c) for c in callers}
    try:
        # Warm-up at full tilt opens every pooled database connection and every client
        # connection, so neither measured phase pays for connection setup.
        await _run_phase(f"{name} warm-up", clients, WARMUP_S, _closed_loop(WARMUP_S))
        paced = await _run_phase(f"{name} paced {cfg.rate:g}/s", paced_clients, cfg.paced_s,
                                 _paced(cfg))
        saturated = await _run_phase(f"{name} saturated", clients, cfg.saturated_s,
                                     _closed_loop(cfg.saturated_s))
    finally:
        await asyncio.gather(*(c.close() for c in clients))
    # Exactness: each tenant's load counters moved by the runs it was told were accepted.
    accepted: dict[str, int] = {}
    for client in clients:
        accepted[client.caller.tenant_id] = (accepted.get(client.caller.tenant_id, 0)
                                             + client.accepted)
    after = {c.tenant_id: await _queued(http, c) for c in callers}
    exact = all(after[t] - before[t] == accepted.get(t, 0) for t in after)
    if not exact:
        console.log(f"[red]{name}: tenant_load does not match the runs accepted")
    return {
        "tenants": len(callers),
        "paced": {**paced.summary(), "clients": cfg.clients, "runs": paced.runs,
                  "errors": paced.errors, "max_send_lag_ms": round(paced.max_lag * 1000, 1),
                  "client_cpu": paced.client_cpu},
        "saturated": {**saturated.summary(), "clients": n, "runs": saturated.runs,
                      "errors": saturated.errors, "client_cpu": saturated.client_cpu},
        "load_exact": exact,
    }


# -- main ----------------------------------------------------------------------------------


async def _benchmark(data_dir: Path, cfg: Config) -> dict[str, object]:
    load_average = [round(x, 2) for x in os.getloadavg()]
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    console.log(f"starting tenantry up --demo on {base_url} (data dir {data_dir}); "
                f"load average {load_average}")
    proc = _start_platform(data_dir, port)
    try:
        async with httpx2.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT_S,
                                      trust_env=False) as http:
            await _wait_healthy(http, proc, data_dir)
            one = [await _provision(http, "create_run benchmark")]
            many = [await _provision(http, f"create_run benchmark {i}")
                    for i in range(cfg.tenants)]
            target = Target("127.0.0.1", port, _postgres_kind(data_dir), proc.pid,
                            _postmaster(data_dir))
            console.log(f"platform up (Postgres: {target.postgres}, "
                        f"workers: {os.environ.get('TENANTRY_WORKERS', '0')}); "
                        f"{cfg.clients} paced / {cfg.saturated_clients} saturated clients")
            one_tenant = await _case("one tenant", target, one, cfg, http)
            fifty = await _case(f"{cfg.tenants} tenants", target, many, cfg, http)
    finally:
        _stop_platform(proc, data_dir)
    paced = one_tenant["paced"]
    assert isinstance(paced, dict)
    return {
        # The one-tenant paced figures at the top level, where earlier runs had them.
        "p50_ms": paced["p50_ms"], "p99_ms": paced["p99_ms"], "per_s": paced["per_s"],
        "clients": cfg.clients,
        "offered_per_s": round(cfg.rate, 1) if cfg.rate % 1 else int(cfg.rate),
        "runs": paced["runs"],
        "errors": paced["errors"],
        "saturated": one_tenant["saturated"],
        "one_tenant": one_tenant,
        "fifty_tenants": fifty,
        "load_average": load_average,
        "postgres": target.postgres,
    }


def main() -> int:
    cfg = _config()
    data_dir = Path(tempfile.mkdtemp(prefix="tenantry-bench-create-run-"))
    try:
        result = asyncio.run(_benchmark(data_dir, cfg))
    except RuntimeError as exc:
        # A platform that will not start or provision is a failed benchmark, not a figure.
        console.print(f"create_run failed: {exc}", style="red", markup=False, highlight=False)
        return 2
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    emit(result)
    sys.stdout.flush()
    # The figures are printed either way; a non-zero exit marks them as untrustworthy.
    faults = 0
    for case in ("one_tenant", "fifty_tenants"):
        figures = result[case]
        assert isinstance(figures, dict)
        faults += figures["paced"]["errors"] + figures["saturated"]["errors"]
        faults += 0 if figures["load_exact"] else 1
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
