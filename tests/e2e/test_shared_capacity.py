"""Four worker processes on one model account stay within its rate limit together
(ADR 0021): the account's rpm is divided among them through leased shares in
Postgres, instead of each sending up to the whole of it.

The provider is a fake that enforces the rpm itself and counts the 429s it answers. It
enforces it over 20-second windows (240 rpm = 80 per 20 s), as providers that quantize
their limits do, so that the limit binds within a short test: 24 runs of ~5 model calls
want far more than 80 calls in 20 s. It sends no rate-limit headers (many
OpenAI-compatible servers send none), so only the workers' shares can keep them within it:
before shares, each worker learnt of the limit from its own 429s alone.

Tolerance: beyond its usable part (the limit less a 5% reserve), the workers together may
send at most one request each per window — the one request each paced worker may have
in hand when the window opens (ADR 0021). Here the reserve is 4 requests per
20 s, one per worker, so nothing is tolerated: the provider must refuse no call. (Before
shares, it refused two or three in this test: one per worker that ran into the limit,
each then waiting out the provider's Retry-After.)
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from tenantry.testing.fake_model import FakeModelServer
from tenantry.testing.mcp_server import EffectsMcpServer
from tests.support.api import TEST_MASTER_KEY, Api
from tests.support.db import run_statuses
from tests.support.harness import (
    PlannedRun,
    WorkerFleet,
    create_runs,
    create_tenants,
    plan_runs,
)
from tests.support.waiting import until

pytestmark = pytest.mark.e2e

WORKERS = 4
RPM = 240
WINDOW_S = 20.0
RUNS = 24
TENANTS = 3
# The reserve, 5% of 80, covers each worker's one request beyond its share.
TOLERATED_429S = 0


@pytest.fixture
async def mcp() -> AsyncIterator[EffectsMcpServer]:
    async with EffectsMcpServer() as server:
        yield server


@pytest.mark.timeout(180)
async def test_four_workers_on_one_account_stay_within_its_rpm_and_every_run_finishes(
    api: Api, database_dsn: str, admin_conn: asyncpg.Connection, mcp: EffectsMcpServer,
    tmp_path: Path,
) -> None:
    async with FakeModelServer(rpm=RPM, rpm_window_seconds=WINDOW_S,
                               rate_limit_headers=False) as limited, \
            FakeModelServer() as elsewhere:
        # The runs' model is served by the limited account first; the workers' configured
        # account (any model, after every registered one) is elsewhere: a run the limited
        # account could not serve would move there.
        await api.model_account("limited", limited.base_url, rpm=RPM)
        async with WorkerFleet(dsn=database_dsn, model_url=elsewhere.base_url,
                               log_dir=tmp_path / "workers", size=WORKERS, concurrency=8,
                               lease_seconds=None,
                               master_key=TEST_MASTER_KEY.encoded()) as fleet:
            await fleet.start()
            tenants = await create_tenants(api.client, api.operator, mcp.url, TENANTS)
            runs: dict[str, PlannedRun] = {}
            plans = plan_runs(RUNS, random.Random(19), slow_every=0)
            await create_runs(api.client, tenants, plans, runs)
            ids = list(runs)

            async def all_ended() -> bool:
                statuses = await run_statuses(admin_conn, ids)
                assert set(statuses) <= {"queued", "running", "finished"}, statuses
                return statuses == {"finished": RUNS}
            await until(all_ended, "every run finished", 150, fleet.tails)
            assert not fleet.unexpected_exits(), fleet.tails()
        model_calls = sum(len(plan.calls) + 1 for plan in plans)
        served = len(limited.usage_log)
        # Every model call was served once, by the limited account, and the provider
        # refused no more than the tolerance (each refusal was retried, so no run failed).
        assert (served, len(elsewhere.usage_log)) == (model_calls, 0)
        assert limited.rate_limited <= TOLERATED_429S, (
            f"{limited.rate_limited} calls refused (429) of {served + limited.rate_limited}; "
            f"the busiest {WINDOW_S:.0f} s let {limited.busiest_window()} through")
