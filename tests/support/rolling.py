"""The cell a rolling upgrade works on (tests/chaos/test_rolling_upgrade.py): processes of
either release on one database (this checkout's, or the previous release's own
installation, tests/support/release_venv.py); the HTTP traffic through the APIs in a load
balancer's pool, every answer recorded; a model server that holds chosen runs' second
step until released; the workload (keyed runs, approvals, child runs, activities) and
what each run must end with. Nothing here imports pytest."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import signal
import subprocess
import textwrap
import time
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
import orjson
from starlette.responses import Response

from tenantry.ids import RunId
from tenantry.models.scripted import conversation_input
from tenantry.testing.fake_model import FakeModelServer
from tenantry.testing.mcp_server import EffectsMcpServer
from tests.support.api import TEST_MASTER_KEY
from tests.support.api_process import ApiProcess, api_process
from tests.support.db import login_dsn
from tests.support.harness import (
    ChaosError,
    PlannedRun,
    TenantHandle,
    WorkerFleet,
    _die_with_parent,
    create_tenants,
    plan_runs,
    tenantry_command,
    worker_env,
)
from tests.support.release_venv import InstalledRelease
from tests.support.scripts import answer, scripted
from tests.support.waiting import until

# ---------------------------------------------------------------------------- traffic


@dataclass(frozen=True, slots=True)
class Answer:
    phase: str
    api: str
    method: str
    path: str
    status: int | None  # None: no HTTP answer at all (the connection failed)
    error: str = ""


@dataclass(eq=False, slots=True)
class Backend:
    """One API process behind the load balancer."""

    name: str
    client: httpx2.AsyncClient
    in_flight: int = 0


class Traffic:
    """Every request the test sends to an API and its answer, by phase; ``pool`` is the
    load balancer's: the APIs the load goes to, round robin. An API leaves the pool before
    it is stopped, and only once its requests in flight are answered (upgrade.md: take an
    old API process out of the load balancer before stopping it)."""

    def __init__(self) -> None:
        self.answers: list[Answer] = []
        self.pool: list[Backend] = []
        self.phase = "start"
        self._turn = 0

    def join(self, backend: Backend) -> None:
        self.pool.append(backend)

    async def leave(self, backend: Backend, within: float = 30.0) -> None:
        self.pool.remove(backend)
        deadline = time.monotonic() + within
        while backend.in_flight:
            if time.monotonic() > deadline:
                raise ChaosError(f"{backend.name}: requests still in flight after {within}s")
            await asyncio.sleep(0.02)

    def pick(self) -> Backend:
        if not self.pool:
            raise ChaosError("no API in the load balancer's pool")
        self._turn += 1
        return self.pool[self._turn % len(self.pool)]

    async def send(self, method: str, path: str, *, to: Backend | None = None,
                   **kwargs: Any) -> httpx2.Response:
        backend = to or self.pick()
        backend.in_flight += 1
        try:
            response = await backend.client.request(method, path, **kwargs)
        except httpx2.TransportError as exc:
            self.answers.append(Answer(self.phase, backend.name, method, path, None,
                                       f"{type(exc).__name__}: {exc}"))
            raise
        finally:
            backend.in_flight -= 1
        self.answers.append(Answer(self.phase, backend.name, method, path,
                                   response.status_code))
        return response

    def failures(self) -> list[Answer]:
        """Every answer that was a 5xx, or no answer."""
        return [a for a in self.answers if a.status is None or a.status >= 500]

    def served(self, phase: str, api: str, method: str = "POST", path: str = "/v1/runs",
               status: int = 202) -> int:
        return sum(1 for a in self.answers if (a.phase, a.api, a.method, a.path, a.status)
                   == (phase, api, method, path, status))

    def table(self) -> str:
        """Answers by phase, API and status, one line each."""
        counts = Counter((a.phase, a.api, a.status) for a in self.answers)
        phases = list(dict.fromkeys(a.phase for a in self.answers))
        lines = []
        for phase in phases:
            shown = ", ".join(f"{api} {status}: {n}" for (p, api, status), n in counts.items()
                              if p == phase)
            lines.append(f"  {phase}: {shown}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------- the model


class GatedModelServer(FakeModelServer):
    """The fake model server, with a gate: while it is held, a chat request of a run whose
    input is one of ``hold``'s — past its first step (an assistant message is in the
    conversation) — waits until :meth:`release`. Such a run is then in flight on its
    worker for as long as the test needs, with its first step in its log."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._held: frozenset[str] = frozenset()
        self._gate = asyncio.Event()
        self._gate.set()
        self.waiting: Counter[str] = Counter()  # requests at the gate, by run input

    def hold(self, inputs: Collection[str]) -> None:
        self._held = frozenset(inputs)
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    async def stop(self) -> None:
        self._gate.set()
        await super().stop()

    async def _answer(self, body: bytes) -> Response:
        with contextlib.suppress(orjson.JSONDecodeError, AttributeError, TypeError):
            messages = orjson.loads(body).get("messages") or []
            text = conversation_input(messages)
            if (not self._gate.is_set() and text in self._held
                    and any(m.get("role") == "assistant" for m in messages)):
                self.waiting[text] += 1
                try:
                    await self._gate.wait()
                finally:
                    self.waiting[text] -= 1
        return await super()._answer(body)


# ---------------------------------------------------------------------------- processes


@dataclass(eq=False, slots=True)
class Service:
    """A process of either release (an activity dispatcher, a refused worker) and its log."""

    name: str
    process: asyncio.subprocess.Process
    log_path: Path
    exit_expected: bool = False

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def lines(self, msg: str) -> list[dict[str, Any]]:
        """Its JSON log lines whose message starts with ``msg``."""
        found = []
        for raw in self.log().splitlines():
            if raw.startswith("{"):
                with contextlib.suppress(orjson.JSONDecodeError):
                    line = orjson.loads(raw)
                    if str(line.get("msg", "")).startswith(msg):
                        found.append(line)
        return found

    def tail(self, lines: int = 15) -> str:
        code = self.process.returncode
        state = "running" if code is None else f"exited {code}"
        return "\n".join([f"--- {self.name} pid {self.process.pid}, {state}: {self.log_path}",
                          *self.log().splitlines()[-lines:]])

    async def wait_for(self, msg: str, within: float = 60.0, count: int = 1) -> None:
        deadline = time.monotonic() + within
        while len(self.lines(msg)) < count:
            if self.process.returncode is not None:
                raise ChaosError(f"{self.name} exited before logging {msg!r}\n{self.tail()}")
            if time.monotonic() > deadline:
                raise ChaosError(f"{self.name} did not log {msg!r} within {within:.0f}s\n"
                                 f"{self.tail()}")
            await asyncio.sleep(0.05)

    async def terminate(self, within: float = 30.0) -> int:
        """SIGTERM, as an operator stops it; its exit status."""
        self.exit_expected = True
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.process.wait(), within)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
            raise ChaosError(f"{self.name} did not stop within {within:.0f}s of SIGTERM\n"
                             f"{self.tail()}") from None


async def start_service(name: str, argv: Sequence[str], env: Mapping[str, str],
                        log_path: Path) -> Service:
    """``argv`` as a process in a session of its own, dying with the test (as the
    harness's workers), its stdout and stderr in ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:  # the child holds its own copy
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=log,
            stderr=asyncio.subprocess.STDOUT, env=dict(env), start_new_session=True,
            preexec_fn=_die_with_parent)
    return Service(name, process, log_path)


@dataclass(frozen=True, slots=True)
class Command:
    """A one-shot command's outcome (``tenantry migrate`` of either release)."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    def lines(self) -> list[str]:
        return self.stdout.strip().splitlines()

    def __str__(self) -> str:
        return (f"$ {' '.join(self.argv[-3:])}: exit {self.returncode}\n{self.stdout}"
                f"{self.stderr[-3000:]}")


def run_command(argv: Sequence[str], env: Mapping[str, str]) -> Command:
    result = subprocess.run(list(argv), capture_output=True, text=True, env=dict(env),
                            timeout=300, check=False)
    return Command(list(argv), result.returncode, result.stdout, result.stderr)


@dataclass(slots=True)
class Timings:
    """How long each phase took (reported, never asserted)."""

    started: float = field(default_factory=time.monotonic)
    marks: list[tuple[str, float]] = field(default_factory=list)

    def mark(self, phase: str) -> None:
        self.marks.append((phase, time.monotonic()))

    def describe(self) -> str:
        shown, last = [], self.started
        for phase, at in self.marks:
            shown.append(f"{phase} {at - last:.1f}s")
            last = at
        return ", ".join(shown) + f"; total {last - self.started:.1f}s"


# ---------------------------------------------------------------------------- the cell

#: Runs each worker holds.
CONCURRENCY = 16
#: Per process: processes of two releases share one Postgres (100 connections, stock).
POOL_MAX = 4
#: The load: a keyed run this often, and the other kinds among them.
ARRIVAL_EVERY_S = 0.4
#: Hang guard of every wait.
WITHIN = 120.0
SQUARE = """
    def handle(value, context):
        return {"square": value["n"] * value["n"], "key": context.idempotency_key}
"""


def start_agent(agent: str, *steps: dict[str, object]) -> dict[str, object]:
    """One start_agent call whose child carries its own script as its input."""
    return {"name": "start_agent",
            "arguments": {"agent": agent, "input": orjson.dumps(scripted(*steps)).decode()}}


def effect(note: str) -> dict[str, object]:
    return {"tool_calls": [{"name": "effect", "arguments": {"note": note}}]}


def two_effects(index: int) -> PlannedRun:
    """A keyed run of two steps, one effect each (harness.verify checks it like the
    load's); its input, ``run <index>``, is what a :class:`GatedModelServer` holds."""
    notes = [f"run{index}-effect{j}" for j in range(2)]
    steps = [[{"name": "effect", "arguments": {"note": note}}] for note in notes]
    script = [*({"tool_calls": calls, "delay_ms": 20} for calls in steps),
              {"text": f"done {index}", "delay_ms": 20}]
    return PlannedRun(index=index, calls=(("effect",), ("effect",)), script=tuple(script))


def json_lines(log: str | bytes) -> list[dict[str, Any]]:
    text = log.decode(errors="replace") if isinstance(log, bytes) else log
    found = []
    for raw in text.splitlines():
        if raw.startswith("{"):
            with contextlib.suppress(orjson.JSONDecodeError):
                found.append(orjson.loads(raw))
    return found


@dataclass(slots=True)
class Side:
    """The workload beside the keyed runs, on a tenant and an MCP server of its own:
    approvals, child runs, activities; and what each run must end with."""

    tenant: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    agents: dict[str, str] = field(default_factory=dict)
    approvals: dict[str, str] = field(default_factory=dict)  # run -> its effect's note
    denied: str = ""  # the run whose approval is denied (the others' are approved)
    parents: dict[str, list[str]] = field(default_factory=dict)  # run -> children's answers
    calc: dict[str, int] = field(default_factory=dict)  # run calling the activity -> n
    tasks: dict[str, int] = field(default_factory=dict)  # activity task -> n


@dataclass(slots=True)
class Cell:
    """One database, the servers its runs call, and processes of either release on it:
    this checkout's (``old=False``) or the previous release's own installation."""

    dsn: str
    conn: asyncpg.Connection  # the superuser's: sees every tenant
    old: InstalledRelease
    model: GatedModelServer
    mcp: EffectsMcpServer  # the keyed runs' (harness.verify counts its effects)
    side_mcp: EffectsMcpServer
    logs: Path
    traffic: Traffic = field(default_factory=Traffic)
    tenants: list[TenantHandle] = field(default_factory=list)
    runs: dict[str, PlannedRun] = field(default_factory=dict)  # keyed runs, by id
    side: Side = field(default_factory=Side)

    @property
    def serving_dsn(self) -> str:
        """What the API, workers and dispatchers log in as: the powerless login of
        migration 0015, as in production (``tenantry migrate`` is the owner's)."""
        return login_dsn(self.dsn)

    def env(self, name: str, *, old: bool) -> dict[str, str]:
        env = worker_env(self.logs / f"{name}-data", lease_seconds=None, pool_max=POOL_MAX,
                         master_key=TEST_MASTER_KEY.encoded())
        return self.old.environ(env) if old else env

    def program(self, *, old: bool) -> list[str]:
        return self.old.tenantry if old else tenantry_command()

    def migrate(self, *flags: str, old: bool = False) -> Command:
        argv = [*self.program(old=old), "migrate", "--database-url", self.dsn, *flags]
        return run_command(argv, self.env("migrate", old=old))

    def fleet(self, name: str, *, old: bool) -> WorkerFleet:
        return WorkerFleet(dsn=self.serving_dsn, model_url=self.model.base_url,
                           log_dir=self.logs / name, size=0, concurrency=CONCURRENCY,
                           lease_seconds=None, pool_max=POOL_MAX,
                           master_key=TEST_MASTER_KEY.encoded(),
                           program=self.program(old=old),
                           environ=self.old.environ if old else None)

    def api(self, name: str, *, old: bool) -> AbstractAsyncContextManager[ApiProcess]:
        return api_process(self.serving_dsn, self.logs / name,
                           master_key=TEST_MASTER_KEY.encoded(),
                           pool_max=POOL_MAX, program=self.program(old=old),
                           environ=self.old.environ if old else None)

    def worker_argv(self, *, old: bool) -> list[str]:
        return [*self.program(old=old), "worker", "--processes", "1", "--database-url",
                self.serving_dsn, "--model-base-url", self.model.base_url]

    async def dispatcher(self, name: str, *, old: bool, ready: bool = True) -> Service:
        """An activity dispatcher on bubblewrap sandboxes (quick to start here; the
        sandboxes' own tests cover the other backends); ``ready``: once it logged so."""
        env = {**self.env(name, old=old), "TENANTRY_SANDBOX_BACKEND": "bwrap",
               "TENANTRY_SANDBOX_MIN_BOUNDARY": "bwrap", "TENANTRY_SANDBOX_POOL_SIZE": "1"}
        service = await start_service(
            name, [*self.program(old=old), "activity-worker", "--database-url",
                   self.serving_dsn, "--slots", "2"], env, self.logs / f"{name}.log")
        if ready:
            await service.wait_for("activity dispatcher started", WITHIN)
        return service

    # -- reading the database -------------------------------------------------------

    async def count(self, sql: str, *args: object) -> int:
        found: int = await self.conn.fetchval(sql, *args)
        return found

    async def finished_keyed(self) -> int:
        return await self.count(
            "SELECT count(*) FROM runs WHERE status = 'finished' AND tenant_id = ANY($1)",
            [t.tenant_id for t in self.tenants])

    async def unfinished(self, *, but_approvals: bool = True) -> list[str]:
        """Runs not ended, of every tenant; ``but_approvals``: but those waiting for a
        person's approval, or for a child that is."""
        rows = await self.conn.fetch(
            "SELECT r.run_id, r.status FROM runs r WHERE r.status NOT IN "
            "('finished', 'failed', 'cancelled') AND NOT ($1 AND EXISTS ("
            "SELECT 1 FROM approvals a WHERE a.status = 'pending' AND (a.run_id = r.run_id "
            "OR a.run_id IN (SELECT c.run_id FROM runs c WHERE c.parent_run_id = r.run_id))))",
            but_approvals)
        return [f"{RunId(r['run_id'])} {r['status']}" for r in rows]

    async def none_left(self, *, but_approvals: bool = True) -> bool:
        return not await self.unfinished(but_approvals=but_approvals)

    # -- runs ------------------------------------------------------------------------

    async def side_run(self, agent: str, input: dict[str, object],
                       to: Backend | None = None) -> str:
        r = await self.traffic.send("POST", "/v1/runs", to=to, headers=self.side.headers,
                                    json={"agent_id": self.side.agents[agent], "input": input})
        assert r.status_code == 202, f"{r.status_code} {r.text}"
        run_id: str = r.json()["run_id"]
        return run_id

    async def keyed_run(self, plan: PlannedRun, tenant: TenantHandle,
                        to: Backend | None = None) -> str:
        r = await self.traffic.send("POST", "/v1/runs", to=to, headers=tenant.headers,
                                    json={"agent_id": tenant.agent_id, "input": plan.input})
        assert r.status_code == 202, f"{r.status_code} {r.text}"
        run_id: str = r.json()["run_id"]
        self.runs[run_id] = plan
        return run_id

    async def held_runs(self, plans: Sequence[PlannedRun], to: Backend) -> list[str]:
        """Keyed runs whose second step waits at the model's gate until it is released."""
        self.model.hold([str(p.input["input"]) for p in plans])
        return [await self.keyed_run(p, self.tenants[0], to) for p in plans]

    async def holders(self, run_ids: Sequence[str]) -> dict[str, str] | None:
        """Who holds each run, once every one is running past its first step, at the
        gate; None before."""
        rows = await self.conn.fetch(
            "SELECT run_id, lease_owner FROM runs WHERE run_id = ANY($1) "
            "AND status = 'running'", [RunId.parse(r).uuid for r in run_ids])
        owners = {str(RunId(r["run_id"])): str(r["lease_owner"]) for r in rows}
        inputs = {str(self.runs[r].input["input"]) for r in run_ids}
        if len(owners) < len(run_ids) or any(not self.model.waiting[i] for i in inputs):
            return None
        return owners

    async def epochs(self, run_ids: Sequence[str]) -> dict[str, int]:
        return {str(RunId(r["run_id"])): r["lease_epoch"] for r in await self.conn.fetch(
            "SELECT run_id, lease_epoch FROM runs WHERE run_id = ANY($1)",
            [RunId.parse(r).uuid for r in run_ids])}


async def set_up_tenants(cell: Cell, api: Backend, operator: dict[str, str]) -> None:
    """Two tenants for keyed runs (the chaos harness's), and one for the rest, made
    through ``api``."""
    cell.tenants = await create_tenants(api.client, operator, cell.mcp.url, 2)
    send, side = cell.traffic.send, cell.side
    r = await send("POST", "/admin/v1/tenants", to=api, headers=operator,
                   json={"name": "Upgrade side"})
    assert r.status_code == 201, r.text
    side.tenant = r.json()["tenant_id"]
    r = await send("POST", f"/admin/v1/tenants/{side.tenant}/api-keys", to=api,
                   headers=operator)
    assert r.status_code == 201, r.text
    side.headers = {"Authorization": f"Bearer {r.json()['api_key']}"}
    r = await send("POST", f"/admin/v1/tenants/{side.tenant}/tool-servers", to=api,
                   headers=operator, json={"name": "effects", "url": cell.side_mcp.url,
                                           "honours_idempotency_keys": True})
    assert r.status_code == 201, r.text
    r = await send("POST", "/v1/activities", to=api, headers=side.headers, json={
        "name": "square", "entrypoint": "main.py:handle", "timeout_seconds": 60,
        "files": {"main.py": base64.b64encode(textwrap.dedent(SQUARE).encode()).decode()}})
    assert r.status_code == 201, r.text
    specs: dict[str, dict[str, Any]] = {
        "refunder": {"tools": ["effect"], "needs_approval": ["effect"]},
        "kid": {"tools": ["effect"]},
        "careful": {"tools": ["effect"], "needs_approval": ["effect"]},
        "calc": {"tools": ["activity:square"]},
    }
    for name, spec in specs.items():
        side.agents[name] = await _agent(cell, api, name, spec)
    side.agents["lead"] = await _agent(cell, api, "lead", {
        "tools": [], "children": [{"agent_id": side.agents["kid"]},
                                  {"agent_id": side.agents["careful"]}]})


async def _agent(cell: Cell, api: Backend, name: str, spec: dict[str, Any]) -> str:
    r = await cell.traffic.send("POST", "/v1/agents", to=api, headers=cell.side.headers,
                                json={"name": name, "model": "scripted",
                                      "system_prompt": "Follow the script.", **spec})
    assert r.status_code == 201, r.text
    agent: str = r.json()["agent_id"]
    return agent


async def start_waiting_runs(cell: Cell, api: Backend) -> None:
    """Three runs whose tool needs a person's approval, and a parent whose child's does:
    they wait through whatever follows, until the approvals are decided."""
    side = cell.side
    for i in range(3):
        note = f"refund-{i}"
        side.approvals[await cell.side_run(
            "refunder", scripted(effect(note), answer("{last_tool_result}")), api)] = note
    side.denied = next(iter(side.approvals))
    parent = await cell.side_run("lead", scripted(
        {"tool_calls": [start_agent("careful", effect("careful-0"), answer("careful done"))]},
        answer("lead got: {tool_results}")), api)
    side.parents[parent] = ["careful done"]


class Load:
    """Runs arriving through the load balancer's pool until stopped — a keyed run each
    time, and among them a parent of two children, a run calling the activity and an
    activity task — and a poller reading from every API in the pool meanwhile. A failed
    request (anything but the answer expected) stops it; :meth:`check` raises it."""

    def __init__(self, cell: Cell) -> None:
        self.cell = cell
        self.plans = plan_runs(400, random.Random(37), slow_every=4)
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._arrivals(), name="arrivals"),
                       asyncio.create_task(self._poll(), name="poller")]

    def check(self) -> None:
        for task in self._tasks:
            if task.done() and not task.cancelled():
                failed = task.exception()
                if failed is not None:
                    raise failed

    async def arrivals(self, n: int, what: str) -> None:
        """Until ``n`` more keyed runs were accepted."""
        target = len(self.cell.runs) + n

        async def arrived() -> bool:
            self.check()
            return len(self.cell.runs) >= target

        await until(arrived, what, WITHIN, self.describe)

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.check()

    def describe(self) -> str:
        side = self.cell.side
        return (f"\nload: {len(self.cell.runs)} keyed runs, {len(side.parents)} parents, "
                f"{len(side.calc)} activity runs, {len(side.tasks)} activity tasks; "
                f"answers:\n{self.cell.traffic.table()}")

    async def _arrivals(self) -> None:
        cell, side = self.cell, self.cell.side
        for i, plan in enumerate(self.plans):
            if self._stop.is_set():
                return
            await cell.keyed_run(plan, cell.tenants[i % len(cell.tenants)])
            if i % 6 == 1:
                answers = [f"kid {i}-{j} done" for j in range(2)]
                parent = await cell.side_run("lead", scripted(
                    {"tool_calls": [start_agent("kid", effect(f"kid-{i}-{j}"), answer(text))
                                    for j, text in enumerate(answers)]},
                    answer("lead got: {tool_results}")))
                side.parents[parent] = answers
            if i % 6 == 4:
                side.calc[await cell.side_run("calc", scripted(
                    {"tool_calls": [{"name": "square", "arguments": {"n": i}}]},
                    answer("{last_tool_result}")))] = i
            if i % 12 == 7:
                r = await cell.traffic.send(
                    "POST", "/v1/activity-tasks",
                    headers={**side.headers, "Idempotency-Key": f"square-{i}"},
                    json={"activity": "square", "input": {"n": i}})
                assert r.status_code == 202, f"{r.status_code} {r.text}"
                side.tasks[r.json()["task_id"]] = i
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), ARRIVAL_EVERY_S)
        raise AssertionError("the load ran out of planned runs")

    async def _poll(self) -> None:
        """Every API in the pool, all the time: what a client polling its runs sees."""
        cell = self.cell
        reads: list[tuple[str, dict[str, str], dict[str, Any]]] = [
            ("/healthz", {}, {}),
            ("/v1/runs", cell.tenants[0].headers, {"limit": 5}),
            ("/v1/approvals", cell.side.headers, {"status": "pending"})]
        while not self._stop.is_set():
            for backend in list(cell.traffic.pool):
                for path, headers, params in reads:
                    # Looked at with no await before the request counts as in flight: an
                    # API that left the pool gets no new request.
                    if backend not in cell.traffic.pool:
                        break
                    r = await cell.traffic.send("GET", path, to=backend, headers=headers,
                                                params=params)
                    assert r.status_code == 200, f"GET {path}: {r.status_code} {r.text}"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), 0.1)
