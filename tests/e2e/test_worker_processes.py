"""`tenantry worker --processes 2` as an operator runs it: a supervisor and two worker
processes on a real database, the fake model over loopback, killed and stopped with real
signals. What the operator sees: runs finish; a worker process that dies is replaced (a new
pid, a new worker id) and its runs still finish; SIGTERM stops everything with exit 0 and
hands every run in flight back; SIGKILL of the supervisor leaves no worker process behind."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import orjson
import pytest

from tenantry.testing.fake_model import FakeModelServer
from tests.support.api import TEST_MASTER_KEY, Api
from tests.support.db import run_statuses
from tests.support.harness import tenantry_command, worker_env
from tests.support.scripts import answer, scripted
from tests.support.waiting import until

pytestmark = pytest.mark.e2e


class Supervised:
    """A `tenantry worker --processes 2` process and what it logged (JSON lines)."""

    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self.process = process
        self.log_path = log

    def lines(self, msg: str) -> list[dict[str, object]]:
        found = []
        for raw in self.log_path.read_bytes().splitlines():
            with contextlib.suppress(ValueError):
                line = orjson.loads(raw)
                if isinstance(line, dict) and line.get("msg") == msg:
                    found.append(line)
        return found

    def children(self) -> list[int]:
        """Pids of the worker processes started and not seen exiting."""
        exited = {line["pid"] for line in self.lines("worker process exited")}
        return [int(str(line["pid"])) for line in self.lines("worker process started")
                if line["pid"] not in exited]

    def workers(self) -> list[str]:
        return [str(line["worker"]) for line in self.lines("worker started")]

    def tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


@pytest.fixture
async def model() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as server:
        yield server


@pytest.fixture
def supervised(database_dsn: str, model: FakeModelServer, tmp_path: Path) -> Iterator[Supervised]:
    log = tmp_path / "worker.err"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [*tenantry_command(), "worker", "--processes", "2", "--database-url", database_dsn,
             "--model-base-url", model.base_url, "--concurrency", "20"],
            env=worker_env(tmp_path / "data", master_key=TEST_MASTER_KEY.encoded()),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    running = Supervised(process, log)
    try:
        yield running
    finally:
        if process.poll() is None:
            process.kill()  # its children die with it (PR_SET_PDEATHSIG)
        process.wait()


async def both_started(worker: Supervised, count: int = 2) -> None:
    async def started() -> bool:
        assert worker.process.poll() is None, worker.tail()
        return len(worker.workers()) >= count
    await until(started, f"{count} worker processes claiming", 90, details=worker.tail)


def gone(pid: int) -> bool:
    """Exited (a zombie waiting for a reaper counts: it runs nothing)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def start_runs(api: Api, count: int, *, delay_ms: int = 0) -> tuple[dict[str, str],
                                                                         list[str]]:
    _, headers = await api.tenant()
    agent = await api.agent(headers)
    step = {**answer("done"), "delay_ms": delay_ms} if delay_ms else answer("done")
    runs = [await api.start(headers, agent, scripted(step)) for _ in range(count)]
    return headers, runs


async def all_finished(admin_conn: asyncpg.Connection, runs: list[str]) -> bool:
    return await run_statuses(admin_conn, runs) == {"finished": len(runs)}


async def test_two_processes_run_runs_and_a_killed_one_is_replaced(
    api: Api, admin_conn: asyncpg.Connection, supervised: Supervised,
) -> None:
    await both_started(supervised)
    first = supervised.workers()
    assert len(set(first)) == 2  # each process its own worker id
    _, runs = await start_runs(api, 20)
    await until(lambda: all_finished(admin_conn, runs), "20 runs finished", 60,
                details=supervised.tail)

    victim = supervised.children()[0]
    os.kill(victim, signal.SIGKILL)
    # In flight when it dies: 20 runs whose model answers in 1.5 s, claimed by both.
    _, more = await start_runs(api, 20, delay_ms=1500)
    await both_started(supervised, count=3)
    replacement = [pid for pid in supervised.children() if pid != victim]
    assert victim not in supervised.children() and len(replacement) == 2
    assert supervised.workers()[2] not in first  # a new worker id
    exited = supervised.lines("worker process exited")
    assert exited[0]["pid"] == victim and exited[0]["signal"] == "SIGKILL"
    # The lease (2 s here) returns what the dead one held; the rest finish where they are.
    await until(lambda: all_finished(admin_conn, more), "runs finished after the kill", 90,
                details=supervised.tail)


async def test_sigterm_stops_every_process_with_exit_0_and_releases_leases(
    api: Api, admin_conn: asyncpg.Connection, supervised: Supervised,
) -> None:
    await both_started(supervised)
    children = supervised.children()
    # Model calls that outlast the drain: in flight when the stop comes.
    _, runs = await start_runs(api, 10, delay_ms=60_000)

    async def all_running() -> bool:
        return await run_statuses(admin_conn, runs) == {"running": 10}
    await until(all_running, "10 runs in flight", 60, details=supervised.tail)
    supervised.process.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(supervised.process.wait, 60) == 0, supervised.tail()
    assert all(gone(pid) for pid in children)
    held = await admin_conn.fetchval(
        "SELECT count(*) FROM runs WHERE lease_owner IS NOT NULL OR status = 'running'")
    assert held == 0  # handed back at once, not left for the lease to expire
    assert [line["exit_code"] for line in supervised.lines("worker process exited")] == [0, 0]


async def test_sigkill_of_the_supervisor_leaves_no_worker_process(
    supervised: Supervised,
) -> None:
    await both_started(supervised)
    children = supervised.children()
    assert len(children) == 2
    supervised.process.kill()
    supervised.process.wait()

    async def none_left() -> bool:
        return all(gone(pid) for pid in children)
    await until(none_left, "no worker process outlives its supervisor", 10,
                details=supervised.tail)
