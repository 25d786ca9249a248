"""The replay gate's scenarios (tests/support/replay_gate.py plays and replays them): what
each does to one run, and the platform they do it on.

A scenario is one small async function: it starts one run and does to it what a person or a
provider would (approve, deny, cancel, go down), and returns it. ``SCENARIOS`` weighs them;
each scenario's ``marks`` are events its log must hold (the gate checks every one). Nothing is
mocked: unknown outcomes come from a worker that dies after sending a keyless call (before the
result is saved), expiries from the worker's own housekeeping under a one-second approval
time-to-live, parks from a model account that is down and comes back, stand-ins from a real
evaluation, activity results from a real dispatcher. Scenarios marked ``sandbox`` need the
bwrap sandboxes, dispatcher and test web of tests/support/gate_sandboxes.py.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import textwrap
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import asyncpg
import orjson

from tenantry.activities import Bundle
from tenantry.activities.code.versions import ActivitySettings
from tenantry.activities.tasks.store import ActivityStore
from tenantry.agents import service as agents
from tenantry.agents.spec import AgentSpec, ChildAgent, Limits, SandboxPolicy, SummarizePolicy
from tenantry.db import Database
from tenantry.evaluations import service as evaluations
from tenantry.evaluations import test_sets
from tenantry.ids import AgentId, ApprovalId, RunId, TenantId
from tenantry.jsonutil import digest
from tenantry.runs import approvals
from tenantry.runs import service as runs
from tenantry.runs.events import Event
from tenantry.testing.fake_model import FakeModelServer
from tenantry.tools import servers
from tenantry.tools.mcp_client import McpToolClient
from tests.support.activities import ECHO_KEY
from tests.support.bank_server import BankMcpServer
from tests.support.gate_sandboxes import PAGES
from tests.support.pages import HOST as PAGES_HOST
from tests.support.pages import INJECTION as INJECTED
from tests.support.scripts import answer, call, scripted

ENDED = frozenset({"finished", "failed", "cancelled"})
KEYED_TOOLS = ("effect", "echo", "add", "fail", "slow")
FLAKY_MODEL = "scripted/flaky"  # served only by the account that goes down and comes back
BROKEN_MODEL = "scripted/broken"  # served only by an account that never answers
POLL_S = 0.05


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


async def rug_pull(p: Platform, bank: BankMcpServer) -> None:
    """Before any run: each keyed tenant registers the bank server and publishes ``banker``
    (allowed ``wire_money``) against its tool list; then the bank serves ``wire_money`` with
    another description and schema, and each tenant re-pins the new list (for some other
    agent). Every banker version was published against the old list: the gateway must
    refuse each of its calls, and any call the bank receives is an escape."""
    async with McpToolClient() as mcp:
        for tenant in p.tenants["keyed"]:
            await servers.register(p.db, mcp, tenant, name="bank", url=bank.url,
                                   honours_idempotency_keys=True)
            await p.agent(tenant, "banker", tools=("wire_money",))
        bank.rug_pull()
        for tenant in p.tenants["keyed"]:
            await servers.repin(p.db, mcp, tenant, "bank")


async def rug_pulled(p: Platform, rng: random.Random) -> Started:
    """A version whose tool changed under it on its server since it was published (see
    :func:`rug_pull`): its call is refused, the model is told, the bank never called."""
    return await p.start("keyed", "banker", scripted(
        call("wire_money", amount=rng.randrange(1, 10_000), to="acct-666"),
        answer("{last_tool_result}")))


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


# The weights keep the scenarios that need a sandbox (code, activities, the browser: seconds
# of sandbox and Chromium each, where the others take milliseconds) to ~1.8% of the runs.
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
    Scenario("rug_pulled", 20, (Mark("ToolCompleted", {"tool": "wire_money"}, has=("error",)),
                                Mark("RunFinished")), rug_pulled),
)
