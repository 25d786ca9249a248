"""A host "outside" the platform, for the tests that need a sandbox to reach the Internet
through its egress proxy: a network namespace holding a public address (``ADDRESS``, one
this machine never reaches otherwise), routed from this host's namespace over a veth pair,
with tests.support.outside_server listening in it. The proxy vets ``ADDRESS`` as any public
host (nothing is relaxed), and connects to it as to any other.

Needs root and iproute2 (as `make test` runs). Nothing here imports pytest."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

#: Public (not private, reserved or special) and never routed here but by the test's veth.
ADDRESS = "20.0.113.7"
PORT = 8080


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@dataclass
class OutsideHost:
    process: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)
    _seen: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://{ADDRESS}:{PORT}"

    @property
    def egress(self) -> str:
        """The agent's ``sandbox.egress`` entry that allows it."""
        return f"{ADDRESS}:{PORT}"

    async def requests(self, count: int, within: float = 120) -> list[str]:
        """The first ``count`` refund requests' keys, once that many have arrived."""
        async with asyncio.timeout(within):
            while sum(line.startswith("REQUEST ") for line in self.lines) < count:
                self._seen.clear()
                await self._seen.wait()
        return [line.split("key=", 1)[1] for line in self.lines if line.startswith("REQUEST ")]

    async def release(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"RELEASE\n")
        await self.process.stdin.drain()

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            self.lines.append(line.decode().strip())
            self._seen.set()


@asynccontextmanager
async def outside_host(*, hold: bool = False) -> AsyncIterator[OutsideHost]:
    """The outside host, its server answering (holding the first refund with ``hold``)."""
    tag = uuid.uuid4().hex[:6]
    ns, here, there = f"tnt-out-{tag}", f"tno{tag}", f"tni{tag}"
    near = "10.213.0.1"
    _ip("netns", "add", ns)
    try:
        _ip("link", "add", here, "type", "veth", "peer", "name", there)
        _ip("link", "set", there, "netns", ns)
        _ip("addr", "add", f"{near}/32", "dev", here)
        _ip("link", "set", here, "up")
        _ip("route", "add", f"{ADDRESS}/32", "dev", here, "src", near)
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "addr", "add", f"{ADDRESS}/32", "dev", there)
        _ip("-n", ns, "link", "set", there, "up")
        _ip("-n", ns, "route", "add", f"{near}/32", "dev", there)
        command = ["ip", "netns", "exec", ns, sys.executable, "-m",
                   "tests.support.outside_server", "--port", str(PORT),
                   *(["--hold"] if hold else [])]
        process = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        host = OutsideHost(process)
        reader = asyncio.create_task(host._read())
        try:
            async with asyncio.timeout(30):
                while "READY" not in host.lines:
                    if process.returncode is not None:
                        raise RuntimeError("the outside server exited before it was ready")
                    host._seen.clear()
                    await host._seen.wait()
            yield host
        finally:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
    finally:
        with contextlib.suppress(RuntimeError):
            _ip("link", "del", here)
        _ip("netns", "del", ns)


def refunds(lines: list[str]) -> int:
    """Refunds the server made, from the request keys it printed: one per distinct key, one
    per request without a key."""
    keys = [line.split("key=", 1)[1] for line in lines if line.startswith("REQUEST ")]
    return len({k for k in keys if k != "-"}) + keys.count("-")

