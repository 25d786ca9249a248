"""Chaos: runs parked by worker processes are woken by another one after the provider
recovers, at the shipped settings, with a provider that has no ``GET /models``
(ADR 0009).

Two workers see the outage and park the runs; one of them is killed while they are
parked; the provider comes back. The survivor's probe is answered 404, which must not
keep its breaker open: a parked run's real call probes instead, and the survivor then
wakes every run — the ones the dead worker parked too, from Postgres.
"""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from tenantry.testing.fake_model import FakeModelServer
from tests.support.api import Api
from tests.support.db import run_statuses
from tests.support.harness import WorkerFleet
from tests.support.scripts import answer, scripted
from tests.support.waiting import until

pytestmark = pytest.mark.chaos

RUNS = 12
#: What a worker logs (JSON, on stderr) when a run parks and frees its slot.
PARKED_MARK = b'"msg":"run waits; its slot is free"'


async def test_runs_parked_by_a_killed_worker_wake_in_the_other_after_recovery(
    api: Api, database_dsn: str, admin_conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    async with FakeModelServer(models_endpoint=False) as model:
        model.set_mode("down")
        _, h = await api.tenant()
        agent = await api.agent(h)
        runs = [await api.start(h, agent, scripted(answer(f"done {i}"), text=f"run {i}"))
                for i in range(RUNS)]
        async with WorkerFleet(dsn=database_dsn, model_url=model.base_url,
                               log_dir=tmp_path / "workers", size=2,
                               concurrency=RUNS // 2) as fleet:  # both get runs
            await fleet.start()

            async def all_parked() -> bool:
                return await run_statuses(admin_conn, runs) == {"waiting": RUNS}
            await until(all_parked, "every run parked", 60, fleet.tails)
            victim = max(fleet.live, key=lambda w: w.stderr.read_bytes().count(PARKED_MARK))
            assert PARKED_MARK in victim.stderr.read_bytes()
            await fleet.kill(victim)
            model.set_mode("ok")

            async def all_finished() -> bool:
                statuses = await run_statuses(admin_conn, runs)
                assert "failed" not in statuses, statuses
                return statuses == {"finished": RUNS}
            # About 35 s at most at the default settings (docs/how-to/model-providers.md).
            await until(all_finished, "every parked run finished in the survivor", 90,
                        fleet.tails)
        assert not fleet.unexpected_exits(), fleet.tails()
    for run_id in runs:
        r = await api.client.get(f"/v1/runs/{run_id}/events",
                                 headers={**h, "Accept": "application/json"})
        kinds = [e["type"] for e in r.json()["events"]]
        assert kinds[-4:] == ["RunParked", "RunResumed", "ModelReplied", "RunFinished"], kinds
