"""A worker that meets an event it cannot read (a newer format, from a newer release
rolling out) leaves the run alone for a newer worker: nothing written, nothing failed,
the lease given back, one warning, one count on /metrics."""

from __future__ import annotations

import asyncio
import logging

import asyncpg
import pytest

from tenantry.ids import RunId
from tenantry.telemetry.worker import WorkerMetrics
from tests.support.api import Api
from tests.support.scripts import answer, scripted
from tests.support.worker import Fakes, running_worker


async def test_a_run_with_a_newer_event_is_left_for_a_newer_worker(
    api: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="tenantry.runs.driver")
    tenant, h = await api.tenant()
    agent = await api.agent(h)
    run_id = await api.start(h, agent, scripted(answer("done")))
    run = RunId.parse(run_id)
    # A newer release wrote the next event in a format this code does not know.
    async with admin_conn.transaction():
        await admin_conn.execute(
            "INSERT INTO run_events (tenant_id, run_id, seq, type, data, format) "
            "VALUES ($1, $2, 2, 'CancelRequested', '{}', 99)", tenant, run.uuid)
        await admin_conn.execute("UPDATE runs SET last_seq = 2 WHERE run_id = $1", run.uuid)
    events_before = await admin_conn.fetch(
        "SELECT seq, type, data, format FROM run_events WHERE run_id = $1 ORDER BY seq",
        run.uuid)
    metrics = WorkerMetrics()
    counter = metrics.runs_left_for_newer_worker
    async with running_worker(database_dsn, fakes.model.base_url, metrics=metrics):
        async with asyncio.timeout(30):
            while not counter.value("standard"):  # noqa: ASYNC110 (a counter: no event)
                await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # held off: the worker does not claim it again at once
        row = await admin_conn.fetchrow(
            "SELECT status, lease_owner, cancel_requested, available_at > now() AS held_off "
            "FROM runs WHERE run_id = $1", run.uuid)
    assert row is not None
    assert dict(row) == {"status": "queued", "lease_owner": None, "cancel_requested": False,
                         "held_off": True}
    events_after = await admin_conn.fetch(
        "SELECT seq, type, data, format FROM run_events WHERE run_id = $1 ORDER BY seq",
        run.uuid)
    assert events_after == events_before  # no RunFailed, nothing at all
    assert fakes.model.requests == []
    assert "tenantry_runs_left_for_newer_worker_total" in metrics.render()
    assert counter.value("standard") == 1
    warnings = [r.getMessage() for r in caplog.records
                if "newer than this worker knows" in r.getMessage()]
    assert warnings == [f"run {run_id} holds event CancelRequested in format 99, newer than "
                        "this worker knows; leaving it to a newer worker"]
