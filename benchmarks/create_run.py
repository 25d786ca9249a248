"""create_run: latency and throughput of ``POST /v1/runs`` over real HTTP.

Starts the platform itself (``tenantry up --demo`` in a fresh temp data dir, on the Postgres at
``TENANTRY_DATABASE_URL``, else the embedded one), creates a tenant, key and agent through the
operator and tenant APIs, warms up, then measures two phases with N concurrent clients.
The platform runs without a worker (TENANTRY_WORKERS=0 unless set), so created runs stay
queued and only the API path is timed. The phases:

* paced: together the clients offer a fixed rate (default 200 runs/s); latency is measured
  from each send. These are the headline figures compared with the target (p99 < 20 ms).
* saturated: closed loop, each client sends its next request as soon as the last answered;
  this gives the maximum throughput and the latency at that throughput.

Progress goes to stderr; the last line on stdout is one JSON object (see DESIGN §15).
Environment overrides: CREATE_RUN_CLIENTS (50), CREATE_RUN_RATE (runs/s, 200),
CREATE_RUN_SECONDS (paced phase, 20; the saturated phase runs three quarters of it).
"""

from __future__ import annotations

import asyncio
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

from _harness import emit, env_positive, percentile

OPERATOR_TOKEN = "op_benchmark_create_run"
STARTUP_TIMEOUT_S = 120.0  # initdb + migrations on a cold, busy 2-core box
STOP_TIMEOUT_S = 15.0
REQUEST_TIMEOUT_S = 10.0
WARMUP_S = 3.0

console = Console(stderr=True)


@dataclass(frozen=True, slots=True)
class Config:
    clients: int
    rate: float
    paced_s: float
    saturated_s: float


@dataclass(frozen=True, slots=True)
class Target:
    base_url: str
    api_key: str
    agent_id: str
    postgres: str


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
        }


def _config() -> Config:
    paced = env_positive("CREATE_RUN_SECONDS", 20)
    return Config(
        clients=int(env_positive("CREATE_RUN_CLIENTS", 50)),
        rate=env_positive("CREATE_RUN_RATE", 200),
        paced_s=paced,
        saturated_s=paced * 0.75,
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


def _expect(response: httpx2.Response, status: int) -> dict[str, str]:
    if response.status_code != status:
        raise RuntimeError(f"{response.request.method} {response.request.url} -> "
                           f"{response.status_code}: {response.text[:500]}")
    body: dict[str, str] = response.json()
    return body


async def _provision(http: httpx2.AsyncClient) -> tuple[str, str]:
    """A tenant, key and agent of our own, made the way an operator and a tenant would."""
    admin = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    tenant = _expect(await http.post(
        "/admin/v1/tenants", json={"name": "create_run benchmark"}, headers=admin), 201)
    key = _expect(await http.post(
        f"/admin/v1/tenants/{tenant['tenant_id']}/api-keys", json={"name": "bench"},
        headers=admin), 201)
    agent = _expect(await http.post(
        "/v1/agents",
        json={"name": "bench-agent", "model": "scripted", "system_prompt": "Answer briefly."},
        headers={"Authorization": f"Bearer {key['api_key']}"}), 201)
    return key["api_key"], agent["agent_id"]


# -- load ----------------------------------------------------------------------------------


class RunClient:
    """One tenant-side client: its own keep-alive connection, like a separate caller."""

    def __init__(self, target: Target) -> None:
        self.http = httpx2.AsyncClient(
            base_url=target.base_url, timeout=REQUEST_TIMEOUT_S, trust_env=False,
            limits=httpx2.Limits(max_connections=1, max_keepalive_connections=1,
                                 keepalive_expiry=60.0),
            headers={"Authorization": f"Bearer {target.api_key}",
                     "Content-Type": "application/json"},
        )
        # Encoded once: the benchmark should spend its CPU on HTTP, not on re-encoding.
        self.body = orjson.dumps({"agent_id": target.agent_id, "input": "benchmark run"})

    async def start_run(self, phase: Phase) -> None:
        headers = {"Idempotency-Key": f"bench-{uuid.uuid4().hex}"}
        sent = time.perf_counter()
        try:
            response = await self.http.post("/v1/runs", content=self.body, headers=headers)
        except httpx2.HTTPError as exc:
            phase.errors += 1
            _note_error(phase, repr(exc))
            return
        elapsed = time.perf_counter() - sent
        if response.status_code == 202:
            phase.latencies.append(elapsed)
        else:
            phase.errors += 1
            _note_error(phase, f"{response.status_code} {response.text[:200]}")

    async def close(self) -> None:
        await self.http.aclose()


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
    client_cpu = (time.process_time() - cpu_before) / (phase.ended - phase.started)
    console.log(f"{name}: {phase.summary()} runs={phase.runs} errors={phase.errors} "
                f"max_send_lag_ms={phase.max_lag * 1000:.1f} client_cpu={client_cpu:.0%}")
    return phase


async def _tick(status: Status, phase: Phase, seconds: float) -> None:
    while True:
        await asyncio.sleep(1.0)
        done = time.perf_counter() - phase.started
        status.update(f"{phase.name}: {done:.0f}/{seconds:.0f} s, "
                      f"{len(phase.latencies)} runs, {phase.errors} errors")


async def _measure(target: Target, cfg: Config) -> tuple[Phase, Phase]:
    clients = [RunClient(target) for _ in range(cfg.clients)]
    try:
        # Warm-up at full tilt opens every pooled database connection and every client
        # connection, so neither measured phase pays for connection setup.
        await _run_phase("warm-up", clients, WARMUP_S, _closed_loop(WARMUP_S))
        paced = await _run_phase(f"paced {cfg.rate:g}/s", clients, cfg.paced_s, _paced(cfg))
        saturated = await _run_phase("saturated", clients, cfg.saturated_s,
                                     _closed_loop(cfg.saturated_s))
        return paced, saturated
    finally:
        await asyncio.gather(*(c.close() for c in clients))


# -- main ----------------------------------------------------------------------------------


async def _benchmark(data_dir: Path, cfg: Config) -> dict[str, object]:
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    console.log(f"starting tenantry up --demo on {base_url} (data dir {data_dir})")
    proc = _start_platform(data_dir, port)
    try:
        async with httpx2.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT_S,
                                      trust_env=False) as http:
            await _wait_healthy(http, proc, data_dir)
            api_key, agent_id = await _provision(http)
        target = Target(base_url, api_key, agent_id, _postgres_kind(data_dir))
        console.log(f"platform up (Postgres: {target.postgres}, "
                    f"workers: {os.environ.get('TENANTRY_WORKERS', '0')}); {cfg.clients} clients")
        paced, saturated = await _measure(target, cfg)
    finally:
        _stop_platform(proc, data_dir)
    return {
        **paced.summary(),
        "clients": cfg.clients,
        "offered_per_s": round(cfg.rate, 1) if cfg.rate % 1 else int(cfg.rate),
        "runs": paced.runs,
        "errors": paced.errors,
        "saturated": {**saturated.summary(), "runs": saturated.runs,
                      "errors": saturated.errors},
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
    saturated = result["saturated"]
    assert isinstance(saturated, dict)
    # The figures are printed either way; a non-zero exit marks them as untrustworthy.
    return 1 if result["errors"] or saturated["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
