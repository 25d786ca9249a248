"""One tenant cannot take the router's connections to a cell (ADR 0028, "Caps and
deadlines"): a real `tenantry router` process in front of a real `tenantry api` cell.

The router may open 16 connections to the cell; a tenant may hold 4 of them, 2 as event
streams. Tenant A attacks: 20 event streams of a run that never ends, then 10 requests for
a ~12 MB answer (a page of its runs) whose bodies it never reads. Without the caps, A holds
every connection and each further request — B's too — waits for one (60 s, then 503
cell_unavailable). With them, A is refused at once past its caps (429 overloaded, with
Retry-After) while B's calls are answered within a few seconds: the liveness bound the
attack is observed by."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import httpx2
import orjson
import pytest

from tenantry.cells import directory
from tests.support.api import TEST_MASTER_KEY
from tests.support.api_process import OPERATOR_TOKEN, ApiProcess, api_process
from tests.support.cells import ROUTER_TOKEN, RouterProcess, directory_database, start_router
from tests.support.db import dsn_for
from tests.support.scripts import answer, scripted

pytestmark = pytest.mark.e2e

OPERATOR = {"Authorization": f"Bearer {ROUTER_TOKEN}"}
MAX_REQUESTS, MAX_STREAMS = 4, 2
ROUTER_ENV = {"TENANTRY_ROUTER_CELL_CONNECTIONS": "16",
              "TENANTRY_ROUTER_MAX_REQUESTS_PER_TENANT": str(MAX_REQUESTS),
              "TENANTRY_ROUTER_MAX_STREAMS_PER_TENANT": str(MAX_STREAMS)}
#: B's calls must be answered within this (the router's head timeout is 60 s).
LIVENESS_SECONDS = 5.0
#: A's runs: GET /v1/runs?limit=200 answers all of them, each with its ~63 KiB input.
BIG_RUNS = 200


@dataclass
class Stack:
    cell: ApiProcess
    router: RouterProcess

    def logs(self) -> str:
        return f"{self.router.tail()}\n{self.cell.tail()}"


@pytest.fixture
async def stack(admin_dsn: str, template_db: str,
                tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    root = tmp_path_factory.mktemp("router-caps")
    name = f"tenantry_cell_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
        async with directory_database(admin_dsn) as directory_dsn, api_process(
                dsn_for(admin_dsn, name), root / "cell", master_key=TEST_MASTER_KEY.encoded(),
                env={"TENANTRY_CELL": "eu-1", "TENANTRY_REGION": "eu"}) as cell:
            conn = await asyncpg.connect(directory_dsn)
            try:
                await directory.add_cell(conn, "eu-1", region="eu", api_url=cell.base_url,
                                         operator_token=OPERATOR_TOKEN)
            finally:
                await conn.close()
            router = await start_router(directory_dsn, root / "router", env=ROUTER_ENV)
            try:
                yield Stack(cell, router)
            finally:
                await router.stop()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def _tenant(client: httpx2.AsyncClient, name: str) -> tuple[str, str]:
    """A tenant placed through the router: its API key and an agent."""
    r = await client.post("/admin/v1/tenants", headers=OPERATOR,
                          json={"name": name, "region": "eu"})
    assert r.status_code == 201, r.text
    r = await client.post(f"/admin/v1/tenants/{r.json()['tenant_id']}/api-keys",
                          headers=OPERATOR, json={"name": "main"})
    assert r.status_code == 201, r.text
    api_key: str = r.json()["api_key"]
    r = await client.post("/v1/agents", headers=_auth(api_key), json={
        "name": f"{name} agent", "model": "scripted", "system_prompt": "Be brief."})
    assert r.status_code == 201, r.text
    return api_key, r.json()["agent_id"]


def _auth(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}


async def _run(client: httpx2.AsyncClient, api_key: str, agent: str, pad: int = 0) -> str:
    """A run no worker takes (the cell has none): its event stream never ends."""
    r = await client.post("/v1/runs", headers=_auth(api_key), json={
        "agent_id": agent, "input": {**scripted(answer("never")), "pad": "x" * pad}})
    assert r.status_code == 202, r.text
    run_id: str = r.json()["run_id"]
    return run_id


async def _open_stream(client: httpx2.AsyncClient, api_key: str,
                       run_id: str) -> httpx2.Response:
    """An event stream's answer, its head read and its body left open."""
    request = client.build_request("GET", f"/v1/runs/{run_id}/events", headers=_auth(api_key))
    return await client.send(request, stream=True)


@dataclass(eq=False)
class SlowRead:
    """A request whose answer's head is read and then nothing more."""

    sock: socket.socket
    status: int
    head: bytes


async def _slow_read(base_url: str, api_key: str, path: str) -> SlowRead:
    loop = asyncio.get_running_loop()
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # takes little, then nothing
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, (host, int(port)))
        await loop.sock_sendall(sock, f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: "
                                      f"Bearer {api_key}\r\n\r\n".encode())
        received = b""
        while b"\r\n\r\n" not in received:
            data = await loop.sock_recv(sock, 1024)
            assert data, "the router closed the connection before answering"
            received += data
    except BaseException:
        sock.close()
        raise
    return SlowRead(sock, int(received.split(b" ", 2)[1]), received)


def _header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


async def test_one_tenant_cannot_take_the_routers_connections_to_its_cell(
    stack: Stack,
) -> None:
    limits = httpx2.Limits(max_connections=100, max_keepalive_connections=20)
    async with httpx2.AsyncClient(base_url=stack.router.base_url, timeout=30,
                                  limits=limits) as client, \
            httpx2.AsyncClient(base_url=stack.cell.base_url, timeout=30) as cell_client:
        key_a, agent_a = await _tenant(client, "Attacker")
        key_b, agent_b = await _tenant(client, "Bystander")
        # A's big answer, made at the cell directly (the setup, not the attack).
        sem = asyncio.Semaphore(8)

        async def big_run() -> str:
            async with sem:
                return await _run(cell_client, key_a, agent_a, pad=63_000)

        runs_a = await asyncio.gather(*(big_run() for _ in range(BIG_RUNS)))

        streams = [asyncio.ensure_future(_open_stream(client, key_a, runs_a[0]))
                   for _ in range(20)]
        slow: list[asyncio.Future[SlowRead]] = []
        try:
            # The attack: streams first, then requests whose answers A never reads.
            await asyncio.wait(streams, timeout=LIVENESS_SECONDS)
            slow = [asyncio.ensure_future(_slow_read(stack.router.base_url, key_a,
                                                     "/v1/runs?limit=200"))
                    for _ in range(10)]
            await asyncio.wait(slow, timeout=LIVENESS_SECONDS)

            # Meanwhile B's ordinary calls are answered, each within the liveness bound.
            async def b_calls() -> None:
                run_b = await _run(client, key_b, agent_b)
                for path in ("/v1/agents", "/v1/runs", f"/v1/runs/{run_b}"):
                    r = await client.get(path, headers=_auth(key_b))
                    assert r.status_code == 200, r.text
                stream_b = await _open_stream(client, key_b, run_b)
                await stream_b.aclose()
                assert stream_b.status_code == 200

            for _ in range(3):
                try:
                    async with asyncio.timeout(LIVENESS_SECONDS):
                        await b_calls()
                except TimeoutError:
                    raise AssertionError(
                        f"tenant B's calls were not answered within {LIVENESS_SECONDS:g}s "
                        f"while tenant A attacked\n{stack.logs()}") from None

            # A was refused at once past its caps: 429 overloaded, with Retry-After.
            assert all(task.done() for task in streams + slow), \
                "A's requests were not all answered at once"
            opened = [task.result() for task in streams]
            assert sorted(r.status_code for r in opened) == \
                [200] * MAX_STREAMS + [429] * (len(streams) - MAX_STREAMS)
            for r in opened:
                if r.status_code == 429:
                    await r.aread()
                    assert r.headers["content-type"] == "application/problem+json"
                    assert r.json()["type"] == "overloaded" and r.headers["retry-after"] == "5"
            reads = [task.result() for task in slow]
            assert sorted(read.status for read in reads) == \
                [200] * (MAX_REQUESTS - MAX_STREAMS) + [429] * (len(slow) - MAX_REQUESTS
                                                               + MAX_STREAMS)
            for read in reads:
                if read.status == 429:
                    assert _header(read.head, b"retry-after") == b"1"
                    assert _header(read.head, b"content-type") == b"application/problem+json"
            # Its streams and unread answers hold all its places: even an ordinary call of
            # A's is refused now — and B's are not.
            r = await client.get("/v1/agents", headers=_auth(key_a))
            assert r.status_code == 429 and r.headers["retry-after"] == "1", r.text
            assert orjson.loads(r.content)["type"] == "overloaded"
            r = await client.get("/v1/agents", headers=_auth(key_b))
            assert r.status_code == 200, r.text
        finally:
            for task in streams + slow:
                task.cancel()
            for task in streams:
                if task.done() and not task.cancelled() and task.exception() is None:
                    await task.result().aclose()
            for read_task in slow:
                if read_task.done() and not read_task.cancelled() and \
                        read_task.exception() is None:
                    read_task.result().sock.close()
