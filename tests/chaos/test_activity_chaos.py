"""Chaos for tenants' activities (ADRs 0012, 0013), on real sandboxes of every backend
and a real Postgres.

Poison payloads — a segfault (``ctypes``), a memory bomb, a fork bomb, an endless loop and
``rm -rf /`` — run as one tenant's tasks while another tenant enqueues steady tasks: every
killing payload is retried on a fresh sandbox each time and dead-lettered after its sandbox
deaths; ``rm -rf /`` only does what the sandbox lets it and ends honestly; the poison never
holds more than its tenant's one activity slot; the neighbour's tasks complete throughout
with their right results; the dispatcher's loop never ends and it keeps claiming.

A dispatcher SIGKILLed mid-attempt (``tenantry activity-worker`` as a real process): its
sandboxes do not survive it (their host processes are gone), and a second dispatcher takes
the task at its first claim — its session lock gone with it (ADR 0018), well before the
production lease of 30 s ends — and completes it as attempt 2, the first recorded as
abandoned, not completed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import textwrap
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tenantry.activities import Bundle
from tenantry.activities.code.versions import ActivitySettings
from tenantry.activities.tasks.store import ActivityStore
from tenantry.db import Database
from tenantry.ids import RunId, TenantId
from tenantry.runs import log
from tenantry.sandbox import Binding, Limits, Sandbox
from tenantry.sandbox.backends.cgroups import PARENT, ROOT
from tenantry.sandbox.backends.hostwide import host_dir
from tenantry.sandbox.pool import PooledDriver
from tenantry.store import Admitted, RunStatus, WorkflowStore
from tenantry.vault import MasterKey
from tests.support.activities import FORK_BOMB, LOOP, MEMORY_BOMB, SEGFAULT
from tests.support.activity_rig import WITHIN, ActivityRig, settled_now
from tests.support.harness import tenantry_command, worker_env
from tests.support.sandbox import (
    BACKENDS,
    BOMBS_LOSE_THE_SANDBOX,
    TEST_LIMITS,
    require,
    sandbox_settings,
)
from tests.support.waiting import until

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900)]

POISONER = TenantId.parse("tenant-poisoner")
NEIGHBOUR = TenantId.parse("tenant-neighbour")


def _registry() -> Path:
    """The host-wide sandbox registry (``sandbox/backends/registry.py``): a record per
    live sandbox, naming the worker process that owns it."""
    return host_dir("sandboxes")


#: As far as it can: then it says what is left of the top of the tree it tried to delete.
RM_RF = """
    import os, shutil
    def handle(value, context):
        shutil.rmtree("/", ignore_errors=True)
        return sorted(os.listdir("/"))
"""
GOOD = """
    def handle(value, context):
        return {"ok": value}
"""


@dataclass(frozen=True)
class Poison:
    code: str
    errors: tuple[str, ...]  # the error codes its attempts may end with
    deaths: int  # the version's max_sandbox_deaths
    #: Only the loop and the fork bomb are ended by it; for the others it is a backstop,
    #: long enough for a loaded 2-core host (a guest's Python starts in seconds under TCG).
    timeout_s: float = 120.0


#: The segfault keeps the default of three deaths; the rest two, to save time. A fork
#: bomb's processes spin to the timeout or, in a small guest, run it out of memory first.
POISONS = {
    "segfault": Poison(SEGFAULT, ("crashed: SIGSEGV",), ActivitySettings().max_sandbox_deaths),
    "memory": Poison(MEMORY_BOMB, ("killed",), 2),
    "fork": Poison(FORK_BOMB, ("timeout", "killed"), 2, timeout_s=3.0),
    "loop": Poison(LOOP, ("timeout",), 2, timeout_s=3.0),
}
#: rm -rf / ends on its own: walking the whole tree is slow under gVisor's ptrace platform.
RM_RF_TIMEOUT_S = 600.0
#: TCG is slow: the microVM runs the three that matter most there.
KINDS = {"microvm": ("segfault", "memory", "loop")}
ALL_KINDS = (*POISONS, "rm_rf")


@dataclass
class Watch:
    """What the background observers saw while the poison ran."""

    poisoner_running_max: int = 0
    neighbour_done: list[tuple[int, Any, int]] = field(default_factory=list)  # i, result,
    # the poison tasks still unsettled when it finished


@pytest.fixture
async def chaos(db: Database, driver: PooledDriver) -> ActivityRig:
    """Versions may be tried ten times: a poison's sandbox deaths dead-letter it first.
    Each test stops its own dispatchers (when it stops them is what some tests are about)."""
    for tenant in (POISONER, NEIGHBOUR):
        await WorkflowStore(db).ensure_tenant(tenant)
    return ActivityRig(db, driver, defaults={"timeout_s": 120.0, "max_attempts": 10})


@contextlib.asynccontextmanager
async def observing(chaos: ActivityRig, admin_conn: asyncpg.Connection, poison: list[RunId],
                    ) -> AsyncIterator[Watch]:
    """While the body runs: the neighbour enqueues one steady task after another (each
    checked for its result), and the poisoner's running tasks are counted."""
    watch = Watch()
    stop = asyncio.Event()

    async def unsettled() -> int:
        return sum([not settled_now(await chaos.store.get(POISONER, t)) for t in poison])

    async def neighbour() -> None:
        i = 0
        while not stop.is_set():
            task = await chaos.enqueue(NEIGHBOUR, "steady", i)
            done = await chaos.settled(NEIGHBOUR, task)
            assert done.status is RunStatus.FINISHED, done
            watch.neighbour_done.append((i, done.result, await unsettled()))
            i += 1

    async def slots() -> None:
        while not stop.is_set():
            running = await admin_conn.fetchval(
                "SELECT count(*) FROM runs WHERE tenant_id = $1 AND kind = 'activity'"
                " AND status = 'running'", POISONER.value)
            watch.poisoner_running_max = max(watch.poisoner_running_max, running)
            await asyncio.sleep(0.05)

    observers = [asyncio.create_task(neighbour()), asyncio.create_task(slots())]
    try:
        yield watch
    finally:
        stop.set()
        # The neighbour's task in flight finishes (liveness), then the observers end.
        await asyncio.gather(*observers)


async def test_poison_payloads_are_dead_lettered_while_another_tenant_keeps_completing(
    chaos: ActivityRig, admin_conn: asyncpg.Connection,
) -> None:
    backend = chaos.driver.backend
    kinds = KINDS.get(backend, ALL_KINDS)
    await chaos.store.set_activity_slots(POISONER, 1)
    for kind in kinds:
        if kind == "rm_rf":
            await chaos.publish(POISONER, kind, RM_RF, timeout_s=RM_RF_TIMEOUT_S)
        else:
            p = POISONS[kind]
            await chaos.publish(POISONER, kind, p.code, timeout_s=p.timeout_s,
                                max_sandbox_deaths=p.deaths)
    await chaos.publish(POISONER, "fine", GOOD)
    await chaos.publish(NEIGHBOUR, "steady", GOOD)
    poison = {kind: await chaos.enqueue(POISONER, kind) for kind in kinds}
    dispatcher = chaos.dispatcher(slots=3)
    try:
        async with observing(chaos, admin_conn, list(poison.values())) as watch:
            settled = {kind: await chaos.settled(POISONER, task)
                       for kind, task in poison.items()}
            assert dispatcher.alive, "the dispatcher's loop ended during the poison"
        # The dispatcher still claims: the poisoner's next, healthy task completes.
        after = await chaos.settled(POISONER, await chaos.enqueue(POISONER, "fine", "after"))
        assert after.status is RunStatus.FINISHED and after.result == {"ok": "after"}, after
        assert dispatcher.alive
    finally:
        await dispatcher.stop()

    sandboxes: list[str] = []
    for kind, task in poison.items():
        attempts = await chaos.attempts(POISONER, task)
        sandboxes += [a["sandbox_id"] for a in attempts]
        got = settled[kind]
        if kind == "rm_rf":
            # It does not kill its sandbox on any backend here: its code returns what it
            # could not delete (the read-only system folders), a plain completion.
            assert got.status is RunStatus.FINISHED, (got, attempts)
            assert [a["status"] for a in attempts] == ["completed"], attempts
            assert isinstance(got.result, list) and "usr" in got.result, got.result
            continue
        p = POISONS[kind]
        errors = ("sandbox_lost",) if backend in BOMBS_LOSE_THE_SANDBOX \
            and kind in ("memory", "fork") else p.errors
        assert got.dead_lettered and got.status is RunStatus.WAITING, (kind, got, attempts)
        assert got.error["sandbox_deaths"] == p.deaths, (kind, got.error)
        assert [a["attempt"] for a in attempts] == list(range(1, p.deaths + 1)), attempts
        for a in attempts:
            assert a["status"] == "retryable" and a["killed_sandbox"], (kind, a)
            assert a["error"].startswith(errors), (kind, a)
    # A fresh sandbox for every attempt of every task: never the same one twice, and
    # each one destroyed — the host-wide registry no longer lists any of them.
    assert len(set(sandboxes)) == len(sandboxes), sandboxes
    left = [s for s in sandboxes if (_registry() / f"{s}.json").exists()]
    assert left == [], f"sandboxes of poison attempts still registered: {left}"

    # The neighbour's tasks all finished with their own results, and they did so while
    # the poison was still running, not only after it.
    assert watch.neighbour_done, "the neighbour's tasks never completed"
    assert [r for _, r, _ in watch.neighbour_done] == [
        {"ok": i} for i, _, _ in watch.neighbour_done]
    during = [i for i, _, left in watch.neighbour_done if left > 0]
    assert len(during) >= 2, f"too few neighbour tasks ran beside the poison: {watch}"
    # The poison burnt its tenant's one slot and never more.
    assert watch.poisoner_running_max == 1, watch
    deadly = sum(kind != "rm_rf" for kind in kinds)
    assert dispatcher.outcomes["dead_lettered"] == deadly, dispatcher.outcomes
    assert dispatcher.outcomes["error"] == 0, dispatcher.outcomes


# ---------------------------------------------------------------- a dispatcher killed -9

#: The first attempt waits (the dispatcher is killed meanwhile); any later one returns at
#: once with the attempt number it was told.
WAITS_ON_ATTEMPT_1 = """
    import time
    def handle(value, context):
        if context.attempt == 1:
            time.sleep(3600)
        return {"attempt": context.attempt, "key": context.idempotency_key}
"""
#: Lease seconds per backend: the production default (None: 30 s) where it is cheapest
#: to wait, a short one on the others.
LEASES: dict[str, int | None] = {"bwrap": None, "gvisor": 3, "microvm": 3}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _sandboxes_of(worker_pid: int) -> dict[str, set[int]]:
    """Every sandbox the host-wide registry lists for that worker: its host processes (the
    one the backend started and every member of its cgroups)."""
    found: dict[str, set[int]] = {}
    for path in _registry().glob("*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("worker_pid") != worker_pid:
            continue
        pids = {int(entry[0]) for entry in record.get("processes") or ()}
        for name in record.get("cgroups") or ():
            procs = ROOT / "pids" / PARENT / str(name) / "cgroup.procs"
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in procs.read_text().split())
        found[path.name.removesuffix(".json")] = pids
    return found


def _worker_env(backend: str, tmp: Path, master: MasterKey, lease: int | None,
                ) -> dict[str, str]:
    settings = sandbox_settings(tmp, backend)
    return {**worker_env(tmp / "data", master_key=master.encoded(), lease_seconds=lease),
            "TENANTRY_SANDBOX_BACKEND": backend, "TENANTRY_SANDBOX_MIN_BOUNDARY": backend,
            "TENANTRY_SANDBOX_IMAGE_DIR": str(settings.sandbox_dir),
            "TENANTRY_SANDBOX_POOL_SIZE": "1",
            "TENANTRY_SANDBOX_MEMORY_MIB": str(TEST_LIMITS[backend].memory_mib)}


async def _activity_worker(env: dict[str, str], dsn: str, log: Path,
                           ) -> asyncio.subprocess.Process:
    with log.open("wb") as output:  # the child holds its own copy
        return await asyncio.create_subprocess_exec(
            *tenantry_command(), "activity-worker", "--database-url", dsn, "--slots", "2",
            stdin=asyncio.subprocess.DEVNULL, stdout=output, stderr=asyncio.subprocess.STDOUT,
            env=env, start_new_session=True)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_dispatcher_killed_mid_attempt_leaves_no_sandbox_and_the_task_completes(
    backend: str, db: Database, database_dsn: str, admin_conn: asyncpg.Connection,
    tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    require(backend)
    if backend == "microvm":
        request.getfixturevalue("guest_image")
    master = MasterKey.generate()
    await WorkflowStore(db).ensure_tenant(POISONER)
    store = ActivityStore(db)
    await store.publish(POISONER, "waits", Bundle(
        {"main.py": textwrap.dedent(WAITS_ON_ATTEMPT_1).encode()}, "main.py:handle"),
        ActivitySettings(timeout_s=60.0, backoff_s=0.0, max_attempts=3))
    queued = await store.enqueue(POISONER, "waits")
    assert isinstance(queued, Admitted)
    task = queued.task_id
    env = _worker_env(backend, tmp_path, master, LEASES[backend])
    first = await _activity_worker(env, database_dsn, tmp_path / "first.log")
    second: asyncio.subprocess.Process | None = None

    def logs() -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}"
                         for p in sorted(tmp_path.glob("*.log")))

    async def lease_expiry() -> Any:
        return await admin_conn.fetchval(
            "SELECT lease_expires_at FROM runs WHERE run_id = $1 AND status = 'running'",
            task.uuid)
    try:
        async def started() -> bool:
            assert first.returncode is None, logs()
            return await admin_conn.fetchval(
                "SELECT count(*) FROM run_events WHERE run_id = $1 AND type = $2",
                task.uuid, "ActivityStarted") == 1
        # The attempt has its sandbox (renewals also come while one is being made).
        await until(started, "the first dispatcher starts the attempt", WITHIN, logs)
        claimed_until = await lease_expiry()

        async def renewed() -> bool:
            assert first.returncode is None, logs()
            return await lease_expiry() != claimed_until
        # A renewal is the attempt's heartbeat: its sandbox is alive, the step in flight.
        await until(renewed, "the attempt's heartbeat renews the lease", WITHIN, logs)
        sandboxes = _sandboxes_of(first.pid)
        processes = set().union(*sandboxes.values())
        assert processes and all(_alive(p) for p in processes), sandboxes
        held_until = await lease_expiry()
        first.kill()
        await first.wait()

        # (a) Nothing of the dead dispatcher's sandboxes runs on: its guardian killed them
        # (the attempt's and the pool's), before any other dispatcher started.
        async def none_left() -> bool:
            return not any(_alive(p) for p in processes)
        await until(none_left, f"every {backend} sandbox process of the killed dispatcher "
                    "ended", 60, lambda: str({p: _alive(p) for p in processes}))

        # (b) Another dispatcher takes the task — at its first claim, the killed one's
        # session lock being gone (ADR 0018) — and completes it.
        second = await _activity_worker(env, database_dsn, tmp_path / "second.log")

        async def finished() -> bool:
            assert second is not None and second.returncode is None, logs()
            return (await store.get(POISONER, task)).status.terminal
        await until(finished, "the second dispatcher completes the task", WITHIN, logs)
    finally:
        for process in (first, second):
            if process is not None and process.returncode is None:
                process.send_signal(signal.SIGTERM)
                await asyncio.wait_for(process.wait(), 120)
    done = await store.get(POISONER, task)
    assert done.status is RunStatus.FINISHED, (done, logs())
    assert done.result == {"attempt": 2, "key": f"{task}:waits"}
    async with db.tenant_tx(POISONER) as conn:
        events = await log.read(conn, POISONER, task, limit=1000)
    attempts = [e.data for e in events if e.type == "ActivityAttempted"]
    assert [a["attempt"] for a in attempts] == [1, 2], attempts
    abandoned, completed = attempts
    if LEASES[backend] is None:  # (a short lease may end before the second one is up)
        # Taken while the killed dispatcher's 30 s lease still ran: not by lease expiry.
        recorded = await admin_conn.fetchval(
            "SELECT created_at FROM run_events WHERE run_id = $1 "
            "AND type = 'ActivityAttempted' ORDER BY seq LIMIT 1", task.uuid)
        assert recorded < held_until, (recorded, held_until, logs())
    # The first attempt is in the log as abandoned — not completed, not a sandbox death —
    # with the sandbox it had, one of those the guardian killed.
    assert abandoned["status"] == "retryable" and not abandoned["killed_sandbox"], abandoned
    assert abandoned["error"].startswith("abandoned:"), abandoned
    assert abandoned["sandbox_id"] in sandboxes, (abandoned, sandboxes)
    assert completed["status"] == "completed", completed
    assert completed["sandbox_id"] != abandoned["sandbox_id"]
    assert second is not None and second.returncode == 0, logs()


async def test_an_attempt_cut_short_by_a_stop_is_recorded_as_abandoned(
    chaos: ActivityRig, admin_conn: asyncpg.Connection,
) -> None:
    """A graceful stop (a deploy) cancels the attempt in flight: the task's next holder
    records it as abandoned and runs the next attempt with the next number."""
    await chaos.publish(POISONER, "waits", WAITS_ON_ATTEMPT_1, timeout_s=60.0)
    task = await chaos.enqueue(POISONER, "waits")
    first = chaos.dispatcher(slots=1)
    try:
        async def started() -> bool:
            return await admin_conn.fetchval(
                "SELECT count(*) FROM run_events WHERE run_id = $1 AND type = $2",
                task.uuid, "ActivityStarted") == 1
        await until(started, "the first attempt has its sandbox", WITHIN)
    finally:
        await first.stop()
    second = chaos.dispatcher(slots=1)
    try:
        done = await chaos.settled(POISONER, task)
    finally:
        await second.stop()
    assert done.status is RunStatus.FINISHED, done
    assert done.result == {"attempt": 2, "key": f"{task}:waits"}
    abandoned, completed = await chaos.attempts(POISONER, task)
    assert (abandoned["attempt"], abandoned["status"], abandoned["killed_sandbox"]) == (
        1, "retryable", False), abandoned
    assert abandoned["error"].startswith("abandoned:"), abandoned
    assert (completed["attempt"], completed["status"]) == (2, "completed"), completed
    assert second.outcomes == {"retried": 1, "completed": 1}, second.outcomes


class SlowPool:
    """The session's driver behind a gate: each ``create`` waits until the test opens it,
    as an empty pool does while a sandbox boots (a cold start, a microVM under TCG)."""

    def __init__(self, driver: PooledDriver) -> None:
        self.driver = driver
        self.backend = driver.backend
        self.waiting = asyncio.Event()
        self.gate = asyncio.Event()

    async def create(self, binding: Binding, limits: Limits) -> Sandbox:
        self.waiting.set()
        await self.gate.wait()
        return await self.driver.create(binding, limits)

    async def close(self) -> None:
        """The session's driver outlives the test."""


async def test_the_lease_is_renewed_while_the_attempts_sandbox_is_made(
    chaos: ActivityRig, admin_conn: asyncpg.Connection,
) -> None:
    """A sandbox that takes longer than the lease to come (here: past two whole leases)
    must not let the lease expire: another claim would run the attempt a second time."""
    await chaos.publish(POISONER, "fine", GOOD)
    task = await chaos.enqueue(POISONER, "fine", "slow pool")
    pool = SlowPool(chaos.driver)
    dispatcher = chaos.dispatcher(driver=pool, slots=2, lease_seconds=3.0)
    try:
        await asyncio.wait_for(pool.waiting.wait(), WITHIN)
        claim = await admin_conn.fetchrow(
            "SELECT lease_epoch, lease_expires_at FROM runs WHERE run_id = $1", task.uuid)

        async def renewed_past_two_leases() -> bool:
            row = await admin_conn.fetchrow(
                "SELECT lease_epoch, lease_expires_at, now() AS now FROM runs"
                " WHERE run_id = $1", task.uuid)
            assert row["lease_epoch"] == claim["lease_epoch"], "claimed again meanwhile"
            return bool(row["now"] > claim["lease_expires_at"] + timedelta(seconds=3)
                        and row["lease_expires_at"] > row["now"])
        # A hang guard: without renewals the lease stays expired (and is claimed again).
        await until(renewed_past_two_leases, "the lease is renewed while the sandbox is "
                    "made", 60)
        pool.gate.set()
        done = await chaos.settled(POISONER, task)
    finally:
        pool.gate.set()
        await dispatcher.stop()
    assert done.status is RunStatus.FINISHED and done.result == {"ok": "slow pool"}, done
    [attempt] = await chaos.attempts(POISONER, task)
    assert (attempt["attempt"], attempt["status"]) == (1, "completed"), attempt
    assert dispatcher.outcomes == {"completed": 1}, dispatcher.outcomes
