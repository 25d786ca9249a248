"""Chaos: a cell's Postgres backed up with pgBackRest while runs write, and restored to a point
in time into a new cluster (ADR 0036, docs/how-to/backup.md).

A test-owned cluster archives its WAL into a test-owned pgBackRest repository. A real
``tenantry api`` and a ``tenantry worker`` (production settings) drive runs of many keyed
MCP calls, scripted by the fake model server. While they write, a full backup is taken; they
keep writing; the test records a point in time T and which steps were committed by then;
they keep writing past T; the worker is SIGKILLed and the cell's last WAL archived. Then
``tenantry backup restore --to T`` lays the backup into a new directory, a new Postgres
starts on it (replaying the archive up to T), and a new worker carries on.

What a user would notice, asserted: every step committed before T is in the restored cell
and none committed after T is (commit timestamps say which side of T each landed on); the
restored cell takes a worker, and every run finishes there exactly once — each planned
effect performed once at the tool server although the steps after T ran twice (the
restored runs call again with the keys their logs derive, which the server already saw).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
import pytest

from tenantry.ids import RunId
from tenantry.testing.fake_model import FakeModelServer
from tenantry.testing.mcp_server import EffectsMcpServer
from tests.support.api import TEST_MASTER_KEY
from tests.support.api_process import api_process
from tests.support.harness import (
    PlannedRun,
    WorkerFleet,
    create_runs,
    create_tenants,
    ended_runs,
    tenantry_command,
    verify,
    worker_env,
)
from tests.support.outage import ended_at_least, migrate
from tests.support.pgbackrest import BackupRepo
from tests.support.pgcluster import PgCluster, as_cluster_owner
from tests.support.waiting import until

pytestmark = pytest.mark.chaos

RUNS = 24
TENANTS = 2
#: Keyed effect calls per run, one per model step, each reply DELAY_MS after its request:
#: 5 s of steps at least, so that the runs write before, during and after the backup (the
#: model holds its replies while the backup ends), before T and past it — about 6 steps of
#: theirs — and leave most of their work to the restored cell.
STEPS = 20
DELAY_MS = 250

Event = tuple[str, int]  # (run id, seq)


def long_run(index: int) -> PlannedRun:
    notes = [f"run{index}-effect{j}" for j in range(STEPS)]
    script = [*({"tool_calls": [{"name": "effect", "arguments": {"note": note}}],
                 "delay_ms": DELAY_MS} for note in notes),
              {"text": f"done {index}", "delay_ms": DELAY_MS}]
    return PlannedRun(index=index, calls=tuple(("effect",) for _ in notes),
                      script=tuple(script))


async def events(conn: asyncpg.Connection, where: str = "", *args: Any) -> set[Event]:
    rows = await conn.fetch(f"SELECT run_id, seq FROM run_events {where}", *args)
    return {(str(RunId(r["run_id"])), r["seq"]) for r in rows}


def committed_since(conn: asyncpg.Connection, since: Any, at_least: int,
                    ) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM run_events WHERE pg_xact_commit_timestamp(xmin) > $1",
            since)
        return count >= at_least
    return check


async def cli(*args: str, root: Path) -> str:
    """``tenantry ARGS`` as the clusters' owner (pgBackRest writes the restored files as the
    user it runs as); its stdout, or a failure with everything it said."""
    process = await asyncio.create_subprocess_exec(
        *as_cluster_owner([*tenantry_command(), *args]),
        env=worker_env(root / "cli-data", lease_seconds=None, pool_max=None),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await process.communicate()
    assert process.returncode == 0, f"tenantry {' '.join(args)}:\n{out.decode()}{err.decode()}"
    return out.decode()


@pytest.mark.timeout(300)
async def test_a_cell_restored_to_a_point_in_time_has_every_step_committed_by_then_and_none_after(
    mcp: EffectsMcpServer, model: FakeModelServer, tmp_path: Path,
) -> None:
    key = TEST_MASTER_KEY.encoded()
    began_s = time.monotonic()
    # Commit timestamps are the test's oracle only: which side of T each event landed on.
    source = PgCluster(tmp_path / "cell", settings={"track_commit_timestamp": "on"})
    repo = BackupRepo(tmp_path / "backup", source)
    source.settings.update(repo.archive_settings())
    source.init()
    repo.write_config()
    source.start()
    runs: dict[str, PlannedRun] = {}
    try:
        url = source.dsn()
        repo.create()
        await migrate(url, tmp_path)
        async with api_process(url, tmp_path / "api", master_key=key) as api, WorkerFleet(
            dsn=url, model_url=model.base_url, log_dir=tmp_path / "workers", size=1,
            concurrency=RUNS, lease_seconds=None, pool_max=None, master_key=key,
        ) as fleet, httpx2.AsyncClient(base_url=api.base_url, timeout=10) as client:
            await fleet.start()
            tenants = await create_tenants(client, api.operator, mcp.url, TENANTS)
            await create_runs(client, tenants, [long_run(i) for i in range(RUNS)], runs)
            loaded_s = time.monotonic() - began_s
            admin = await asyncpg.connect(url)
            try:
                def logs() -> str:
                    return f"{api.tail()}\n{fleet.tails()}"

                began = await admin.fetchval("SELECT clock_timestamp()")
                await until(committed_since(admin, began, RUNS), "the runs write", 60, logs)

                # A full backup while the runs write (pgBackRest's start-fast checkpoint,
                # the files copied, the WAL to make them consistent archived).
                before_backup = await admin.fetchval("SELECT clock_timestamp()")
                started = time.monotonic()
                backing_up = asyncio.create_task(
                    asyncio.to_thread(repo.run, "--type=full", "backup"))

                async def written_or_done() -> bool:
                    return backing_up.done() or await committed_since(
                        admin, before_backup, 2 * RUNS)()
                await until(written_or_done, "the runs write during the backup", 60, logs)
                # Then the model holds its replies until the backup ends, however long it
                # takes on this machine, so that the runs keep steps for after it.
                model.set_mode("hang")
                try:
                    await backing_up
                finally:
                    model.set_mode("ok")
                backup_s = time.monotonic() - started
                after_backup = await admin.fetchval("SELECT clock_timestamp()")
                during_backup = await admin.fetchval(
                    "SELECT count(*) FROM run_events WHERE pg_xact_commit_timestamp(xmin) "
                    "BETWEEN $1 AND $2", before_backup, after_backup)
                status = await cli("backup", "status", "--stanza", repo.stanza, "--config",
                                   str(repo.config), "--database-url", url, root=tmp_path)
                (backup,) = repo.info()["backup"]

                # Writing goes on; T is chosen once the backup can reach it (pgBackRest
                # records whole seconds: its end second must be over).
                async def restorable() -> bool:
                    now: float = await admin.fetchval(
                        "SELECT extract(epoch FROM clock_timestamp())")
                    return now > backup["timestamp"]["stop"] + 1
                await until(restorable, "the backup's end second passes", 10, logs)
                await until(committed_since(admin, after_backup, RUNS),
                            "the runs write after the backup", 60, logs)

                # T: every event visible now was committed (and acknowledged) before it.
                acknowledged = await events(admin)
                target = await admin.fetchval("SELECT clock_timestamp()")
                await until(committed_since(admin, target, RUNS), "the runs write past T",
                            60, logs)

                # The cell is lost mid-flight; what it wrote, committed either side of T.
                for worker in list(fleet.live):
                    await fleet.kill(worker)
                written = await events(admin)
                after_target = await events(
                    admin, "WHERE pg_xact_commit_timestamp(xmin) > $1", target)
                ended_before = await ended_runs(admin)
            finally:
                await admin.close()
        # Its last WAL segment goes to the archive (`check` switches it and waits).
        repo.run("check")
    finally:
        source.stop()

    # Restored into a new cluster, which replays the archive to T and opens there.
    restored = PgCluster(tmp_path / "restored")
    restored.root.mkdir()
    started = time.monotonic()
    said = await cli("backup", "restore", "--stanza", repo.stanza, "--config",
                     str(repo.config), "--to", target.isoformat(), "--into",
                     str(restored.pgdata), root=tmp_path)
    restore_s = time.monotonic() - started
    restored.start()
    try:
        restored_url = restored.dsn()
        admin = await asyncpg.connect(restored_url)
        try:
            async def promoted() -> bool:
                return not await admin.fetchval("SELECT pg_is_in_recovery()")
            await until(promoted, "the restored cluster reaches T and opens for writes", 120,
                        restored.log_file.read_text)
            recovered_s = time.monotonic() - started
            kept = await events(admin)
            carried_on = time.monotonic()

            # The restored cell starts and a worker carries on: every run finishes there.
            await migrate(restored_url, tmp_path / "restored-cli")
            async with WorkerFleet(
                dsn=restored_url, model_url=model.base_url, log_dir=tmp_path / "workers2",
                size=1, concurrency=RUNS, lease_seconds=None, pool_max=None, master_key=key,
            ) as fleet:
                await fleet.start()
                await until(ended_at_least(admin, RUNS), f"all {RUNS} runs end in the "
                            "restored cell", 120, fleet.tails)
                await fleet.stop()
                assert not fleet.unexpected_exits(), fleet.tails()
            finished_s = time.monotonic() - carried_on
            verdict = await verify(admin, runs, mcp)
        finally:
            await admin.close()
    finally:
        restored.stop()

    # The load did what this test is about: writes during the backup, before T and after.
    assert during_backup > 0, "no step was committed while the backup ran"
    assert len(acknowledged) > 2 * RUNS and after_target, (len(acknowledged), after_target)
    assert ended_before == 0, "runs ended before the cell was lost: nothing left to continue"
    # Every step committed before T is there; none committed after T is; nothing else.
    assert acknowledged - kept == set(), sorted(acknowledged - kept)[:10]
    assert kept & after_target == set(), sorted(kept & after_target)[:10]
    assert kept <= written, sorted(kept - written)[:10]
    # The restored cell finished every run as one clean execution of its script, and each
    # planned effect happened once although the steps after T were made again.
    assert verdict.ok, verdict.describe()
    assert verdict.finished == RUNS
    assert verdict.retried_calls > 0, verdict.describe()
    assert f"backup {backup['label']} (full)" in status, status
    assert "restored backup" in said, said
    print(f"set-up and runs started {loaded_s:.1f} s; "
          f"backup {backup_s:.1f} s ({during_backup} events committed during it); restore "
          f"{restore_s:.1f} s, open for writes {recovered_s:.1f} s after it began; "
          f"{len(acknowledged)} events before T, {len(after_target)} after; restored cell "
          f"migrated, worker started and every run finished in {finished_s:.1f} s; "
          f"{verdict.counts()}")  # shown with -s
