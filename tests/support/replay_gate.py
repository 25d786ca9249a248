"""The replay gate: many varied runs recorded on a real platform, then every one
replayed on the current code (invariant 11), and every call the tool server received checked
against its run's tool rules (tests/support/escapes.py). benchmarks/replay.py runs it at
10,000 runs, in CI too (`make gate`, after the suite); tests/integration/test_replay_gate.py
plays each scenario once and records the corpus's gate-<scenario>.json files from them. The
scenarios are tests/support/replay_scenarios.py's.

The platform is real: the database given (its superuser DSN), worker loops in this process
(tests.support.worker, the engine ``tenantry worker`` runs), the model servers over HTTP — the
main one given, a flaky one and a broken one started here because scenarios take them down —
and the MCP test server given, registered as honouring idempotency keys for every tenant but
those of the keyless role, for which it is registered as not honouring them. When the plan
has a scenario marked ``sandbox``, its workers get bwrap sandboxes, and an activity
dispatcher and a test web for the browser run beside them (tests/support/gate_sandboxes.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import asyncpg

from tenantry.db import Database
from tenantry.ids import RunId, TenantId
from tenantry.ledger.prices import PriceBook
from tenantry.models import accounts
from tenantry.runs.replay import Difference, export_runs, replay
from tenantry.scheduler.policy import TenantPolicy, set_policy
from tenantry.tenants import service as tenants
from tenantry.testing.fake_model import FakeModelServer
from tenantry.tools import servers
from tenantry.tools.mcp_client import McpToolClient
from tests.support.bank_server import BankMcpServer
from tests.support.db import login_dsn
from tests.support.escapes import Escapes, ServerCall, count_escapes
from tests.support.gate_sandboxes import BROWSER_POLICY, GateSandboxes, gate_sandboxes
from tests.support.replay_scenarios import (
    BROKEN_MODEL,
    ENDED,
    FLAKY_MODEL,
    POLL_S,
    SCENARIOS,
    Outage,
    Platform,
    Scenario,
    Started,
    Watcher,
    rug_pull,
)
from tests.support.tools import DiesAfterTheCall
from tests.support.worker import running_worker

Progress = Callable[[str], None]


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
    # What the rug-pulled bank server received (replay_scenarios.rug_pull): each an escape.
    bank_calls: list[tuple[str, dict[str, object], str | None]] = field(default_factory=list)

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
                    BankMcpServer() as bank, _watching(dsn) as watcher):
            broken.set_mode("down")
            await _register_models(db, model_url, flaky.base_url, broken.base_url)
            outage = Outage(flaky, watcher)
            platform = Platform(db, await _provision(db, mcp_url, tenants_per_role), watcher,
                                outage)
            await rug_pull(platform, bank)  # before any worker lists the bank's tools
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
            corpus.bank_calls = list(bank.calls)
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
    verdict.escapes.calls += len(corpus.bank_calls)
    for tool, arguments, _ in corpus.bank_calls:  # the bank records no key: each one counts
        verdict.escapes.escape(f"bank: {tool!r} {arguments} reached a server whose tool "
                               "changed after every version that may call it was published")
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
