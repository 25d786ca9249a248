"""The host end of one sandbox's egress byte stream, the same for every backend.

A backend creates a socketpair when it starts a sandbox and hands one end to the guest's
relay (a virtio-serial port's chardev for a microVM, the relay's inherited descriptor for
gVisor and bubblewrap); the other end is kept here. Nothing reads it until the sandbox is
bound to a run and ``attach`` starts ``EgressProxy.serve`` on it with that run's policy, so
a pooled sandbox reaches nothing; ``close`` (at destroy) stops serving and closes it."""

from __future__ import annotations

import asyncio
import socket

from tenantry.sandbox.egress.policy import EgressPolicy
from tenantry.sandbox.egress.proxy import EgressProxy
from tenantry.sandbox.types import SandboxRefused


class EgressPort:
    def __init__(self, host_end: socket.socket) -> None:
        self._socket: socket.socket | None = host_end
        self._serving: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def attach(self, proxy: EgressProxy, policy: EgressPolicy,
                     labels: dict[str, str]) -> None:
        """Serve this sandbox's channel with ``proxy`` under ``policy`` until ``close``.
        Once only: a sandbox serves one run, and so has one policy for its life."""
        if self._serving is not None or self._socket is None:
            raise SandboxRefused("this sandbox's egress is already attached (or closed)")
        host_end, self._socket = self._socket, None
        reader, self._writer = await asyncio.open_connection(sock=host_end)
        self._serving = asyncio.create_task(
            proxy.serve(reader, self._writer, policy, labels=labels),
            name=f"sandbox-egress-{labels.get('run', '')}")

    async def close(self) -> None:
        """Stop serving (every open connection of the sandbox ends) and close the host end.
        Idempotent."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        serving, self._serving = self._serving, None
        if serving is not None:
            serving.cancel()
            # Whatever serve() raised ends here with the sandbox (gather collects it); our
            # own cancellation still propagates.
            await asyncio.gather(serving, return_exceptions=True)
        writer, self._writer = self._writer, None
        if writer is not None:
            # serve() closes it on its way out, unless cancelled before it ever ran.
            writer.close()
