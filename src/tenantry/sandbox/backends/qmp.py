"""A small asyncio client for QEMU's machine protocol (QMP): the greeting and capabilities
handshake, ``execute``, and passing a file descriptor (``getfd``) for ``migrate fd:``.
Asynchronous events are read past and dropped: nothing here waits for one."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import socket
from typing import Any

from tenantry.sandbox.types import SandboxError


class QmpError(SandboxError):
    """QEMU refused a command, or its monitor went away."""

    type = "sandbox_qmp_error"
    retryable = True

    def __init__(self, message: str, *, error_class: str | None = None) -> None:
        super().__init__(message)
        self.error_class = error_class


class QmpClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        self.greeting: dict[str, Any] = {}

    @classmethod
    async def connect(cls, sock: socket.socket) -> QmpClient:
        """Speak QMP on ``sock`` (a connected unix socket, e.g. one end of a socketpair
        whose other end QEMU holds): read the greeting, negotiate capabilities. Callers
        bound the wait with ``asyncio.timeout``."""
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=1 << 20)
        client = cls(reader, writer)
        try:
            client.greeting = await client._read()
            if "QMP" not in client.greeting:
                raise QmpError(f"not a QMP greeting: {client.greeting!r}")
            await client.execute("qmp_capabilities")
        except BaseException:
            client.close()
            raise
        return client

    async def execute(self, command: str, **arguments: Any) -> Any:
        """Run one command and return its ``return`` value; QMP errors raise QmpError."""
        return await self._call(command, arguments, None)

    async def execute_with_fd(self, command: str, fd: int, **arguments: Any) -> Any:
        """Like ``execute``, with ``fd`` passed alongside (SCM_RIGHTS), as ``getfd`` wants."""
        return await self._call(command, arguments, fd)

    async def _call(self, command: str, arguments: dict[str, Any], fd: int | None) -> Any:
        async with self._lock:
            request_id = next(self._ids)
            message: dict[str, Any] = {"execute": command, "id": request_id}
            if arguments:
                message["arguments"] = arguments
            data = json.dumps(message).encode() + b"\n"
            try:
                if fd is None:
                    self._writer.write(data)
                    await self._writer.drain()
                else:
                    await self._writer.drain()  # nothing of ours may be queued before it
                    self._send_with_fd(data, fd)
                while True:
                    reply = await self._read()
                    if "event" in reply:
                        continue
                    if reply.get("id") == request_id:
                        break
            except (ConnectionError, OSError, asyncio.IncompleteReadError) as exc:
                raise QmpError(f"QEMU's monitor went away during {command}: {exc!r}") from None
        if "error" in reply:
            error = reply["error"]
            raise QmpError(f"{command}: {error.get('desc', error)}",
                           error_class=error.get("class"))
        return reply.get("return")

    def _send_with_fd(self, data: bytes, fd: int) -> None:
        # asyncio's transport cannot carry ancillary data: send through a duplicate of its
        # socket. The message is tiny and the buffer empty, so one sendmsg takes it whole.
        transport_socket = self._writer.get_extra_info("socket")
        duplicate = socket.socket(fileno=os.dup(transport_socket.fileno()))
        try:
            sent = socket.send_fds(duplicate, [data], [fd])
        finally:
            duplicate.close()
        if sent != len(data):
            raise ConnectionError("short write passing a descriptor to QEMU")

    async def _read(self) -> dict[str, Any]:
        line = await self._reader.readline()
        if not line:
            raise ConnectionResetError("QMP connection closed")
        message = json.loads(line)
        if not isinstance(message, dict):
            raise QmpError(f"unexpected QMP message {message!r}")
        return message

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()
