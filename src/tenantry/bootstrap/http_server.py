"""An HTTP service (the API, a worker's /metrics) under :func:`.services.run_until_signalled`:
uvicorn without its own signal handling, and a failure to bind reported as one line."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Callable, Iterator

import uvicorn

from tenantry.bootstrap import StartupFailed
from tenantry.bootstrap.services import Service


class ApiServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # signals are handled by run_until_signalled

    #: Why the port could not be bound (uvicorn logs it, then exits), else None.
    bind_error: OSError | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn calls sys.exit() when it cannot bind; inside a task that would stop the
        # whole event loop with a traceback. Turn it into "did not start" instead, keeping
        # the bind's error (the exit's context) to say exactly what went wrong.
        try:
            await super().startup(sockets)
        except SystemExit as exc:
            if isinstance(exc.__context__, OSError):
                self.bind_error = exc.__context__
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
            raise ServiceFailed(why_not_started(server))
    return serve


def why_not_started(server: ApiServer) -> str:
    where = f"{server.config.host}:{server.config.port}"
    error = server.bind_error
    if error is not None and error.errno == errno.EADDRINUSE:
        return f"port {server.config.port} on {server.config.host} is in use"
    if error is not None:
        return f"cannot listen on {where}: {error.strerror or error}"
    return f"the API could not start on {where} (see the log above: database unreachable?)"
