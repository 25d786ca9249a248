"""Serve an ASGI app with uvicorn on a loopback socket, inside the running event loop or as
the main thing a helper process does. The built-in scripted model serves on it, and so do
the test servers shipped for users' tests (fake model, MCP)."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import contextvars
import logging
import signal
import socket
from collections.abc import Generator
from types import TracebackType
from typing import Self

import uvicorn
from starlette.types import ASGIApp

# Set in the tasks of a server embedded in another process's loop: uvicorn logs its
# start-up and shutdown lines ("Started server process", "Application startup complete")
# on the shared `uvicorn.error` logger, where they read as the host API's, twice.
_embedded = contextvars.ContextVar("tenantry_loopback_embedded", default=False)


class _QuietEmbedded(logging.Filter):
    """Drops an embedded server's routine uvicorn lines; its warnings and errors stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not _embedded.get()


def _quiet_embedded_servers() -> None:
    uvicorn_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _QuietEmbedded) for f in uvicorn_log.filters):
        uvicorn_log.addFilter(_QuietEmbedded())


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, *, handle_signals: bool) -> None:
        super().__init__(config)
        self._handle_signals = handle_signals

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # Embedded in another loop (the platform's, a test's), uvicorn must not take over
        # the host's SIGINT/SIGTERM. As a process's main thing, SIGINT/SIGTERM stop it and
        # the process ends normally: uvicorn's own capture re-raises the signal once
        # stopped, which ends `asyncio.run` in a KeyboardInterrupt traceback.
        if not self._handle_signals:
            yield
            return
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._exit_on, sig)
        try:
            yield
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    def _exit_on(self, sig: int) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True  # a second Ctrl-C: do not wait for requests in flight
        self.should_exit = True


class LoopbackServer:
    """``await start()`` returns once the socket accepts connections; ``await stop()``
    shuts down gracefully (in-flight requests get ``grace_s`` seconds)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        handle_signals: bool = False,
        grace_s: int = 1,
    ) -> None:
        # Binding the socket ourselves (port 0 = any free port) avoids the race of probing
        # for a free port and binding it later. IPPROTO_TCP explicitly: asyncio only sets
        # TCP_NODELAY on accepted sockets whose proto says TCP, and without it every
        # request/response pair waits ~40 ms on delayed ACKs.
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((host, port))
        except OSError:
            self._socket.close()
            raise
        self.host = host
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on",
                                timeout_graceful_shutdown=grace_s, timeout_keep_alive=30)
        self._server = _Server(config, handle_signals=handle_signals)
        self._task: asyncio.Task[None] | None = None
        self._embedded = not handle_signals
        if self._embedded:
            _quiet_embedded_servers()

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("server already started")
        # The server's tasks (connections, lifespan) inherit this context.
        context = contextvars.copy_context()
        context.run(_embedded.set, self._embedded)
        self._task = asyncio.create_task(self._server.serve(sockets=[self._socket]),
                                         context=context)
        while not self._server.started:
            if self._task.done():
                # Startup failed (uvicorn exits with SystemExit): surface it as an error.
                exc = self._task.exception()
                raise RuntimeError("loopback server failed to start") from exc
            await asyncio.sleep(0.005)

    async def wait(self) -> None:
        """Until the server stops (a signal in process mode, or ``stop()``)."""
        if self._task is not None:
            await self._task

    async def stop(self) -> None:
        if self._task is None:
            self._socket.close()
            return
        self._server.should_exit = True
        await self._task


class LoopbackService(abc.ABC):
    """The shared lifecycle of the loopback servers: ``async with`` (or ``start``/``stop``),
    ``wait`` until stopped, and the ``origin`` they listen on."""

    def __init__(self, *, host: str, port: int, handle_signals: bool) -> None:
        self._host, self._port, self._handle_signals = host, port, handle_signals
        self._http: LoopbackServer | None = None

    @abc.abstractmethod
    def _app(self) -> ASGIApp:
        """The ASGI app to serve, built afresh for each start."""

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT``."""
        if self._http is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return f"http://{self._http.host}:{self._http.port}"

    async def start(self) -> None:
        self._http = LoopbackServer(self._app(), host=self._host, port=self._port,
                                    handle_signals=self._handle_signals)
        await self._http.start()

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.stop()

    async def wait(self) -> None:
        if self._http is not None:
            await self._http.wait()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
