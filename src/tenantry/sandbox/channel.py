"""The host's side of the guest agent's channel: one JSON object per line, one request at a
time. The same protocol runs over virtio-serial (microvm) and over a child's stdin/stdout
(gvisor, bwrap); the guest side is ``tenantry/sandbox/guest/agent.py``.

A request is ``{"id": n, "op": ..., ...}``; its reply ``{"id": n, "ok": true, ...}`` or
``{"id": n, "ok": false, "error": "..."}``. The agent's first line is ``{"ready": true}``."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

import orjson

from tenantry.sandbox.types import SandboxLost, SandboxRefused

#: Largest line either side accepts (a saved work directory travels base64 in one line).
MAX_LINE_BYTES = 96 * 1024 * 1024
#: Time the agent gets beyond an execution's own timeout to report it (it kills the
#: process itself at the timeout; past this the sandbox is taken for lost).
GRACE_SECONDS = 10.0


class AgentChannel:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter | Any) -> None:
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        self.closed = False
        self.hello: dict[str, Any] = {}

    async def wait_ready(self, timeout: float) -> dict[str, Any]:  # noqa: ASYNC109
        """Read until the agent's hello line (a booting kernel may print before it)."""
        async with asyncio.timeout(timeout):
            while True:
                message = await self._read_message()
                if message.get("ready"):
                    self.hello = message
                    return message

    async def request(
        self, op: str, *, timeout: float = 30.0, **fields: Any,  # noqa: ASYNC109 - the op's budget
    ) -> dict[str, Any]:
        """Send one request and wait for its reply. A refusal by the agent (bad path, too
        large) raises SandboxRefused; a dead or silent agent raises SandboxLost, and the
        channel stays closed after that: the sandbox is not trusted again."""
        if self.closed:
            raise SandboxLost("the sandbox's agent channel is closed")
        async with self._lock:
            request_id = next(self._ids)
            line = orjson.dumps({"id": request_id, "op": op, **fields}) + b"\n"
            try:
                self._writer.write(line)
                await self._writer.drain()
                async with asyncio.timeout(timeout):
                    while True:
                        message = await self._read_message()
                        if message.get("id") == request_id:
                            break
            except TimeoutError:
                self.close()
                raise SandboxLost(f"the sandbox's agent did not answer {op!r} within "
                                  f"{timeout:.0f} s") from None
            except (ConnectionError, OSError, asyncio.IncompleteReadError) as exc:
                self.close()
                raise SandboxLost(f"the sandbox's agent went away during {op!r}: "
                                  f"{type(exc).__name__}") from None
        if not message.get("ok"):
            raise SandboxRefused(str(message.get("error") or f"{op} refused"))
        return message

    async def _read_message(self) -> dict[str, Any]:
        while True:
            try:
                line = await self._reader.readuntil(b"\n")
            except asyncio.LimitOverrunError as exc:
                raise SandboxLost("the sandbox's agent sent an oversized line") from exc
            stripped = line.strip()
            if not stripped.startswith(b"{"):
                continue  # console noise on a shared line: not a message
            try:
                message = orjson.loads(stripped)
            except orjson.JSONDecodeError:
                continue
            if isinstance(message, dict):
                return message

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(Exception):
                self._writer.close()
