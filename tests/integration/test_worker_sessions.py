"""Worker sessions (ADR 0018): a registered worker whose session lock is gone loses its runs
at the next claim, long before its lease ends; a live one (even one whose lease is long)
keeps them; registration never waits on a taken key or id."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import asyncpg
import pytest

from tenantry import __version__
from tenantry.db import Database
from tenantry.db.fleet import read_fleet
from tenantry.db.release import Fleet, Release
from tenantry.errors import LeaseLost
from tenantry.ids import TenantId
from tenantry.runs import lease as leases
from tenantry.runs import liveness, log
from tenantry.runs.events import ModelReplied
from tenantry.runs.worker import Worker
from tests.support.activities import queued_task
from tests.support.api import Api
from tests.support.db import login_dsn
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes

Connect = Callable[[], Awaitable[asyncpg.Connection]]


@pytest.fixture
async def sessions(database_dsn: str) -> AsyncIterator[Connect]:
    """Connections as a worker opens its session connection: the login, as the app role."""
    opened: list[asyncpg.Connection] = []

    async def connect() -> asyncpg.Connection:
        conn = await asyncpg.connect(login_dsn(database_dsn),
                                     server_settings={"role": "tenantry_app"})
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        await conn.close()


def keys(*values: int) -> Callable[[], int]:
    it: Iterator[int] = iter(values)
    return lambda: next(it)


async def _die(admin: asyncpg.Connection, conn: asyncpg.Connection) -> None:
    """The session's backend ends as when its process is killed; returns once it is gone."""
    assert await admin.fetchval("SELECT pg_terminate_backend($1, 10000)",
                                conn.get_server_pid())


async def _runs(api: Api, count: int) -> str:
    tenant, h = await api.tenant()
    agent = await api.agent(h)
    for i in range(count):
        await api.start(h, agent, f"run {i}")
    return tenant


async def test_a_dead_workers_runs_are_taken_at_once_and_a_live_ones_are_not(
    api: Api, db: Database, admin_conn: asyncpg.Connection, sessions: Connect,
) -> None:
    tenant = await _runs(api, 3)
    a = await sessions()
    await liveness.register(a, "worker-a")
    held = await leases.claim(db, "worker-a", 10, 30.0)  # a 30 s lease
    assert len(held) == 3
    # worker-a is alive (its lock is held): a claim takes nothing of it.
    assert await leases.claim(db, "worker-b", 10, 30.0) == []

    await _die(admin_conn, a)
    # Dead: its runs are taken while their leases still have ~30 s to go, two per batch.
    first = await leases.claim(db, "worker-b", 2, 30.0)
    assert len(first) == 2
    assert await admin_conn.fetchval(
        "SELECT worker_id FROM worker_sessions") == "worker-a"  # one run left: kept
    second = await leases.claim(db, "worker-b", 2, 30.0)
    assert len(second) == 1
    assert {x.run for x in first + second} == {x.run for x in held}
    assert all(x.epoch == 2 for x in first + second)
    rows = await admin_conn.fetch(
        "SELECT lease_owner, lease_expires_at > now() + interval '20 s' AS long "
        "FROM runs WHERE status = 'running'")
    assert [tuple(r) for r in rows] == [("worker-b", True)] * 3
    # No run of it left: forgotten.
    assert await admin_conn.fetchval("SELECT count(*) FROM worker_sessions") == 0
    # What worker-a still had in flight is refused: the epoch moved on.
    stale = ModelReplied("stale", [], {}, "openai", "a", "m", 0, "p", 0.0)
    async with db.tenant_tx(TenantId(tenant)) as conn:
        with pytest.raises(LeaseLost):
            await log.append(conn, TenantId(tenant), held[0].run, stale, epoch=held[0].epoch)


async def test_a_worker_whose_session_dropped_unnoticed_does_not_take_its_own_runs(
    api: Api, db: Database, admin_conn: asyncpg.Connection, sessions: Connect,
) -> None:
    """Between its lock connection dropping and the worker noticing, its own claim must not
    read it as dead and void its runs' epochs under the steps it is taking."""
    await _runs(api, 2)
    a = await sessions()
    await liveness.register(a, "worker-a")
    held = await leases.claim(db, "worker-a", 1, 30.0)
    await _die(admin_conn, a)
    [queued] = await leases.claim(db, "worker-a", 10, 30.0)  # only the queued run
    assert queued.run not in {x.run for x in held} and queued.epoch == 1
    rows = await admin_conn.fetch("SELECT lease_owner, lease_epoch FROM runs")
    assert [tuple(r) for r in rows] == [("worker-a", 1)] * 2
    # Another worker's claim still reads it as dead and takes both.
    taken = await leases.claim(db, "worker-b", 10, 30.0)
    assert sorted(x.epoch for x in taken) == [2, 2]


async def test_an_unregistered_or_frozen_owner_keeps_its_runs_until_the_lease_ends(
    api: Api, db: Database, admin_conn: asyncpg.Connection, sessions: Connect,
) -> None:
    await _runs(api, 2)
    a = await sessions()
    await liveness.register(a, "worker-a")
    [frozen] = await leases.claim(db, "worker-a", 1, 30.0)
    [unregistered] = await leases.claim(db, "worker-x", 1, 30.0)  # never registered
    assert await leases.claim(db, "worker-b", 10, 30.0) == []
    # Past their leases both move, as they always did (a frozen worker still holds its
    # lock: only the lease bounds it).
    await admin_conn.execute("UPDATE runs SET lease_expires_at = now() - interval '1 s'")
    taken = await leases.claim(db, "worker-b", 10, 30.0)
    assert {x.run for x in taken} == {frozen.run, unregistered.run}
    assert await admin_conn.fetchval("SELECT worker_id FROM worker_sessions") == "worker-a"


async def test_registration_never_waits_on_a_taken_key_or_id(
    admin_conn: asyncpg.Connection, sessions: Connect,
) -> None:
    a = await sessions()
    assert await liveness.register(a, "worker-a", keys=keys(12345)) == liveness.Session(
        "worker-a", 12345)
    # The key is held by a live session: another is taken.
    b = await sessions()
    assert (await liveness.register(b, "worker-b", keys=keys(12345, 777))).key == 777
    # worker-a dies with a run-less row left behind: its key is free in Postgres but still
    # registered to it, so a new worker must not take it (it would make worker-a look alive).
    await _die(admin_conn, a)
    c = await sessions()
    assert (await liveness.register(c, "worker-c", keys=keys(12345, 888))).key == 888
    held = await admin_conn.fetch(
        "SELECT objid, pid FROM pg_locks WHERE locktype = 'advisory' AND classid = $1 "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        liveness.LOCK_CLASS)
    assert {(r["objid"], r["pid"]) for r in held} == {
        (777, b.get_server_pid()), (888, c.get_server_pid())}  # c let 12345 go
    # A live worker's id: a first registration takes a new id, or fails without one.
    d = await sessions()
    assert await liveness.register(d, "worker-b", keys=keys(999),
                                   new_id=lambda: "worker-d") == liveness.Session(
        "worker-d", 999)
    with pytest.raises(liveness.RegistrationFailed):
        await liveness.register(await sessions(), "worker-b", keys=keys(1001))
    # worker-b's connection drops; it comes back under its id and key.
    await _die(admin_conn, b)
    b2 = await sessions()
    assert await liveness.register(b2, "worker-b", rejoin=True, keys=keys(777)) == (
        liveness.Session("worker-b", 777))
    rows = await admin_conn.fetch("SELECT worker_id, lock_key FROM worker_sessions "
                                  "ORDER BY worker_id")
    assert [tuple(r) for r in rows] == [("worker-a", 12345), ("worker-b", 777),
                                        ("worker-c", 888), ("worker-d", 999)]


LOCK_HOLDER = """SELECT l.pid FROM pg_locks l JOIN worker_sessions s ON l.objid = s.lock_key::oid
                 WHERE l.locktype = 'advisory' AND l.classid = $1 AND l.objsubid = 2
                   AND l.database = (SELECT oid FROM pg_database
                                     WHERE datname = current_database())
                   AND l.granted AND s.worker_id = $2"""


async def test_a_worker_whose_session_connection_drops_takes_its_lock_again(
    api: Api, fakes: Fakes, admin_conn: asyncpg.Connection, worker: Worker,
) -> None:
    """The worker's session backend is terminated mid-run (as a network blip or a restart
    would drop it): the worker registers again under its id and, with no other worker to
    take it meanwhile, drives the run to its end without a takeover."""
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["slow"])
    me = worker.engine.worker

    async def holder() -> int | None:
        pid: int | None = await admin_conn.fetchval(LOCK_HOLDER, liveness.LOCK_CLASS, me)
        return pid

    async def registered() -> bool:
        return await holder() is not None

    await until(registered, "the worker holds its session lock", 10)
    run_id = await api.start(h, agent, scripted(call("slow", seconds=1.0), answer("back")))

    async def in_the_call() -> bool:
        return any(c.tool == "slow" for c in fakes.mcp.calls)

    await until(in_the_call, "the worker calls the slow tool", 10)
    first = await holder()
    assert await admin_conn.fetchval("SELECT pg_terminate_backend($1, 10000)", first)

    async def back() -> bool:
        pid = await holder()
        return pid is not None and pid != first

    await until(back, "the worker takes its session lock again", 10)
    events = await api.events_until_end(h, run_id)
    assert [e["type"] for e in events] == [
        "RunCreated", "ModelReplied", "ToolCompleted", "ModelReplied", "RunFinished"]
    row = await admin_conn.fetchrow(
        "SELECT lease_epoch, answer #>> '{}' AS answer FROM runs")
    assert row is not None and tuple(row) == (1, "back")  # never taken from it


async def test_a_dead_dispatchers_activity_tasks_are_taken_at_once(
    db: Database, admin_conn: asyncpg.Connection, sessions: Connect,
) -> None:
    tenant = TenantId.parse("tenant-acme")
    task = await queued_task(db, tenant, "sync")
    claim = "SELECT run_id, lease_epoch FROM tenantry_claim_activities($1, 4, 30)"
    a = await sessions()
    await liveness.register(a, "activities-a")
    async with db.unscoped() as conn:
        assert [tuple(r) for r in await conn.fetch(claim, "activities-a")] == [
            (task.uuid, 1)]
        assert await conn.fetch(claim, "activities-b") == []  # a is alive
        await _die(admin_conn, a)
        assert [tuple(r) for r in await conn.fetch(claim, "activities-b")] == [
            (task.uuid, 2)]


async def test_each_worker_registers_its_release_and_only_live_ones_are_counted(
    admin_conn: asyncpg.Connection, sessions: Connect,
) -> None:
    """What `tenantry migrate --status` and the console count (migration 0041): this
    release's workers name theirs; a 0.1.0 worker, registered through 0.1.0's own function
    (which names no release: the column's default says 0.1.0), is counted as 0.1.0; a
    worker whose session is gone is not connected. (A real 0.1.0 worker on an upgraded
    database: tests/chaos/test_rolling_upgrade.py.)"""
    this = await sessions()
    await liveness.register(this, "worker-this", keys=keys(101))
    old = await sessions()
    # What 0.1.0's tenantry_register_worker did (its migration 0026): the session lock, then
    # the row without a release.
    assert await old.fetchval("SELECT pg_try_advisory_lock($1, 102)", liveness.LOCK_CLASS)
    await admin_conn.execute(
        "INSERT INTO worker_sessions (worker_id, lock_key) VALUES ('worker-old', 102)")
    newer = await sessions()
    major, minor = Release.parse(__version__).line
    next_release = f"{major}.{minor + 1}.0"  # the release after this code's
    assert await newer.fetchval("SELECT tenantry_register_worker_v2($1, $2, false, $3)",
                                "worker-newer", 103, next_release) == "registered"

    assert {r["worker_id"]: r["release"] for r in await admin_conn.fetch(
        "SELECT worker_id, release FROM worker_sessions")} == {
        "worker-this": __version__, "worker-old": "0.1.0", "worker-newer": next_release}
    expected = Counter({__version__: 1}) + Counter({"0.1.0": 1, next_release: 1})
    assert _workers(await read_fleet(admin_conn)) == expected

    await _die(admin_conn, old)
    assert _workers(await read_fleet(admin_conn)) == expected - Counter({"0.1.0": 1})


def _workers(fleet: Fleet) -> Counter[str]:
    return Counter({str(c.release): c.workers for c in fleet.releases if c.workers})


async def test_a_contracted_database_answers_a_0_1_0_worker_with_the_line_saying_why(
    admin_conn: asyncpg.Connection, sessions: Connect,
) -> None:
    """Contract step 0001 (this test's database was migrated from empty, so it has its
    contract steps): what is left of 0.1.0's registration refuses it in one line naming the
    release that contracted the database, and registers nothing. 0.1.0 logs the line and
    claims nothing (tests/chaos/test_rolling_upgrade.py runs a real one)."""
    old = await sessions()
    with pytest.raises(asyncpg.RaiseError) as refused:
        await old.fetchval("SELECT tenantry_register_worker($1, $2, false)", "worker-old", 102)
    assert str(refused.value) == (
        f"this database was contracted by release {__version__} (tenantry migrate "
        f"--contract), which removed what releases before {_line(__version__)} use: this "
        "is release 0.1.0; run a release the database serves ('tenantry migrate --status' "
        "says which)")
    assert await admin_conn.fetchval("SELECT count(*) FROM worker_sessions") == 0
    assert not await admin_conn.fetchval(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1 "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        liveness.LOCK_CLASS)


def _line(release: str) -> str:
    return ".".join(release.split(".")[:2])
