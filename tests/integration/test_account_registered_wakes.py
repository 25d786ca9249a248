"""A model account registered just before a run serves it: a worker whose account cache
predates the registration parks the run (the registration's own wake-up found nothing
parked), and wakes it as soon as its cache learns of the account — not at the park's
recheck time (an hour here, past the test's deadlines)."""

from __future__ import annotations

import dataclasses

import asyncpg

from tenantry.models.gateway import ModelGateway
from tests.support.api import Api
from tests.support.db import run_statuses
from tests.support.waiting import until
from tests.support.worker import TEST_ENGINE, TEST_GATEWAY, Fakes, running_worker

HOUR = 3600.0


async def test_a_run_started_just_after_its_account_is_registered_is_served(
    api: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection,
) -> None:
    _, h = await api.tenant()
    agent = await api.agent(h)  # model "scripted": no account serves it yet
    engine = dataclasses.replace(TEST_ENGINE, park_recheck_seconds=HOUR,
                                 park_recheck_max_seconds=HOUR)
    # The cache is read at start and then only when this test says (its loop would wait
    # an hour): the window between a registration and a worker's refresh, held open.
    gateway = dataclasses.replace(TEST_GATEWAY, refresh_seconds=HOUR)
    async with running_worker(database_dsn, None, settings=engine,
                              model_gateway=gateway) as worker:
        await api.model_account("late", fakes.model.base_url)
        run = await api.start(h, agent, "hello")

        async def status_is(status: str) -> bool:
            return await run_statuses(admin_conn, [run]) == {status: 1}

        await until(lambda: status_is("waiting"), "the stale worker parks the run", 30)
        gateway_of_worker = worker.engine.model
        assert isinstance(gateway_of_worker, ModelGateway)
        await gateway_of_worker.refresh()  # what its refresh loop does every few seconds
        await until(lambda: status_is("finished"), "the run is served by the new account", 30)
    r = await api.client.get(f"/v1/runs/{run}/events", headers={**h, "Accept": "application/json"})
    kinds = [e["type"] for e in r.json()["events"]]
    assert kinds[kinds.index("RunParked") + 1] == "RunResumed", kinds
    assert [e["data"]["account"] for e in r.json()["events"]
            if e["type"] == "ModelReplied"] == ["late"]
