"""Chaos: runs parked by one worker process are woken by another after the provider
recovers, at the shipped settings, with a provider that has no ``GET /models``
(DESIGN §8, ADR 0007).

The worker that saw the outage is killed while the runs are parked; the worker that takes
over has never seen the provider fail (its breakers are closed, it has nothing to probe),
so the runs must be found again from Postgres alone: the park recheck, bounded at the
default settings.
"""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from tenantry.testing.fake_model import FakeModelServer
from tests.chaos.harness import WorkerFleet
from tests.conftest import Api, answer, scripted, until

pytestmark = pytest.mark.chaos

RUNS = 8


async def _statuses(conn: asyncpg.Connection, runs: list[str]) -> dict[str, int]:
    rows = await conn.fetch(
        "SELECT status, count(*) AS n FROM runs "
        "WHERE 'run_' || replace(run_id::text, '-', '') = ANY($1) GROUP BY status", runs)
    return {r["status"]: r["n"] for r in rows}


async def test_runs_parked_by_a_killed_worker_wake_in_another_after_recovery(
    api: Api, database_dsn: str, admin_conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    async with FakeModelServer(models_endpoint=False) as model:
        model.set_mode("down")
        _, h = await api.tenant()
        agent = await api.agent(h)
        runs = [await api.start(h, agent, scripted(answer(f"done {i}"), text=f"run {i}"))
                for i in range(RUNS)]
        async with WorkerFleet(dsn=database_dsn, model_url=model.base_url,
                               log_dir=tmp_path / "workers", size=1, concurrency=RUNS) as fleet:
            await fleet.start()

            async def all_parked() -> bool:
                return await _statuses(admin_conn, runs) == {"waiting": RUNS}
            await until(all_parked, "every run parked", 60, fleet.tails)
            # The worker that saw the outage goes; nothing remembers it but Postgres.
            await fleet.kill(fleet.live[0])
            model.set_mode("ok")
            await fleet.wait_ready(await fleet.spawn())

            async def all_finished() -> bool:
                statuses = await _statuses(admin_conn, runs)
                assert "failed" not in statuses, statuses
                return statuses == {"finished": RUNS}
            # A run's first recheck comes 30 s after it parked, its second 60 s after
            # (docs/how-to/model-providers.md): well inside this wait.
            await until(all_finished, "every parked run finished in the new worker", 90,
                        fleet.tails)
        assert not fleet.unexpected_exits(), fleet.tails()
    for run_id in runs:
        r = await api.client.get(f"/v1/runs/{run_id}/events",
                                 headers={**h, "Accept": "application/json"})
        kinds = [e["type"] for e in r.json()["events"]]
        assert kinds[-4:] == ["RunParked", "RunResumed", "ModelReplied", "RunFinished"], kinds
