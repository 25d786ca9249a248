"""Shared pieces of the run-engine benchmarks (step_overhead.py, runs_in_flight.py).

A benchmark builds its platform inside a :class:`Bench`: a temp directory, a fresh migrated
database (on ``TENANTRY_DATABASE_URL`` if set, else an embedded Postgres in the temp dir),
helper processes (fake model server, MCP server, a ``tenantry worker``) started with a
``READY <url>`` handshake. Leaving the ``with`` block stops every process, drops the
database, stops the embedded Postgres and deletes the temp dir, whatever happened.

Figures as docs/BENCHMARKS.md states them: nearest-rank percentiles (a latency some step
really had), named by unit, one JSON line last on stdout (:func:`main`). Progress goes to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import math
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import orjson
from rich.console import Console

from tenantry.agents import service as agents
from tenantry.agents.spec import AgentSpec, Limits
from tenantry.db import Database
from tenantry.db.embedded import EmbeddedPostgres
from tenantry.db.migrate import migrate
from tenantry.ids import AgentId, RunId, TenantId
from tenantry.jsonutil import digest
from tenantry.runs import service as runs
from tenantry.tenants import service as tenants
from tenantry.tools import servers
from tenantry.tools.mcp_client import McpToolClient

console = Console(stderr=True, highlight=False)

READY_TIMEOUT_S = 60.0  # the MCP SDK alone takes ~2 s to import on a busy 2-core box
STOP_TIMEOUT_S = 15.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- figures ---------------------------------------------------------------------------------


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted values (no interpolation)."""
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def latency_summary(values: Iterable[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50_ms": round(percentile(ordered, 0.50), 2),
            "p99_ms": round(percentile(ordered, 0.99), 2),
            "max_ms": round(ordered[-1], 2) if ordered else math.nan}


def source_state() -> str:
    """The commit measured, ``+dirty`` if src/ had uncommitted changes (figures from a
    working tree are not reproducible from the commit alone)."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "src"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def env_positive(name: str, default: float) -> float:
    """A positive number from the environment (benchmark knobs), or a clear exit."""
    raw = os.environ.get(name, "")
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = 0.0
    if value <= 0:
        raise SystemExit(f"{name} must be a positive number, got {raw!r}")
    return value


def emit(result: dict[str, Any]) -> None:
    """The one JSON line a benchmark prints last on stdout."""
    sys.stdout.write(orjson.dumps(result).decode() + "\n")
    sys.stdout.flush()


# -- processes -------------------------------------------------------------------------------


def _die_with_parent() -> None:
    # Linux: a helper gets SIGTERM if the benchmark itself is killed (even by SIGKILL), so
    # no fake server or worker outlives a crashed run.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def raise_fd_limit() -> int:
    """Thousands of concurrent runs need thousands of sockets; children inherit this."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


@dataclass(slots=True)
class Helper:
    """A process the benchmark started. Output goes to files, never to pipes nobody reads."""

    name: str
    proc: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def ready(self, within: float = READY_TIMEOUT_S) -> str:
        """The url from the ``READY <url>`` line the helper prints once it is listening."""
        line = await self.line(self.stdout, lambda text: text.startswith("READY "), within)
        return line.split(" ", 1)[1].strip()

    async def line(
        self, path: Path, matches: Callable[[str], bool], within: float = READY_TIMEOUT_S
    ) -> str:
        """The first line of the helper's output file that ``matches`` (waiting for it)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            text = await asyncio.to_thread(path.read_text, errors="replace")
            for line in text.splitlines():
                if matches(line):
                    return line
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n"
                                   f"{self.tail()}")
            await asyncio.sleep(0.05)
        raise RuntimeError(f"{self.name} not ready after {within:.0f} s:\n{self.tail()}")

    def tail(self, chars: int = 3000) -> str:
        return self.stderr.read_text(errors="replace")[-chars:] if self.stderr.exists() else ""

    def stop(self) -> int | None:
        """SIGTERM (a graceful stop), then SIGKILL if it does not go."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                console.log(f"[yellow]{self.name} did not stop within {STOP_TIMEOUT_S:.0f} s; "
                            "killing it")
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def free_port() -> int:
    """A loopback TCP port free right now (for a helper that needs its port given)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def tenantry_command(*args: str) -> list[str]:
    """The ``tenantry`` CLI of this interpreter's environment."""
    script = Path(sys.executable).parent / "tenantry"
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-c", "from tenantry.cli import main; main()", *args]


def cpu_seconds(pid: int, *, children: bool = False) -> float:
    """User + system CPU of a process (plus its reaped children's, if asked)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return math.nan
    # After the ")" that ends comm: fields[11..14] = utime, stime, cutime, cstime.
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLK_TCK


def child_pids(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found.append(int(entry.name))
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU of a process and its children, live and reaped: a `tenantry worker --processes N`
    supervisor and its worker processes (one that died counts from its reaping on)."""
    return cpu_seconds(pid, children=True) + sum(cpu_seconds(c) for c in child_pids(pid))


def tree_memory_kib(pid: int) -> dict[str, int]:
    """:func:`memory_kib` summed over a process and its live children."""
    total: dict[str, int] = {}
    for one in (pid, *child_pids(pid)):
        for key, kib in memory_kib(one).items():
            total[key] = total.get(key, 0) + kib
    return total


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak resident set) from /proc/<pid>/status, in KiB."""
    found: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0])
    return found


def machine_busy_seconds() -> float:
    """CPU time the whole machine spent busy (all cores), from /proc/stat."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return math.nan
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def cpu_stall_seconds() -> float:
    """Pressure stall information: time some runnable task waited for a CPU."""
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return math.nan
    return int(some.rsplit("total=", 1)[1]) / 1e6


@dataclass(slots=True)
class CpuMeter:
    """CPU used by named processes between two readings, as a share of one core; plus what
    everything else on the machine used ("others": other people's work skews the figures)
    and the share of time some task waited for a CPU ("stalled", from /proc/pressure)."""

    pids: dict[str, Callable[[], float]]
    started: float = 0.0
    first: dict[str, float] = field(default_factory=dict)

    def _read(self) -> dict[str, float]:
        found = {name: read() for name, read in self.pids.items()}
        found["machine"] = machine_busy_seconds()
        found["stalled"] = cpu_stall_seconds()
        return found

    def start(self) -> None:
        self.started = time.perf_counter()
        self.first = self._read()

    def shares(self) -> dict[str, float]:
        elapsed = time.perf_counter() - self.started
        now = self._read()
        used = {name: (now[name] - self.first[name]) / elapsed for name in now}
        ours = sum(v for name, v in used.items() if name in self.pids and not math.isnan(v))
        used["others"] = used.pop("machine") - ours
        return {name: round(value, 2) for name, value in used.items()}


# -- the platform under test -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BenchDatabase:
    dsn: str  # the benchmark's own database, as the login (super)user
    kind: str  # "embedded" or "external"


def _dsn_for(admin_dsn: str, database: str) -> str:
    return urlunsplit(urlsplit(admin_dsn)._replace(path="/" + database))


class Bench:
    """Everything one benchmark run starts, torn down in reverse order on exit."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.workdir = Path(tempfile.mkdtemp(prefix=f"tenantry-bench-{name}-"))
        self.helpers: list[Helper] = []
        self._embedded: EmbeddedPostgres | None = None
        self._admin_dsn: str | None = None
        self._database: str | None = None
        self._more_databases: list[str] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for helper in reversed(self.helpers):
            with contextlib.suppress(Exception):
                helper.stop()
        if self._embedded is None and self._admin_dsn:
            for name in self._more_databases:
                try:
                    asyncio.run(self._drop(self._admin_dsn, name))
                except Exception as exc:
                    console.log(f"[red]could not drop database {name}: {exc}")
        if self._database is not None and self._embedded is None and self._admin_dsn:
            try:
                asyncio.run(self._drop(self._admin_dsn, self._database))
            except Exception as exc:  # keep cleaning up; say what was left behind
                console.log(f"[red]could not drop database {self._database}: {exc}")
        if self._embedded is not None:
            try:
                self._embedded.stop()
            except Exception as exc:
                console.log(f"[red]could not stop the embedded Postgres: {exc}")
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- database -----------------------------------------------------------------------

    async def database(self) -> BenchDatabase:
        """A fresh, migrated database of our own."""
        configured = os.environ.get("TENANTRY_DATABASE_URL")
        if configured:
            admin, kind = configured, "external"
        else:
            self._embedded = EmbeddedPostgres(self.workdir)
            console.log(f"starting an embedded Postgres in {self.workdir}")
            admin, kind = await asyncio.to_thread(self._embedded.start, create=True), "embedded"
        self._admin_dsn = admin
        name = f"tenantry_bench_{uuid.uuid4().hex[:12]}"
        conn = await asyncpg.connect(admin)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
            self._database = name
        finally:
            await conn.close()
        dsn = _dsn_for(admin, name)
        conn = await asyncpg.connect(dsn)
        try:
            await migrate(conn)
        finally:
            await conn.close()
        console.log(f"database {name} migrated ({kind} Postgres)")
        return BenchDatabase(dsn, kind)

    async def another_database(
        self, *, prepare: Callable[[asyncpg.Connection], Awaitable[object]] = migrate,
    ) -> BenchDatabase:
        """One more fresh, migrated database on the server :meth:`database` chose (a clean
        slate for each pass of a comparison); dropped on exit like the first. ``prepare``:
        what builds its schema instead of this code's migrations (an earlier release's,
        tests/support/history.py, to compare a layout before a migration with it)."""
        if self._admin_dsn is None:
            raise RuntimeError("another_database() needs database() first")
        name = f"tenantry_bench_{uuid.uuid4().hex[:12]}"
        conn = await asyncpg.connect(self._admin_dsn)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
            self._more_databases.append(name)
        finally:
            await conn.close()
        dsn = _dsn_for(self._admin_dsn, name)
        conn = await asyncpg.connect(dsn)
        try:
            await prepare(conn)
        finally:
            await conn.close()
        console.log(f"database {name} migrated")
        return BenchDatabase(dsn, "embedded" if self._embedded is not None else "external")

    @staticmethod
    async def _drop(admin_dsn: str, name: str) -> None:
        conn = await asyncpg.connect(admin_dsn)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    def postgres_cpu(self) -> Callable[[], float]:
        """CPU of the embedded cluster (postmaster, its live backends and reaped ones)."""
        embedded = self._embedded
        if embedded is None:
            return lambda: math.nan
        pid_file = embedded.pgdata / "postmaster.pid"
        postmaster = int(pid_file.read_text().split()[0])

        def read() -> float:
            live = sum(cpu_seconds(pid) for pid in child_pids(postmaster))
            return cpu_seconds(postmaster, children=True) + live

        return read

    # -- helper processes ---------------------------------------------------------------

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Helper:
        out, err = self.workdir / f"{name}.stdout", self.workdir / f"{name}.stderr"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            proc = subprocess.Popen(
                argv, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                # Run-engine benchmarks measure no code execution: no sandbox pools.
                env={"TENANTRY_SANDBOX_BACKEND": "none", **os.environ, **(env or {})},
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        helper = Helper(name, proc, out, err)
        self.helpers.append(helper)
        return helper

    def fake_model(self) -> Helper:
        return self.start("fake-model", python_module("tenantry.testing.fake_model",
                                                      "--port", "0"))

    def mcp_server(self) -> Helper:
        return self.start("mcp-server", python_module("tenantry.testing.mcp_server",
                                                      "--port", "0"))


# -- tenants, agents, runs -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tenancy:
    tenant: TenantId
    agent: AgentId


async def provision(db: Database, mcp_url: str, tools: tuple[str, ...], *,
                    limits: Limits | None = None) -> Tenancy:
    """A tenant with the MCP test server registered and a scripted agent allowed ``tools``
    (``limits``: the agent's, default 50 steps)."""
    tenant = (await tenants.create_tenant(db, "benchmark")).tenant_id
    async with McpToolClient() as mcp:
        await servers.register(db, mcp, tenant, name="effects", url=mcp_url,
                               honours_idempotency_keys=True)
    spec = AgentSpec(model="scripted", system_prompt="Be brief.", tools=tools,
                     limits=limits or Limits(max_steps=50))
    agent = (await agents.create_agent(db, tenant, "bench-agent", spec)).agent_id
    return Tenancy(tenant, agent)


def scripted_input(steps: list[dict[str, Any]], text: str) -> dict[str, Any]:
    """A run input carrying its own script for the fake model (tenantry.models.scripted)."""
    return {"script": steps, "input": text}


async def create_runs(
    db: Database, tenancy: Tenancy, inputs: Sequence[Any], *, parallel: int = 8
) -> list[RunId]:
    """Queue one run per input through the run service (as ``POST /v1/runs`` does)."""
    gate = asyncio.Semaphore(parallel)

    async def one(value: Any) -> RunId:
        request = runs.RunRequest(
            agent_id=tenancy.agent, version=None, input=value, webhook_url=None,
            priority="interactive", idempotency_key=None,
            request_sha256=digest({"agent_id": str(tenancy.agent), "input": value}),
        )
        async with gate:
            return (await runs.create_run(db, tenancy.tenant, request)).run_id

    # In the order of ``inputs``.
    return list(await asyncio.gather(*(one(value) for value in inputs)))


# -- the event log ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    run: str
    seq: int
    type: str
    at: datetime
    data: dict[str, Any]


async def read_log(dsn: str, run_ids: Sequence[RunId]) -> list[LoggedEvent]:
    """Every event of these runs, in order, read as the superuser (RLS does not apply)."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT run_id::text, seq, type, created_at, data::text FROM run_events "
            "WHERE run_id = ANY($1::uuid[]) ORDER BY run_id, seq",
            [r.uuid for r in run_ids])
    finally:
        await conn.close()
    return [LoggedEvent(r[0], r[1], r[2], r[3], orjson.loads(r[4])) for r in rows]


def external_ms(event: LoggedEvent) -> float:
    """Model or tool time the event records (what the platform waited on, not its work)."""
    for key in ("latency_ms", "duration_ms"):
        value = event.data.get(key)
        if isinstance(value, int | float):
            return float(value)
    return 0.0


def log_overheads(events: Sequence[LoggedEvent]) -> list[tuple[str, float]]:
    """Platform time per step as the log shows it: the time between consecutive events of a
    run minus the model or tool time recorded in the later one. ``created_at`` is each append
    transaction's start, so a step's window runs from one append's BEGIN to the next.
    The first step after RunCreated is skipped: that gap is queueing, not work."""
    found: list[tuple[str, float]] = []
    previous: LoggedEvent | None = None
    for event in events:
        if previous is not None and previous.run == event.run and previous.seq >= 2:
            gap = (event.at - previous.at).total_seconds() * 1000
            found.append((event.type, gap - external_ms(event)))
        previous = event
    return found


def by_type(samples: Iterable[tuple[str, float]]) -> dict[str, dict[str, float]]:
    grouped: dict[str, list[float]] = {}
    for kind, ms in samples:
        grouped.setdefault(kind, []).append(ms)
    return {kind: {**latency_summary(values), "steps": len(values)}
            for kind, values in sorted(grouped.items())}


async def wait_for(
    condition: Callable[[], bool], *, within: float, what: str,
    progress: Callable[[], str] | None = None, every: float = 0.02,
) -> None:
    """Poll ``condition`` (cheap, in-process) until true; log ``progress`` every 2 s."""
    deadline = time.monotonic() + within
    next_note = time.monotonic() + 2.0
    while not condition():
        now = time.monotonic()
        if now > deadline:
            raise RuntimeError(f"timed out after {within:.0f} s waiting for {what}")
        if progress is not None and now >= next_note:
            console.log(progress())
            next_note = now + 2.0
        await asyncio.sleep(every)


# -- entry point -----------------------------------------------------------------------------


def main(name: str, benchmark: Callable[[Bench], Coroutine[Any, Any, dict[str, Any]]]) -> int:
    """Run one benchmark: clean up on any exit (SIGTERM included), print its JSON line."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM unwinds like Ctrl-C
    raise_fd_limit()
    try:
        with Bench(name) as bench:
            result = asyncio.run(benchmark(bench))
    except RuntimeError as exc:
        # A platform that will not start is a failed benchmark, not a figure.
        console.print(f"{name} failed: {exc}", style="red", markup=False)
        return 2
    except KeyboardInterrupt:
        console.print(f"{name} interrupted; everything it started is stopped", style="yellow")
        return 130
    emit(result)
    return 0
