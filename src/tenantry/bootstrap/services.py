"""Running long-lived services in one asyncio process until SIGINT/SIGTERM.

uvicorn's own signal capture re-raises the signal after shutdown, which kills the process
before our clean-up (stopping the embedded Postgres) runs; so we own the signals here, ask
each service to stop, wait for them, then return normally (exit status 0)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import uvicorn

from tenantry.bootstrap import StartupFailed

Service = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


class ApiServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # signals are handled by run_until_signalled

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn calls sys.exit() when it cannot bind; inside a task that would stop the
        # whole event loop with a traceback. Turn it into "did not start" instead.
        try:
            await super().startup(sockets)
        except SystemExit:
            self.should_exit = True


class ServiceFailed(StartupFailed):
    """A service that did not start (the API could not bind its port)."""


def api_service(server: ApiServer, on_stop: Callable[[], None] | None = None) -> Service:
    async def serve(stop: asyncio.Event) -> None:
        serving = asyncio.create_task(server.serve(), name="api")
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if on_stop is not None:
            on_stop()
        server.should_exit = True
        stopping.cancel()
        await serving
        if not server.started and not stop.is_set():
            raise ServiceFailed(
                f"the API could not start on {server.config.host}:{server.config.port} "
                "(see the log above: port in use? database unreachable?)")
    return serve


async def run_until_signalled(*services: Service) -> None:
    """Run every service; stop all when a signal arrives or any one of them ends."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(service(stop)) for service in services]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    for result in results:
        if isinstance(result, BaseException):
            raise result
