"""Running long-lived services in one asyncio process until SIGINT/SIGTERM.

uvicorn's own signal capture re-raises the signal after shutdown, which kills the process
before our clean-up (stopping the embedded Postgres) runs; so we own the signals here, ask
each service to stop, wait for them, then return normally (exit status 0). The HTTP
services (:mod:`.http_server`) are apart: a worker process serves none and so never
imports uvicorn."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from typing import Any

Service = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


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
