"""Cells behind a router for tests: a fresh directory database, the router's app served in
this process (integration) or as a real ``tenantry router`` process (e2e). No pytest here:
``benchmarks/router.py`` uses it too."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
import uvicorn

from tenantry.api.router.app import create_router_app, router_state
from tenantry.api.router.server import RouterHttp
from tenantry.cells.directory import DIRECTORY
from tenantry.config import Settings
from tenantry.db.migrate import migrate
from tests.support.db import scratch_database
from tests.support.harness import _die_with_parent, tenantry_command, worker_env
from tests.support.pgcluster import free_port

ROUTER_TOKEN = "op_router_token"


@asynccontextmanager
async def directory_database(admin_dsn: str) -> AsyncIterator[str]:
    """A fresh, migrated directory database on the admin server (dropped afterwards)."""
    async with scratch_database(admin_dsn, "tenantry_dir",
                                prepare=lambda conn: migrate(conn, schema=DIRECTORY)) as dsn:
        yield dsn


@dataclass
class Router:
    base_url: str
    client: httpx2.AsyncClient
    server: uvicorn.Server

    @property
    def open_connections(self) -> int:
        """Callers' connections the router's server holds (until each is gone for good)."""
        return len(self.server.server_state.connections)

    @property
    def operator(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ROUTER_TOKEN}"}


@asynccontextmanager
async def serving_router(directory_dsn: str, **overrides: object) -> AsyncIterator[Router]:
    """The router's app on a loopback port in this process."""
    settings = Settings(**{"operator_token": ROUTER_TOKEN,  # type: ignore[arg-type]
                           "max_body_bytes": 64 * 1024, **overrides})
    app = create_router_app(settings, lambda: router_state(settings, directory_dsn))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None,
                                           access_log=False, lifespan="on", http=RouterHttp))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx2.AsyncClient(base_url=base, timeout=10) as client:
            yield Router(base, client, server)
    finally:
        server.should_exit = True
        await task


@dataclass(eq=False)
class RouterProcess:
    process: asyncio.subprocess.Process
    base_url: str
    stderr: Path

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(FileNotFoundError):
            return "\n".join(self.stderr.read_text(errors="replace").splitlines()[-lines:])
        return ""

    async def stop(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 15)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                await self.process.wait()


async def start_router(directory_dsn: str, log_dir: Path, *, port: int | None = None,
                       within: float = 60.0, env: dict[str, str] | None = None
                       ) -> RouterProcess:
    """``tenantry router`` as operators run it, once it answers /healthz. ``env``: more
    settings (its caps, its deadlines)."""
    _make_dir(log_dir)
    extra = env or {}
    env = worker_env(log_dir / "data", lease_seconds=None, pool_max=None)
    env.update(TENANTRY_OPERATOR_TOKEN=ROUTER_TOKEN, TENANTRY_DIRECTORY_URL=directory_dsn)
    env.update(extra)
    port = port or free_port()
    stderr = log_dir / f"router-{time.monotonic_ns()}.err"
    with stderr.open("wb") as err:
        process = await asyncio.create_subprocess_exec(
            *tenantry_command(), "router", "--port", str(port), stdin=asyncio.subprocess.DEVNULL,
            stdout=err, stderr=err, env=env, start_new_session=True,
            preexec_fn=_die_with_parent)
    router = RouterProcess(process, f"http://127.0.0.1:{port}", stderr)
    deadline = time.monotonic() + within
    async with httpx2.AsyncClient(base_url=router.base_url, timeout=2) as client:
        while True:
            if process.returncode is not None:
                raise AssertionError(f"the router exited before it was ready\n{router.tail()}")
            with contextlib.suppress(httpx2.TransportError):
                if (await client.get("/healthz")).status_code == 200:
                    return router
            if time.monotonic() > deadline:
                await router.stop()
                raise AssertionError(f"the router not ready after {within:.0f}s\n"
                                     f"{router.tail()}")
            await asyncio.sleep(0.05)


def _make_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


@dataclass(eq=False)
class StubAnswer:
    """One connection the stub cell answered: ``closed`` is set once the router dropped it
    (the stub saw its end, or could no longer write)."""

    path: str
    closed: asyncio.Event


class StubCell:
    """A cell that misbehaves on purpose, as a router sees it: an HTTP/1.1 server on a
    loopback port whose answers, by the path's end, never end. ``…/stall``: a head promising
    1000 bytes, 10 of them, then nothing; ``…/trickle``: a chunked body, one byte every
    50 ms, forever; ``…/flood``: a chunked body of 64 KiB chunks, as fast as it can be
    taken, forever. Any other path: ``200 {}``."""

    def __init__(self) -> None:
        self.answers: list[StubAnswer] = []
        self._server: asyncio.Server | None = None
        self._serving: set[asyncio.Task[None]] = set()
        self._arrived = asyncio.Event()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> StubCell:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._serving:  # answers that never end, by design
            task.cancel()
        await asyncio.gather(*self._serving, return_exceptions=True)
        await self._server.wait_closed()

    async def answered(self, path: str) -> StubAnswer:
        """The first connection that asked for ``path`` (waiting for it)."""
        while not (found := [a for a in self.answers if a.path == path]):
            self._arrived.clear()
            await self._arrived.wait()
        return found[0]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answer = StubAnswer("", asyncio.Event())
        task = asyncio.current_task()
        assert task is not None
        self._serving.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            answer.path = head.split(b" ", 2)[1].decode()
            self.answers.append(answer)
            self._arrived.set()
            kind = answer.path.rsplit("/", 1)[-1]
            if kind == "stall":
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: 1000\r\n\r\n" + b"[" * 10)
                await writer.drain()
                await reader.read()  # b"" once the router closes its end
            elif kind in ("trickle", "flood"):
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"transfer-encoding: chunked\r\n\r\n")
                flood = kind == "flood"
                chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n" if flood else b"1\r\nx\r\n"
                while True:
                    writer.write(chunk)
                    await writer.drain()
                    if not flood:
                        await asyncio.sleep(0.05)
            else:  # one request per connection: not kept for the next
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: 2\r\nconnection: close\r\n\r\n{}")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            answer.closed.set()
            writer.close()
            self._serving.discard(task)
