"""Running long-lived services in one asyncio process until SIGINT/SIGTERM.

uvicorn's own signal capture re-raises the signal after shutdown, which kills the process
before our clean-up (stopping the embedded Postgres) runs; so we own the signals here and
ask each service to stop, then return normally (exit status 0)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator

import uvicorn


class ApiServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # signals are handled by run_until_signalled


async def run_until_signalled(server: ApiServer) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    serving = asyncio.create_task(server.serve(), name="api")
    stopping = asyncio.create_task(stop.wait(), name="signal")
    try:
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        server.should_exit = True
        stopping.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    await serving  # re-raises a startup failure
    if server.started is False and not stop.is_set():
        raise SystemExit("the API server failed to start")
