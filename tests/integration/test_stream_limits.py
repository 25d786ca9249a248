"""Open event streams are bounded per tenant and per process, give their slot back when
they close, and cost no pool connection while they wait: a tenant cannot starve the others
of streams, nor the whole process of its database pool, by opening streams it never reads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx2
import pytest

from tenantry.api import runs as runs_api
from tenantry.runs import service
from tests.support.api import Api, serving_api
from tests.support.waiting import until

PER_TENANT = 3
POOL_MAX = 5


async def _live_run(api: Api, name: str) -> tuple[str, dict[str, str], str]:
    """A tenant and a run of it that stays queued (no worker): its stream stays open."""
    tenant, h = await api.tenant(name)
    agent = await api.agent(h)
    return tenant, h, await api.start(h, agent, "x")


@asynccontextmanager
async def _stream(api: Api, h: dict[str, str], run: str) -> AsyncIterator[httpx2.Response]:
    """An open stream whose first event (the backlog) has arrived: the server holds it."""
    async with api.client.stream("GET", f"/v1/runs/{run}/events", headers=h,
                                 timeout=30) as r:
        if r.status_code == 200:
            lines = r.aiter_lines()
            while not (await anext(lines)).startswith("data: "):
                pass
        else:
            await r.aread()
        yield r


def _refused(r: httpx2.Response) -> dict[str, Any]:
    assert r.status_code == 429, r.status_code
    assert r.headers["content-type"] == "application/problem+json"
    assert int(r.headers["retry-after"]) >= 1
    body: dict[str, Any] = r.json()
    assert body["type"] == "overloaded" and body["retry_after"] >= 1
    return body


@pytest.fixture
async def capped(database_dsn: str) -> AsyncIterator[Api]:
    async with serving_api(database_dsn, sse_max_streams=100,
                           sse_max_streams_per_tenant=PER_TENANT) as api:
        yield api


async def test_a_tenant_at_its_cap_is_refused_while_another_tenant_still_streams(
        capped: Api) -> None:
    api = capped
    _, ha, run_a = await _live_run(api, "Noisy")
    _, hb, run_b = await _live_run(api, "Quiet")
    async with AsyncExitStack() as held:
        for _ in range(PER_TENANT):
            r = await held.enter_async_context(_stream(api, ha, run_a))
            assert r.status_code == 200
        async with _stream(api, ha, run_a) as refused:
            body = _refused(refused)
        # Nothing in the answer counts anyone's streams.
        assert not any(str(n) in body["detail"] for n in (PER_TENANT, 100))
        async with _stream(api, hb, run_b) as other:
            assert other.status_code == 200, "the other tenant was refused a stream"
        metrics = (await api.client.get("/metrics", headers=api.operator)).text
        assert f"tenantry_sse_streams_open {PER_TENANT + 1}" not in metrics  # B's is closed
        assert f"tenantry_sse_streams_open {PER_TENANT}" in metrics
        assert 'tenantry_sse_streams_refused_total{cap="tenant"} 1' in metrics
        assert 'tenantry_sse_streams_refused_total{cap="process"} 0' in metrics
        # JSON pages are not streams: never refused.
        page = await api.client.get(f"/v1/runs/{run_a}/events",
                                    headers={**ha, "Accept": "application/json"})
        assert page.status_code == 200


async def test_a_closed_stream_gives_its_slot_back(capped: Api) -> None:
    api = capped
    tenant, h, run = await _live_run(api, "Cycling")
    # Many more opens than the cap, each closed before the next: none may leak a slot.
    for _ in range(PER_TENANT * 3):
        async with _stream(api, h, run) as r:
            assert r.status_code == 200
        await until(lambda: _holds(api, tenant, 0), "the closed stream's slot is back", 10)
    assert api.platform.streams.open == 0


async def _holds(api: Api, tenant: str, n: int) -> bool:
    return api.platform.streams.held_by(tenant) == n


async def test_the_process_cap_refuses_every_tenant_alike(database_dsn: str) -> None:
    async with serving_api(database_dsn, sse_max_streams=2,
                           sse_max_streams_per_tenant=100) as api:
        _, ha, run_a = await _live_run(api, "First")
        _, hb, run_b = await _live_run(api, "Second")
        async with _stream(api, ha, run_a) as one, _stream(api, ha, run_a) as two:
            assert one.status_code == two.status_code == 200
            async with _stream(api, hb, run_b) as refused:
                by_process = _refused(refused)
            async with _stream(api, ha, run_a) as refused:
                by_tenant_share = _refused(refused)
        # The same words whichever cap it was: nothing tells B how busy A is.
        assert by_process["detail"] == by_tenant_share["detail"]
        await until(lambda: _open(api, 0), "both streams' slots are back", 10)
        async with _stream(api, hb, run_b) as again:
            assert again.status_code == 200


async def _open(api: Api, n: int) -> bool:
    return api.platform.streams.open == n


async def test_idle_streams_hold_no_pool_connection(database_dsn: str) -> None:
    """Three times as many idle streams as the pool has connections: every connection can
    still be taken at once, so no stream holds one while it waits."""
    async with serving_api(database_dsn, db_pool_max=POOL_MAX,
                           sse_max_streams_per_tenant=100) as api:
        _, h, run = await _live_run(api, "Idle")
        async with AsyncExitStack() as held:
            for _ in range(POOL_MAX * 3):
                r = await held.enter_async_context(_stream(api, h, run))
                assert r.status_code == 200
            pool = api.platform.db.pool
            async with asyncio.timeout(10):  # a bound on failure, not a measurement
                taken = [await pool.acquire() for _ in range(POOL_MAX)]
            for conn in taken:
                await pool.release(conn)
            r = await api.client.get(f"/v1/runs/{run}", headers=h)
            assert r.status_code == 200


async def test_an_idle_stream_does_not_poll_the_database(
        database_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keepalives go out, but with no notification the stream never reads the log (each
    read takes a pool connection): it waits for the hub to wake it."""
    monkeypatch.setattr(runs_api, "KEEPALIVE_SECONDS", 0.05)
    reads: list[int] = []
    real_read = service.read_events

    async def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(1)
        return await real_read(*args, **kwargs)

    async with serving_api(database_dsn) as api:
        _, h, run = await _live_run(api, "Quiet")
        async with api.client.stream("GET", f"/v1/runs/{run}/events", headers=h,
                                     timeout=30) as r:
            lines = r.aiter_lines()
            while not (await anext(lines)).startswith("data: "):
                pass
            # The first wake (the re-read just after subscribing) may still be under way.
            keepalives = 0
            while keepalives < 2:
                keepalives += (await anext(lines)) == ": keepalive"
            monkeypatch.setattr(service, "read_events", counted)
            keepalives = 0
            while keepalives < 10:
                keepalives += (await anext(lines)) == ": keepalive"
        assert reads == [], f"{len(reads)} reads in 10 idle keepalive intervals"
