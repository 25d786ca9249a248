"""The replay gate (issue 21): many varied runs recorded on a real platform, then every one
replayed on the current code (invariant 11), and every call the tool server received checked
against its run's tool rules (tests/support/escapes.py). benchmarks/replay.py runs it at
10,000 runs, in CI too (`make gate`, after the suite); tests/integration/test_replay_gate.py
plays each scenario once and records the corpus's gate-<scenario>.json files from them.

The platform is real: the database given (its superuser DSN), worker loops in this process
(tests.support.worker, the engine ``tenantry worker`` runs), the model servers over HTTP — the
main one given, a flaky one and a broken one started here because scenarios take them down —
and the MCP test server given, registered as honouring idempotency keys for every tenant but
those of the keyless role, for which it is registered as not honouring them. Scenarios marked
``sandbox`` get bwrap sandboxes, an activity dispatcher and a test web for the browser
(tests/support/gate_sandboxes.py), started only when the plan has such a run.

A scenario is one small async function: it starts one run and does to it what a person or a
provider would (approve, deny, cancel, go down), and returns it. ``SCENARIOS`` weighs them;
each scenario's ``marks`` are events its log must hold (the test checks every one). Nothing is
mocked: unknown outcomes come from a worker that dies after sending a keyless call (before the
result is saved), expiries from the worker's own housekeeping under a one-second approval
time-to-live, parks from a model account that is down and comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import textwrap
import time
import uuid
from collections import Counter
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import asyncpg
import orjson

from tenantry.activities import Bundle
from tenantry.activities.versions import ActivitySettings
from tenantry.agents import service as agents
from tenantry.agents.spec import AgentSpec, ChildAgent, Limits, SandboxPolicy, SummarizePolicy
from tenantry.db import Database
from tenantry.evaluations import service as evaluations
from tenantry.evaluations import test_sets
from tenantry.ids import AgentId, ApprovalId, RunId, TenantId
from tenantry.jsonutil import digest
from tenantry.ledger.prices import PriceBook
from tenantry.models import accounts
from tenantry.runs import approvals
from tenantry.runs import service as runs
from tenantry.runs.events import Event
from tenantry.runs.replay import Difference, export_runs, replay
from tenantry.scheduler.policy import TenantPolicy, set_policy
from tenantry.store.activities import ActivityStore
from tenantry.tenants import service as tenants
from tenantry.testing.fake_model import FakeModelServer
from tenantry.tools import servers
from tenantry.tools.mcp_client import McpToolClient
from tests.support.activities import ECHO_KEY
from tests.support.db import login_dsn
from tests.support.escapes import Escapes, ServerCall, count_escapes
from tests.support.gate_sandboxes import BROWSER_POLICY, PAGES, GateSandboxes, gate_sandboxes
from tests.support.pages import HOST as PAGES_HOST
from tests.support.pages import INJECTION as INJECTED
from tests.support.scripts import answer, call, scripted
from tests.support.tools import DiesAfterTheCall
from tests.support.worker import running_worker

ENDED = frozenset({"finished", "failed", "cancelled"})
KEYED_TOOLS = ("effect", "echo", "add", "fail", "slow")
FLAKY_MODEL = "scripted/flaky"  # served only by the account that goes down and comes back
BROKEN_MODEL = "scripted/broken"  # served only by an account that never answers
POLL_S = 0.05
Progress = Callable[[str], None]


# -- what a scenario is ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Mark:
    """An event a scenario's log must hold: its type, some fields of its data, and fields
    it must have at all (``has``: e.g. a call's ``result``, not its ``error``)."""

    type: str
    fields: Mapping[str, object] = field(default_factory=dict)
    has: tuple[str, ...] = ()

    def found_in(self, events: Iterable[Event]) -> bool:
        return any(e.type == self.type
                   and all(e.data.get(k) == v for k, v in self.fields.items())
                   and all(e.data.get(k) is not None for k in self.has)
                   for e in events)

    def __str__(self) -> str:
        return (self.type + (f"{dict(self.fields)}" if self.fields else "")
                + (f" with {', '.join(self.has)}" if self.has else ""))


@dataclass(frozen=True, slots=True)
class Started:
    tenant: TenantId
    run: RunId


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    weight: int  # per mille of the runs (each scenario runs at least once)
    marks: tuple[Mark, ...]
    play: Callable[[Platform, random.Random], Awaitable[Started]]
    # "crash": played first, on a worker that dies mid-call (see generate()).
    phase: Literal["main", "crash"] = "main"
    sandbox: bool = False  # its runs need sandboxes (tests/support/gate_sandboxes.py)


# -- the platform the scenarios play on --------------------------------------------------------


class Watcher:
    """The state of every run a scenario waits on, from one poll for all of them (thousands
    of runs: one statement per tick, not one per run)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn
        self._status: dict[RunId, list[tuple[frozenset[str], asyncio.Future[None]]]] = {}
        self._approval: dict[RunId, list[asyncio.Future[ApprovalId]]] = {}

    async def reaches(self, run: RunId, statuses: frozenset[str]) -> None:
        """Until the run's status is one of ``statuses``."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._status.setdefault(run, []).append((statuses, future))
        await future

    async def approval(self, run: RunId) -> ApprovalId:
        """The run's pending approval, once it has asked for one."""
        future: asyncio.Future[ApprovalId] = asyncio.get_running_loop().create_future()
        self._approval.setdefault(run, []).append(future)
        return await future

    async def watch(self) -> None:
        try:
            while True:
                await self._poll()
                await asyncio.sleep(POLL_S)
        except Exception as exc:  # the database went away: nobody may wait forever
            for waiters in self._status.values():
                for _, future in waiters:
                    if not future.done():
                        future.set_exception(exc)
            for asked in self._approval.values():
                for found in asked:
                    if not found.done():
                        found.set_exception(exc)
            raise

    async def _poll(self) -> None:
        if self._status:
            rows = await self._conn.fetch(
                "SELECT run_id, status FROM runs WHERE run_id = ANY($1::uuid[])",
                [r.uuid for r in self._status])
            for row in rows:
                run = RunId(row["run_id"])
                waiting = []
                for statuses, future in self._status.pop(run, []):
                    if row["status"] in statuses:
                        if not future.done():
                            future.set_result(None)
                    else:
                        waiting.append((statuses, future))
                if waiting:
                    self._status.setdefault(run, []).extend(waiting)
        if self._approval:
            rows = await self._conn.fetch(
                "SELECT run_id, approval_id FROM approvals "
                "WHERE status = 'pending' AND run_id = ANY($1::uuid[])",
                [r.uuid for r in self._approval])
            for row in rows:
                for future in self._approval.pop(RunId(row["run_id"]), []):
                    if not future.done():
                        future.set_result(ApprovalId(row["approval_id"]))


class Outage:
    """The flaky model's only account goes down while a wave of runs starts on it, and stays
    down until every run of the wave has parked; then it comes back and the gateway's probe
    wakes them. The next wave waits until this one's runs have ended: a woken run is not
    parked again by the next outage before it ends (that would still replay, but could keep
    it waiting wave after wave)."""

    def __init__(self, server: FakeModelServer, watcher: Watcher) -> None:
        self._server = server
        self._watcher = watcher
        self._lock = asyncio.Lock()
        self._pending: list[tuple[Callable[[], Awaitable[Started]],
                                  asyncio.Future[Started]]] = []
        self.waves = 0

    async def park(self, start: Callable[[], Awaitable[Started]]) -> Started:
        future: asyncio.Future[Started] = asyncio.get_running_loop().create_future()
        self._pending.append((start, future))
        async with self._lock:  # whoever holds it plays the wave for everyone pending
            if not future.done():
                await self._wave()
        return future.result()

    async def _wave(self) -> None:
        wave, self._pending = self._pending, []
        self.waves += 1
        try:
            self._server.set_mode("down")
            try:
                started = await asyncio.gather(*(start() for start, _ in wave))
                await asyncio.gather(*(self._watcher.reaches(s.run, frozenset({"waiting"}))
                                       for s in started))
            finally:
                self._server.set_mode("ok")
            await asyncio.gather(*(self._watcher.reaches(s.run, ENDED) for s in started))
        except BaseException as exc:
            for _, future in wave:
                if future.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(exc)
            raise
        for (_, future), one in zip(wave, started, strict=True):
            future.set_result(one)


@dataclass
class Platform:
    """Tenants by role, their agents (made on first use), the watcher and the outage.

    Each role has several tenants, as a cell has thousands: a tenant's own rows (its
    admission counters, its budget) are written by every step of its runs, so one tenant
    with all the runs would measure that row's lock, not the platform."""

    db: Database
    tenants: dict[str, list[TenantId]]  # by role; runs are dealt over them in turn
    watcher: Watcher
    outage: Outage
    _agents: dict[tuple[TenantId, str], AgentId] = field(default_factory=dict)
    _activities: set[tuple[TenantId, str]] = field(default_factory=set)
    _turn: Iterator[int] = field(default_factory=itertools.count)
    _agent_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def activity(self, tenant: TenantId, name: str, code: str) -> None:
        """The tenant's activity ``name`` (one ``main.py`` of ``code``), published on first
        use (before any agent that calls it: publishing an agent checks its activities)."""
        async with self._agent_lock:
            if (tenant, name) not in self._activities:
                await ActivityStore(self.db).publish(
                    tenant, name, Bundle({"main.py": textwrap.dedent(code).encode()},
                                         "main.py:handle"),
                    ActivitySettings(timeout_s=30.0, backoff_s=0.0))
                self._activities.add((tenant, name))

    async def agent(self, tenant: TenantId, name: str, **spec: Any) -> AgentId:
        async with self._agent_lock:  # one agent per (tenant, name), however many ask
            found = self._agents.get((tenant, name))
            if found is None:
                made = await agents.create_agent(self.db, tenant, name, AgentSpec(
                    **{"model": "scripted", "system_prompt": "Be brief.", **spec}))
                found = self._agents[(tenant, name)] = made.agent_id
        return found

    def tenant(self, role: str) -> TenantId:
        """The next of the tenants of ``role``, in turn."""
        return self.tenants[role][next(self._turn) % len(self.tenants[role])]

    async def start(self, role: str, agent: str, value: object, *,
                    tenant: TenantId | None = None, stream: bool = False,
                    **spec: Any) -> Started:
        """A run of ``agent`` (made with ``spec`` on first use) for ``tenant``, else one of
        the tenants of ``role``, as POST /v1/runs makes it (``stream``: as with
        ``"stream": true``, every model call streamed, ADR 0030)."""
        tenant = tenant or self.tenant(role)
        agent_id = await self.agent(tenant, agent, **spec)
        request = runs.RunRequest(
            agent_id=agent_id, version=None, input=value, webhook_url=None,
            priority="interactive", idempotency_key=None,
            request_sha256=digest({"agent_id": str(agent_id), "input": value}),
            stream=stream)
        created = await runs.create_run(self.db, tenant, request)
        return Started(tenant, created.run_id)


# -- the scenarios -----------------------------------------------------------------------------


def _keyed_call(rng: random.Random, n: int) -> dict[str, object]:
    kind = rng.choice(("echo", "add", "effect"))
    if kind == "echo":
        return {"name": "echo", "arguments": {"text": f"{{input}} {n}"}}
    if kind == "add":
        return {"name": "add", "arguments": {"a": rng.randrange(100), "b": n}}
    return {"name": "effect", "arguments": {"note": f"order-{rng.randrange(10_000)}"}}


async def plain_answer(p: Platform, rng: random.Random) -> Started:
    return await p.start("keyed", "plain", scripted(
        answer(f"The answer is {rng.randrange(1000)}."), text=f"question {rng.random()}"))


async def long_answer(p: Platform, rng: random.Random) -> Started:
    """Past the event size limit: the answer is kept in the payload table."""
    return await p.start("keyed", "plain", scripted(answer("x" * rng.randrange(9_000, 20_000))))


async def empty_reply(p: Platform, rng: random.Random) -> Started:
    """The model says nothing: the run fails, its own failure, not the platform's."""
    return await p.start("keyed", "plain", scripted(answer("")))


async def tool_calls(p: Platform, rng: random.Random) -> Started:
    """One to three replies of one to three keyed calls each, then an answer over them."""
    steps = [{"tool_calls": [_keyed_call(rng, n) for n in range(rng.randint(1, 3))]}
             for _ in range(rng.randint(1, 3))]
    return await p.start("keyed", "tools", scripted(
        *steps, answer("Done: {tool_results}"), text=f"job {rng.randrange(10_000)}"),
        tools=KEYED_TOOLS)


async def tool_errors(p: Platform, rng: random.Random) -> Started:
    """What a model gets wrong and is told: a tool that fails, a call without a name,
    arguments that are not JSON, a tool not allowed, arguments of the wrong type."""
    wrong = [call("fail", message="no stock"), {"tool_calls": [{"name": "", "arguments": {}}]},
             {"tool_calls": [{"name": "echo", "arguments": "{oops"}]}, call("not_allowed", x=1),
             call("add", a="one", b=2)]
    steps = rng.sample(wrong, rng.randint(2, len(wrong)))
    return await p.start("keyed", "tools", scripted(*steps, answer("coped: {tool_results}")),
                         tools=KEYED_TOOLS)


async def keyless_tools(p: Platform, rng: random.Random) -> Started:
    """Calls to a server that does not honour keys: each is marked started before it is sent."""
    steps = [call("effect", note=f"payout-{rng.randrange(10_000)}")
             for _ in range(rng.randint(1, 3))]
    return await p.start("keyless", "keyless", scripted(*steps, answer("{tool_results}")),
                         tools=("effect", "echo"))


async def unknown_outcome(p: Platform, rng: random.Random) -> Started:
    """A keyless call whose worker died after sending it: never repeated, told as unknown."""
    return await p.start("keyless", "keyless", scripted(
        call("effect", note=f"payout-{rng.randrange(10_000)}"), answer("{last_tool_result}")),
        tools=("effect", "echo"))


async def _awaiting_approval(p: Platform, tenant: str, rng: random.Random) -> Started:
    return await p.start(tenant, "approver", scripted(
        call("effect", note=f"refund {rng.randrange(1, 500)} EUR"), answer("{last_tool_result}")),
        tools=("effect", "echo"), needs_approval=("effect",))


async def approval_granted(p: Platform, rng: random.Random) -> Started:
    started = await _awaiting_approval(p, "approvals", rng)
    approval = await p.watcher.approval(started.run)
    await approvals.decide(p.db, started.tenant, approval, "approve", None)
    return started


async def approval_denied(p: Platform, rng: random.Random) -> Started:
    started = await _awaiting_approval(p, "approvals", rng)
    approval = await p.watcher.approval(started.run)
    await approvals.decide(p.db, started.tenant, approval, "deny", "amount too high")
    return started


async def approval_expired(p: Platform, rng: random.Random) -> Started:
    """Nobody decides: the worker's housekeeping expires it (this tenant's TTL is 1 s)."""
    return await _awaiting_approval(p, "expiring", rng)


async def parked_and_woken(p: Platform, rng: random.Random) -> Started:
    return await p.outage.park(lambda: p.start("keyed", "flaky", scripted(
        call("echo", text="before"), answer(f"woke {rng.randrange(1000)}")),
        model=FLAKY_MODEL, tools=KEYED_TOOLS))


async def fallback(p: Platform, rng: random.Random) -> Started:
    """The version's model never answers; it opted in to a fallback model, which does."""
    steps = [call("echo", text="on the fallback")] if rng.random() < 0.5 else []
    return await p.start("keyed", "fallback", scripted(*steps, answer("fell back")),
                         model=BROKEN_MODEL, fallback_models=("scripted",), tools=KEYED_TOOLS)


async def cancelled(p: Platform, rng: random.Random) -> Started:
    """Cancelled at once (most likely still queued: it ends there) or while it runs (its
    worker stops it between steps; the slow tool's call in flight finishes first)."""
    started = await p.start("keyed", "tools", scripted(
        call("slow", seconds=2.0), call("echo", text="after"), answer("too late")),
        tools=KEYED_TOOLS)
    if rng.random() < 0.7:
        await p.watcher.reaches(started.run, frozenset({"running"}))
        await asyncio.sleep(rng.uniform(0.0, 0.5))
    await runs.cancel_run(p.db, started.tenant, started.run)
    return started


def _budget(name: str, limits: Limits) -> Callable[[Platform, random.Random],
                                                   Awaitable[Started]]:
    """A model that keeps calling tools, stopped by one of the version's limits."""
    async def play(p: Platform, rng: random.Random) -> Started:
        loop = [call("echo", text=f"again {n}") for n in range(rng.randint(3, 6))]
        return await p.start("keyed", name, scripted(*loop, answer("never")),
                             limits=limits, tools=KEYED_TOOLS)
    return play


def _start_agent(agent: str, *steps: dict[str, object]) -> dict[str, object]:
    """A start_agent call whose child carries its own script as its input text."""
    return {"name": "start_agent",
            "arguments": {"agent": agent, "input": orjson.dumps(scripted(*steps)).decode()}}


async def _lead(p: Platform, tenant: TenantId, kid: str, value: object, **kid_spec: Any,
                ) -> Started:
    child = await p.agent(tenant, kid, **kid_spec)
    return await p.start("keyed", f"lead-{kid}", value, tenant=tenant,
                         children=(ChildAgent(str(child), None, kid),))


async def child_runs(p: Platform, rng: random.Random) -> Started:
    """One to three children started by one reply (side by side), each answering; then
    sometimes a second reply starting one more."""
    calls = [_start_agent("kid", answer(f"part {n}: {rng.randrange(1000)}"))
             for n in range(rng.randint(1, 3))]
    steps: list[dict[str, object]] = [{"tool_calls": calls}]
    if rng.random() < 0.3:
        steps.append({"tool_calls": [_start_agent("kid", call("echo", text="checked"),
                                                  answer("double-checked"))]})
    return await _lead(p, p.tenant("keyed"), "kid", scripted(
        *steps, answer("combined: {tool_results}")), tools=KEYED_TOOLS)


async def child_cancelled(p: Platform, rng: random.Random) -> Started:
    """The parent is cancelled while its child makes a slow call: both end cancelled."""
    started = await _lead(p, p.tenant("keyed"), "slow-kid", scripted(
        {"tool_calls": [_start_agent("slow-kid", call("slow", seconds=1.0),
                                     answer("too late"))]},
        answer("never")), tools=KEYED_TOOLS)
    await p.watcher.reaches(started.run, frozenset({"waiting"}))
    await runs.cancel_run(p.db, started.tenant, started.run)
    return started


async def summarized(p: Platform, rng: random.Random) -> Started:
    """Ten steps of long tool results with a small summarize threshold: summarized along
    the way (the inline script, in the input, is part of every prompt: ~630 tokens)."""
    steps = [call("echo", text=f"step {n}: " + "x" * 200) for n in range(10)]
    return await p.start("keyed", "summarizer", scripted(
        *steps, answer(f"summarized run {rng.randrange(1000)}")), tools=KEYED_TOOLS,
        summarize=SummarizePolicy(after_tokens=900, keep_last_steps=rng.choice((0, 1, 2))))


async def repeat_stopped(p: Platform, rng: random.Random) -> Started:
    """A model stuck on one call: told at the limit (3), stopped at the next."""
    same = call("echo", text=f"again {rng.randrange(1000)}")
    return await p.start("keyed", "looper", scripted(*[same] * 6, answer("never")),
                         tools=KEYED_TOOLS, limits=Limits(repeat_limit=3))


async def repeat_told(p: Platform, rng: random.Random) -> Started:
    """A model that repeats a call to the limit (3) is told, not stopped: the third call is
    not made, and the model does something else and finishes."""
    same = call("echo", text=f"poll {rng.randrange(1000)}")
    return await p.start("keyed", "poller", scripted(
        *[same] * 3, call("add", a=rng.randrange(100), b=1), answer("{last_tool_result}")),
        tools=KEYED_TOOLS, limits=Limits(repeat_limit=3))


async def child_refused(p: Platform, rng: random.Random) -> Started:
    """A parent asks for an agent that is not one of its children: the call's error, no
    child started, and the parent goes on."""
    return await _lead(p, p.tenant("keyed"), "kid", scripted(
        {"tool_calls": [_start_agent("stranger", answer("never started"))]},
        answer(f"carried on {rng.randrange(1000)}: {{last_tool_result}}")), tools=KEYED_TOOLS)


async def streamed(p: Platform, rng: random.Random) -> Started:
    """Every model call streamed (the run asked, ADR 0030): text and tool calls arrive in
    pieces and are assembled into the same replies a whole answer gives."""
    steps: list[dict[str, object]] = [
        {"tool_calls": [_keyed_call(rng, n) for n in range(rng.randint(1, 2))]}
        for _ in range(rng.randint(0, 2))]
    return await p.start("keyed", "tools", scripted(
        *steps, answer(f"streamed {rng.randrange(1000)}: {{tool_results}}")),
        tools=KEYED_TOOLS, stream=True)


async def injected_instruction(p: Platform, rng: random.Random) -> Started:
    """A tool result carries instructions and the (scripted) model obeys: it calls
    ``effect``, which the tenant's server serves and this agent may not use. The gateway
    refuses, the model is told, and the server must never see the call (an escape)."""
    return await p.start("keyed", "reader", scripted(
        call("echo", text=INJECTED), call("effect", note=f"wire-{rng.randrange(10_000)}"),
        answer("{last_tool_result}")), tools=("echo",))


async def code_tools(p: Platform, rng: random.Random) -> Started:
    """Built-in tools in the run's own sandbox: a file written, code that reads it."""
    return await p.start("keyed", "coder", scripted(
        call("write_file", path="n.txt", content=str(rng.randrange(1000))),
        call("run_python", code="print(int(open('n.txt').read()) * 2)"),
        answer("{last_tool_result}")), tools=("write_file", "run_python", "read_file"))


async def browser(p: Platform, rng: random.Random) -> Started:
    """The browser in the run's sandbox opens a page that carries instructions; the model
    obeys and calls ``effect``, which this agent may not use: refused, never sent."""
    return await p.start("keyed", "browser", scripted(
        call("browser_open", url=f"{PAGES}/inject"),
        call("effect", note=f"refund order-{rng.randrange(1000)}"),
        answer("{tool_results}")),
        tools=("browser_open",), sandbox=SandboxPolicy(egress=(PAGES_HOST,)))


async def activity_tool(p: Platform, rng: random.Random) -> Started:
    """An activity called as a tool (ADR 0015): the run enqueues a task with the call's
    key and parks; the dispatcher runs it in a fresh sandbox; its result wakes the run."""
    tenant = p.tenant("keyed")
    await p.activity(tenant, "send_invoice", ECHO_KEY)
    return await p.start("keyed", "invoicer", scripted(
        call("send_invoice", order=rng.randrange(1000)), answer("invoiced: {last_tool_result}")),
        tenant=tenant, tools=("activity:send_invoice",))


async def evaluation(p: Platform, rng: random.Random) -> Started:
    """A one-case evaluation (ADR 0034): both of its runs get stand-ins for their tool
    calls — the case's recording, the test set's stub, "no recording" — and no call reaches
    the tenant's server (one that did would be an escape). The candidate's run is the one
    replayed; the baseline's ends too before this returns."""
    tenant = p.tenant("keyed")
    agent = await p.agent(tenant, "evaluated", tools=("effect", "echo"))
    note = f"order-{rng.randrange(10_000)}"
    case = {"input": scripted(call("effect", note=note), call("echo", text="status?"),
                              call("effect", note="unrecorded"), answer("{tool_results}")),
            "checks": {"tools_called": ["effect"]},
            "recorded": [{"tool": "effect", "arguments": {"note": note},
                          "result": f"{note} is shipped"}]}
    test_set = await test_sets.create(p.db, tenant, agent, f"gate-{uuid.uuid4().hex}",
                                      tool_results="recorded", stubs={"echo": "stubbed"},
                                      cases=[case])
    made = await evaluations.start(p.db, tenant, agent, test_set, baseline=1, candidate=1,
                                   candidate_model=None, by="replay-gate")
    async with p.db.tenant_tx(tenant) as conn:
        sides = {row["side"]: RunId(row["run_id"]) for row in await conn.fetch(
            "SELECT side, run_id FROM evaluation_runs WHERE tenant_id = $1 "
            "AND evaluation_id = $2", tenant.value, made.evaluation_id.uuid)}
    await p.watcher.reaches(sides["baseline"], ENDED)
    return Started(tenant, sides["candidate"])


# Scenarios that need a sandbox (tests/support/gate_sandboxes.py): kept to a small share.
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("plain_answer", 146, (Mark("ModelReplied"), Mark("RunFinished")), plain_answer),
    Scenario("long_answer", 20, (Mark("RunFinished"),), long_answer),
    Scenario("empty_reply", 20, (Mark("RunFailed", {"ours": False}),), empty_reply),
    Scenario("tool_calls", 280, (Mark("ToolCompleted"), Mark("RunFinished")), tool_calls),
    Scenario("tool_errors", 80, (Mark("ToolCompleted"), Mark("RunFinished")), tool_errors),
    Scenario("keyless_tools", 80, (Mark("ToolStarted"), Mark("ToolCompleted"),
                                   Mark("RunFinished")), keyless_tools),
    Scenario("unknown_outcome", 4, (Mark("ToolStarted"),
                                    Mark("ToolCompleted", {"outcome": "unknown"}),
                                    Mark("RunFinished")), unknown_outcome, phase="crash"),
    Scenario("approval_granted", 60, (Mark("ApprovalRequested"),
                                      Mark("ApprovalDecided", {"decision": "approved"}),
                                      Mark("ToolCompleted")), approval_granted),
    Scenario("approval_denied", 50, (Mark("ApprovalDecided", {"decision": "denied"}),
                                     Mark("RunFinished")), approval_denied),
    Scenario("approval_expired", 40, (Mark("ApprovalDecided", {"decision": "expired"}),
                                      Mark("RunFinished")), approval_expired),
    Scenario("parked_and_woken", 20, (Mark("RunParked"), Mark("RunResumed"),
                                      Mark("RunFinished")), parked_and_woken),
    Scenario("fallback", 60, (Mark("ModelFallback", {"from": BROKEN_MODEL, "to": "scripted"}),
                              Mark("RunFinished")), fallback),
    Scenario("cancelled", 50, (Mark("CancelRequested"), Mark("RunCancelled")), cancelled),
    Scenario("budget_max_steps", 30, (Mark("BudgetStopped", {"limit": "max_steps"}),),
             _budget("budget-steps", Limits(max_steps=2))),
    Scenario("budget_max_tokens", 30, (Mark("BudgetStopped", {"limit": "max_tokens"}),),
             _budget("budget-tokens", Limits(max_tokens=5))),
    Scenario("budget_max_cost", 30, (Mark("BudgetStopped", {"limit": "max_cost_micros"}),),
             _budget("budget-cost", Limits(max_cost_micros=1))),
    Scenario("child_runs", 40, (Mark("ChildRunStarted"),
                                Mark("ChildRunEnded", {"status": "finished"}),
                                Mark("RunFinished")), child_runs),
    Scenario("child_cancelled", 10, (Mark("ChildRunStarted"), Mark("CancelRequested"),
                                     Mark("RunCancelled")), child_cancelled),
    Scenario("summarized", 30, (Mark("Summarized"), Mark("RunFinished")), summarized),
    Scenario("repeat_stopped", 20, (Mark("BudgetStopped", {"limit": "repeat_limit",
                                                           "reason": "repeating"}),),
             repeat_stopped),
    Scenario("repeat_told", 20, (Mark("ToolCompleted", {"tool": "echo"}, has=("error",)),
                                 Mark("RunFinished")), repeat_told),
    Scenario("child_refused", 10, (Mark("ToolCompleted", {"tool": "start_agent"},
                                        has=("error",)), Mark("RunFinished")), child_refused),
    Scenario("streamed", 40, (Mark("RunCreated", {"stream": True}), Mark("RunFinished")),
             streamed),
    Scenario("injected_instruction", 40, (Mark("ToolCompleted", {"tool": "effect"},
                                               has=("error",)), Mark("RunFinished")),
             injected_instruction),
    Scenario("evaluation", 20, (Mark("ToolCompleted", {"outcome": "recorded"}),
                                Mark("ToolCompleted", {"outcome": "stub"}),
                                Mark("ToolCompleted", {"outcome": "no_recording"}),
                                Mark("RunFinished")), evaluation),
    Scenario("code_tools", 10, (Mark("ToolCompleted", {"tool": "run_python"}, has=("result",)),
                                Mark("RunFinished")), code_tools, sandbox=True),
    Scenario("activity_tool", 10, (Mark("ActivityRequested"),
                                   Mark("ActivityReturned", {"status": "finished"}),
                                   Mark("RunFinished")), activity_tool, sandbox=True),
    Scenario("browser", 2, (Mark("ToolCompleted", {"tool": "browser_open"}, has=("result",)),
                            Mark("ToolCompleted", {"tool": "effect"}, has=("error",)),
                            Mark("RunFinished")), browser, sandbox=True),
)


def plan(total: int, seed: int) -> list[Scenario]:
    """``total`` scenarios in a shuffled order: each at least once, the rest by weight
    (largest remainders)."""
    if total < len(SCENARIOS):
        raise ValueError(f"at least {len(SCENARIOS)} runs: one per scenario")
    spare = total - len(SCENARIOS)
    weights = sum(s.weight for s in SCENARIOS)
    shares = [spare * s.weight / weights for s in SCENARIOS]
    counts = [1 + int(share) for share in shares]
    by_remainder = sorted(range(len(SCENARIOS)), key=lambda i: int(shares[i]) - shares[i])
    for i in by_remainder[:total - sum(counts)]:
        counts[i] += 1
    order = [s for s, n in zip(SCENARIOS, counts, strict=True) for _ in range(n)]
    random.Random(seed).shuffle(order)
    return order


# -- generating --------------------------------------------------------------------------------


@dataclass
class Corpus:
    """The runs made, each with the scenario that made it."""

    runs: list[tuple[Scenario, Started]] = field(default_factory=list)
    seconds: float = 0.0
    park_waves: int = 0

    def by_scenario(self) -> dict[str, int]:
        return dict(Counter(s.name for s, _ in self.runs))


async def _provision(db: Database, mcp_url: str, per_role: int) -> dict[str, list[TenantId]]:
    """``per_role`` tenants of each role, with the MCP server registered (as honouring
    idempotency keys, except for the keyless role) and room for every run at once."""
    found: dict[str, list[TenantId]] = {}
    async with McpToolClient() as mcp:
        for role in ("keyed", "keyless", "approvals", "expiring"):
            for n in range(per_role):
                tenant = (await tenants.create_tenant(db, f"replay-gate-{role}-{n}")).tenant_id
                await set_policy(db, tenant, TenantPolicy(
                    max_running=10_000, max_queued=100_000,
                    approval_ttl_seconds=1 if role == "expiring" else 7 * 24 * 3600))
                await servers.register(db, mcp, tenant, name="effects", url=mcp_url,
                                       honours_idempotency_keys=role != "keyless")
                found.setdefault(role, []).append(tenant)
    return found


async def _register_models(db: Database, main: str, flaky: str, broken: str) -> None:
    prices = PriceBook(db)
    for account, url, model in (("main", main, "scripted"), ("flaky", flaky, FLAKY_MODEL),
                                ("broken", broken, BROKEN_MODEL)):
        await accounts.register(db, accounts.NewAccount(account, "openai", url, (model,), "us"),
                                prices=prices, master=None)


@asynccontextmanager
async def _watching(dsn: str) -> AsyncIterator[Watcher]:
    conn = await asyncpg.connect(dsn)
    watcher = Watcher(conn)
    task = asyncio.create_task(watcher.watch(), name="replay-gate watcher")
    try:
        yield watcher
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await conn.close()


async def generate(
    dsn: str, *, model_url: str, mcp_url: str, total: int, seed: int = 21,
    workers: int = 2, concurrency: int = 150, tenants_per_role: int = 1,
    progress: Progress | None = None,
) -> Corpus:
    """Make ``total`` runs over the scenarios on the database ``dsn`` (superuser, migrated),
    every one of them ended. ``workers`` worker loops of ``concurrency`` runs each drive them;
    at most as many runs as all of them hold are under way at once (plus those waiting)."""
    say = progress or (lambda _: None)
    order = plan(total, seed)
    corpus = Corpus()
    began = time.perf_counter()
    db = await Database.connect(login_dsn(dsn), min_size=1, max_size=10)
    try:
        async with (FakeModelServer() as flaky, FakeModelServer() as broken,
                    _watching(dsn) as watcher):
            broken.set_mode("down")
            await _register_models(db, model_url, flaky.base_url, broken.base_url)
            outage = Outage(flaky, watcher)
            platform = Platform(db, await _provision(db, mcp_url, tenants_per_role), watcher,
                                outage)
            numbered = list(enumerate(order))
            crash = [(i, s) for i, s in numbered if s.phase == "crash"]
            main = [(i, s) for i, s in numbered if s.phase == "main"]
            await _crash_phase(dsn, platform, crash, seed, corpus, say)
            async with contextlib.AsyncExitStack() as stack:
                boxes: GateSandboxes | None = None
                if any(s.sandbox for _, s in main):
                    boxes = await stack.enter_async_context(gate_sandboxes(db))
                for n in range(workers):
                    manager = boxes.manager() if boxes is not None else None
                    if manager is not None:  # after its worker has stopped
                        stack.push_async_callback(manager.destroy_all)
                    await stack.enter_async_context(running_worker(
                        dsn, None, concurrency=concurrency, name=f"replay-gate-{n}",
                        sandboxes=manager, browser=BROWSER_POLICY))
                await _main_phase(platform, main, seed, corpus, say,
                                  in_flight=workers * concurrency)
                # The crash phase's runs end on these workers too.
                await asyncio.gather(*(watcher.reaches(s.run, ENDED) for _, s in corpus.runs))
            corpus.park_waves = outage.waves
    finally:
        await db.close()
    corpus.seconds = time.perf_counter() - began
    return corpus


async def _crash_phase(
    dsn: str, platform: Platform, planned: Sequence[tuple[int, Scenario]], seed: int,
    corpus: Corpus, say: Progress,
) -> None:
    """Runs whose keyless call a worker sends and then dies before saving the result
    (tests.support.tools.DiesAfterTheCall): their logs hold ToolStarted without a
    completion. The worker then stops, and the main phase's workers take the runs over."""
    if not planned:
        return
    conn = await asyncpg.connect(dsn)
    try:
        async with running_worker(dsn, None, gateway=DiesAfterTheCall,
                                  name="replay-gate-dies-mid-call") as dying:
            made = [(s, await s.play(platform, random.Random(f"{seed}:{i}")))
                    for i, s in planned]
            corpus.runs += made
            ids = [started.run.uuid for _, started in made]
            deadline = time.monotonic() + 60
            while True:
                begun = await conn.fetchval(
                    "SELECT count(DISTINCT run_id) FROM run_events "
                    "WHERE type = 'ToolStarted' AND run_id = ANY($1::uuid[])", ids)
                if begun == len(ids) and dying.active == 0:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {begun}/{len(ids)} keyless calls were started")
                await asyncio.sleep(POLL_S)
    finally:
        await conn.close()
    say(f"{len(planned)} runs left with a keyless call in flight by a worker that died")


async def _main_phase(
    platform: Platform, planned: Sequence[tuple[int, Scenario]], seed: int, corpus: Corpus,
    say: Progress, *, in_flight: int,
) -> None:
    gate = asyncio.Semaphore(in_flight)
    ended = 0
    shown = time.monotonic()

    async def one(index: int, scenario: Scenario) -> None:
        nonlocal ended, shown
        async with gate:  # bounds the runs under way, not just the starts
            started = await scenario.play(platform, random.Random(f"{seed}:{index}"))
            corpus.runs.append((scenario, started))
            await platform.watcher.reaches(started.run, ENDED)
        ended += 1
        if time.monotonic() - shown >= 5:
            shown = time.monotonic()
            say(f"{ended}/{len(planned)} runs ended")

    await asyncio.gather(*(one(i, s) for i, s in planned))
    say(f"{ended}/{len(planned)} runs ended")


# -- replaying ---------------------------------------------------------------------------------


@dataclass
class Verdict:
    runs: int = 0
    differences: list[Difference] = field(default_factory=list)
    differing_runs: int = 0
    export_s: float = 0.0
    replay_s: float = 0.0
    event_types: Counter[str] = field(default_factory=Counter)
    missing_marks: dict[str, list[str]] = field(default_factory=dict)  # scenario -> runs
    escapes: Escapes = field(default_factory=Escapes)


async def replay_corpus(
    dsn: str, corpus: Corpus, *, page: int = 500, progress: Progress | None = None,
    server_calls: Iterable[ServerCall] = (),
) -> Verdict:
    """Export every run of the corpus (a page of runs per statement) and replay each on the
    current code; check every scenario's marks on the logs, and every call the tool server
    received (``server_calls``) against the rules of the run that made it."""
    say = progress or (lambda _: None)
    verdict = Verdict()
    conn = await asyncpg.connect(dsn)
    try:
        verdict.escapes = await count_escapes(conn, server_calls)
    finally:
        await conn.close()
    scenario_of = {started.run: scenario for scenario, started in corpus.runs}
    by_tenant: dict[TenantId, list[RunId]] = {}
    for _, started in corpus.runs:
        by_tenant.setdefault(started.tenant, []).append(started.run)
    db = await Database.connect(login_dsn(dsn), min_size=1, max_size=2)
    try:
        for tenant, ids in by_tenant.items():
            for start in range(0, len(ids), page):
                began = time.perf_counter()
                records = await export_runs(db, tenant, ids[start:start + page])
                verdict.export_s += time.perf_counter() - began
                began = time.perf_counter()
                for record in records:
                    differences = replay(record)
                    verdict.runs += 1
                    verdict.differing_runs += bool(differences)
                    verdict.differences += differences
                verdict.replay_s += time.perf_counter() - began
                for record in records:
                    verdict.event_types.update(e.type for e in record.events)
                    scenario = scenario_of[RunId.parse(record.run_id)]
                    if not all(mark.found_in(record.events) for mark in scenario.marks):
                        verdict.missing_marks.setdefault(scenario.name, []).append(
                            record.run_id)
                say(f"{verdict.runs}/{len(corpus.runs)} runs replayed, "
                    f"{verdict.differing_runs} with differences")
    finally:
        await db.close()
    return verdict
