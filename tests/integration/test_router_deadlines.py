"""The deadlines on what `tenantry router` forwards (ADR 0028, "Caps and deadlines"), each
tried with small settings through the router's app on a real port.

Against a stub cell that misbehaves on purpose: a cell that goes silent mid-answer is cut
at the idle deadline; one that trickles forever, at the body deadline; a caller that reads
nothing loses its answer — and the router's connection to the cell with it — at the idle
deadline; the operator's calls have a cap of their own. Against a real cell: an event
stream ends cleanly when the cell is silent or its lifetime is up, and the SDK's stream
resumes through the router with nothing lost."""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

import asyncpg
import httpx2
import pytest

from tenantry.cells import directory
from tenantry.client import AsyncClient
from tenantry.client.models import Event
from tenantry.tenants.keys import key_hash
from tests.support.api import OPERATOR_TOKEN, serving_api
from tests.support.cells import Router, StubCell, directory_database, serving_router
from tests.support.db import dsn_for
from tests.support.scripts import answer, scripted
from tests.support.sse import read_sse
from tests.support.waiting import until

T = TypeVar("T")
STUB_KEY = "tnt_stub_" + "k" * 32
#: How long a test waits for what the router must do within its (sub-second) deadlines
#: before calling it not done: a guard against hanging, not a measurement.
GUARD_SECONDS = 8.0


async def _within(awaitable: Awaitable[T], what: str) -> T:
    try:
        async with asyncio.timeout(GUARD_SECONDS):
            return await awaitable
    except TimeoutError:
        raise AssertionError(f"not within {GUARD_SECONDS:g}s: {what}") from None


def _cuts(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [getattr(r, "reason", "?") for r in caplog.records
            if r.getMessage() == "forwarded answer cut"]


@asynccontextmanager
async def _stub_behind_router(admin_dsn: str, **settings: object
                              ) -> AsyncIterator[tuple[StubCell, Router, dict[str, str]]]:
    """A stub cell in the directory, one tenant at home there with STUB_KEY, a router."""
    async with directory_database(admin_dsn) as directory_dsn, StubCell() as stub:
        conn = await asyncpg.connect(directory_dsn)
        try:
            await directory.add_cell(conn, "stub-1", region="eu", api_url=stub.url,
                                     operator_token="stub-token")
            await directory.record_tenant(conn, "ten-stub", region="eu", cell="stub-1")
            await directory.record_api_key(conn, "ten-stub", key_hash=key_hash(STUB_KEY),
                                           key_id="key_stub")
        finally:
            await conn.close()
        async with serving_router(directory_dsn, **settings) as router:
            yield stub, router, {"Authorization": f"Bearer {STUB_KEY}"}


async def test_a_cell_silent_mid_answer_is_cut_at_the_idle_deadline(
    admin_dsn: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tenantry.api.router")
    async with _stub_behind_router(admin_dsn, router_idle_seconds=0.5) as (stub, router, key), \
            router.client.stream("GET", "/v1/stall", headers=key) as r:
        assert r.status_code == 200 and r.headers["content-length"] == "1000"
        reading = asyncio.ensure_future(r.aread())
        stalled = await _within(stub.answered("/v1/stall"), "the request reaches the cell")
        await _within(stalled.closed.wait(), "the router drops the silent cell")
        # The caller is dropped too: ten bytes of a thousand never look whole.
        with pytest.raises(httpx2.TransportError) as cut:
            await _within(reading, "the caller's answer ends")
        assert not isinstance(cut.value, httpx2.TimeoutException)
    assert _cuts(caplog) == ["idle"]


async def test_an_answer_that_never_ends_is_cut_at_the_body_deadline(
    admin_dsn: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """The stub sends a byte every 50 ms: never idle for the 5 s idle deadline, never
    done either — the 1 s body deadline cuts it."""
    caplog.set_level(logging.INFO, logger="tenantry.api.router")
    async with _stub_behind_router(admin_dsn, router_idle_seconds=5,
                                   router_body_seconds=1) as (stub, router, key):
        received: list[bytes] = []

        async def read() -> None:
            async with router.client.stream("GET", "/v1/trickle", headers=key) as r:
                assert r.status_code == 200
                async for chunk in r.aiter_raw():
                    received.append(chunk)

        reading = asyncio.ensure_future(read())
        trickle = await _within(stub.answered("/v1/trickle"), "the request reaches the cell")
        await _within(trickle.closed.wait(), "the router drops the never-ending answer")
        with pytest.raises(httpx2.TransportError) as cut:
            await _within(reading, "the caller's answer ends")
        assert not isinstance(cut.value, httpx2.TimeoutException)
        assert b"".join(received).startswith(b"xxx")  # it did flow until the deadline
    assert _cuts(caplog) == ["deadline"]


async def test_a_caller_that_reads_nothing_loses_its_answer_and_the_cell_connection(
    admin_dsn: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """Two callers of one tenant (its cap) ask for an endless answer and read none of it:
    at the idle deadline the router drops both sides, so the cell's connections are free,
    the tenant's places under its cap are free, and its next request is answered."""
    caplog.set_level(logging.INFO, logger="tenantry.api.router")
    async with _stub_behind_router(admin_dsn, router_idle_seconds=0.5,
                                   router_max_requests_per_tenant=2,
                                   router_max_streams_per_tenant=1) as (stub, router, key):
        loop = asyncio.get_running_loop()
        port = int(router.base_url.rsplit(":", 1)[1])
        readers = []
        for _ in range(2):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills at once
            sock.setblocking(False)
            await loop.sock_connect(sock, ("127.0.0.1", port))
            await loop.sock_sendall(sock, b"GET /v1/flood HTTP/1.1\r\nHost: router\r\n"
                                    b"Authorization: Bearer " + STUB_KEY.encode() + b"\r\n\r\n")
            readers.append(sock)
        try:
            await until(lambda: _count(stub, "/v1/flood", 2), "both requests reach the cell",
                        GUARD_SECONDS)
            floods = [a for a in stub.answers if a.path == "/v1/flood"]
            for flood in floods:
                await _within(flood.closed.wait(), "the router drops the cell's side")

            async def callers_dropped() -> bool:
                return router.open_connections == 0

            # Dropped, not closed gracefully: that would wait for the callers to read what
            # is buffered for them, which they never do.
            await until(callers_dropped, "the router drops the callers' side", GUARD_SECONDS)
            for sock in readers:  # what the kernel had taken before the cut, then the end
                await _within(_read_to_end(loop, sock), "the caller's side ends")
        finally:
            for sock in readers:
                sock.close()
        r = await router.client.get("/v1/other", headers=key)
        assert r.status_code == 200, r.text
    assert _cuts(caplog) == ["slow_reader", "slow_reader"]


async def test_operator_calls_have_a_cap_of_their_own(admin_dsn: str) -> None:
    """One operator call to the stub cell at a time (its cap): a second is refused at once,
    the tenant's own calls are not, and the place comes back when the first ends."""
    async with _stub_behind_router(admin_dsn, router_max_operator_requests=1) as (
            stub, router, key):
        held = router.client.stream("GET", "/admin/v1/tenants/ten-stub/stall",
                                    headers=router.operator)
        async with held as r:
            assert r.status_code == 200
            refused = await router.client.get("/admin/v1/tenants/ten-stub",
                                              headers=router.operator)
            assert refused.status_code == 429, refused.text
            assert refused.json()["type"] == "overloaded"
            assert refused.headers["retry-after"] == "1"
            assert (await router.client.get("/v1/agents", headers=key)).status_code == 200
        stalled = await stub.answered("/admin/v1/tenants/ten-stub/stall")
        await _within(stalled.closed.wait(), "the caller's going away frees the cell")
        r = await router.client.get("/admin/v1/tenants/ten-stub", headers=router.operator)
        assert r.status_code == 200, r.text


async def _count(stub: StubCell, path: str, n: int) -> bool:
    return sum(a.path == path for a in stub.answers) >= n


async def _read_to_end(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    try:
        while await loop.sock_recv(sock, 1 << 16):
            pass
    except ConnectionResetError:
        pass


# ---------------------------------------------------------------- event streams, real cell


@dataclass
class CellBehindRouter:
    router: Router
    key: dict[str, str]
    api_key: str
    agent: str


@asynccontextmanager
async def _cell_behind_router(admin_dsn: str, template_db: str,
                              **settings: object) -> AsyncIterator[CellBehindRouter]:
    name = f"tenantry_cell_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
        async with directory_database(admin_dsn) as directory_dsn, \
                serving_api(dsn_for(admin_dsn, name), cell="eu-1", region="eu") as cell:
            conn = await asyncpg.connect(directory_dsn)
            try:
                await directory.add_cell(conn, "eu-1", region="eu", api_url=cell.base_url,
                                         operator_token=OPERATOR_TOKEN)
            finally:
                await conn.close()
            async with serving_router(directory_dsn, **settings) as router:
                r = await router.client.post("/admin/v1/tenants", headers=router.operator,
                                             json={"name": "streamer", "region": "eu"})
                assert r.status_code == 201, r.text
                tenant = r.json()["tenant_id"]
                r = await router.client.post(f"/admin/v1/tenants/{tenant}/api-keys",
                                             headers=router.operator, json={"name": "main"})
                assert r.status_code == 201, r.text
                api_key = r.json()["api_key"]
                key = {"Authorization": f"Bearer {api_key}"}
                r = await router.client.post("/v1/agents", headers=key, json={
                    "name": "a", "model": "scripted", "system_prompt": "Be brief."})
                assert r.status_code == 201, r.text
                yield CellBehindRouter(router, key, api_key, r.json()["agent_id"])
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def _queued_run(c: CellBehindRouter) -> str:
    """A run no worker takes (this cell has none): its stream stays open and silent after
    RunCreated, until the run is cancelled."""
    r = await c.router.client.post("/v1/runs", headers=c.key, json={
        "agent_id": c.agent, "input": scripted(answer("never"))})
    assert r.status_code == 202, r.text
    run_id: str = r.json()["run_id"]
    return run_id


async def test_a_stream_the_cell_leaves_silent_ends_cleanly_at_the_idle_deadline(
    admin_dsn: str, template_db: str,
) -> None:
    """An idle deadline of 1 s, below the cell's 15 s keepalive: the stream of a queued run
    ends after its first event — cleanly, between two events, where a client resumes."""
    async with _cell_behind_router(admin_dsn, template_db, router_idle_seconds=1) as c:
        run_id = await _queued_run(c)

        async def whole_stream() -> list[int | None]:
            async with c.router.client.stream("GET", f"/v1/runs/{run_id}/events",
                                              headers=c.key) as r:
                assert r.status_code == 200
                assert r.headers["content-type"].startswith("text/event-stream")
                return [event.id async for event in read_sse(r)]

        assert await _within(whole_stream(), "the silent stream ends") == [1]


class _CountingTransport(httpx2.AsyncHTTPTransport):
    """The SDK's connections to a run's event stream, counted."""

    def __init__(self) -> None:
        super().__init__()
        self.streams = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path.endswith("/events"):
            self.streams += 1
        return await super().handle_async_request(request)


async def test_a_stream_ends_at_its_lifetime_and_the_sdk_resumes_it_losing_nothing(
    admin_dsn: str, template_db: str,
) -> None:
    async with _cell_behind_router(admin_dsn, template_db,
                                   router_stream_lifetime_seconds=1) as c:
        run_id = await _queued_run(c)
        counting = _CountingTransport()
        async with AsyncClient(c.router.base_url, c.api_key, transport=counting) as client:
            seen: list[Event] = []

            async def follow() -> None:
                async for item in client.runs.events(run_id):
                    if isinstance(item, Event):
                        seen.append(item)

            following = asyncio.ensure_future(follow())
            try:
                async def came_back() -> bool:
                    return counting.streams >= 3

                # Each of the router's ends is followed by the SDK's reconnect.
                await until(came_back, "the router ended the stream twice", GUARD_SECONDS)
                await client.runs.cancel(run_id)
                await _within(following, "the SDK's stream ends with the run")
            finally:
                following.cancel()
        r = await c.router.client.get(f"/v1/runs/{run_id}/events",
                                      headers={**c.key, "Accept": "application/json"})
        whole = [e["seq"] for e in r.json()["events"]]
    assert [e.seq for e in seen] == whole == list(range(1, len(whole) + 1))
    assert seen[0].type == "RunCreated" and seen[-1].type == "RunCancelled"
