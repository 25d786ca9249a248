"""What the gVisor and bwrap backends share: a sandbox held by one child process of the
worker (``ChildInstance``), its agent on that child's stdio, its egress stream, its cgroup
and its folder; the guest command both start, the host paths both expose read-only, and
how both find their programs. Neither backend imports the other; both import this.

Nothing an execution starts outlives it: the agent ends the execution's session, but code
can leave that session (``setsid``, a double fork) and, running as the agent's own uid, is
out of the agent's reach. So after every execution the host ends every process of the
sandbox that was not there when its agent said hello (``ChildInstance._end_leftovers``)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tenantry.sandbox.backends.accounting import Meter
from tenantry.sandbox.backends.cgroups import CgroupV1
from tenantry.sandbox.channel import MAX_LINE_BYTES, AgentChannel
from tenantry.sandbox.egress.policy import EgressPolicy
from tenantry.sandbox.egress.port import EgressPort
from tenantry.sandbox.egress.proxy import EgressProxy
from tenantry.sandbox.types import ResourceUsage, SandboxLost, SandboxUnavailable

#: Where the backends look for their programs, and the PATH their processes get.
HOST_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
#: The top-level entries Debian 12 has as symlinks into /usr (merged /usr) or directories.
ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
#: Host files the sandbox may read: what common tools look for, nothing that names users.
#: (fonts: fontconfig's configuration, which the browser needs to render text.)
ETC_FILES = ("alternatives", "ld.so.cache", "localtime", "nsswitch.conf", "mime.types",
             "fonts")

#: The Debian package to name when a program is missing.
PACKAGES = {"bwrap": "bubblewrap", "prlimit": "util-linux", "setpriv": "util-linux",
            "runsc": "runsc", "python3": "python3"}

#: The guest's egress relay, mounted read-only at /relay.py beside /agent.py.
RELAY_PATH = Path(__file__).parent.parent / "guest" / "relay.py"
#: The guest's browser driver, mounted read-only at /browser.py (the agent loads it).
BROWSER_PATH = Path(__file__).parent.parent / "guest" / "browser.py"
#: The agent's work-directory requests, mounted read-only at /files.py (the agent loads it).
FILES_PATH = Path(__file__).parent.parent / "guest" / "files.py"
_RELAY_READY = "/tmp/.tenantry-relay-ready"


def guest_command(pids: int) -> list[str]:
    """The sandbox's first process: the egress relay, then the agent.

    Its stdin is the agent's channel, a socket used both ways (the agent's stdout becomes a
    copy of it); its stdout is the egress channel, which only the relay keeps (as fd 3) —
    so stdio carries both, as gVisor passes nothing else in. The agent starts once the
    relay listens (its readiness line comes through a FIFO; EOF if it died, and the agent
    starts anyway): the host runs code as soon as the agent answers. The shell stays,
    waiting for the agent: as the sandbox's first process (gVisor's pid 1) it reaps
    the orphans an execution leaves once they are killed, which the agent does not."""
    relay = (f"mkfifo {_RELAY_READY} && {{ python3 -I /relay.py --fd 3 3>&1 </dev/null "
             f">{_RELAY_READY} & read -r _ <{_RELAY_READY}; rm -f {_RELAY_READY}; }}; ")
    agent = f"python3 -I /agent.py --workdir /work --nproc {pids} 1>&0"
    return ["/bin/sh", "-c", relay + agent]


class ExecChannel(AgentChannel):
    """The agent's channel, with ``after_exec`` run after every execution before the next
    request goes out (requests stay one at a time, the hook included), and
    ``after_browser`` after every browser request."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer)
        self.after_exec: Callable[[], Awaitable[None]] | None = None
        self.after_browser: Callable[[], Awaitable[None]] | None = None
        self._order = asyncio.Lock()

    async def request(
        self, op: str, *, timeout: float = 30.0, **fields: Any,  # noqa: ASYNC109 - the op's budget
    ) -> dict[str, Any]:
        async with self._order:
            try:
                return await super().request(op, timeout=timeout, **fields)
            finally:
                hook = {"exec": self.after_exec, "browser": self.after_browser}.get(op)
                if hook is not None and not self.closed:
                    await hook()


async def stdio_channels() -> tuple[ExecChannel, EgressPort, socket.socket, socket.socket]:
    """The host ends of a stdio sandbox's two channels, and the guest ends to give its
    process as stdin (the agent's) and stdout (the relay's); the caller closes those."""
    host_agent, guest_agent = socket.socketpair()
    host_egress, guest_egress = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=host_agent, limit=MAX_LINE_BYTES)
    return ExecChannel(reader, writer), EgressPort(host_egress), guest_agent, guest_egress


def require_binary(name: str) -> str:
    """The binary's path, or SandboxUnavailable naming the Debian package that has it."""
    found = shutil.which(name, path=HOST_PATH)
    if found is None:
        package = PACKAGES.get(name, name)
        raise SandboxUnavailable(f"{name} not found on {HOST_PATH}: install the Debian "
                                 f"package {package!r} (apt-get install {package})")
    return found


class ChildInstance:
    """Subclasses set ``backend`` and implement pause, resume, apply_limits and, if the
    sandbox needs more than killing its process and cgroup, ``_stop``."""

    backend: str

    def __init__(self, instance_id: str, directory: Path, process: asyncio.subprocess.Process,
                 cgroup: CgroupV1, channel: AgentChannel, egress: EgressPort,
                 forget: Callable[[str], None]) -> None:
        self.id = instance_id
        self.directory = directory
        self.process = process
        self.pid = process.pid  # the host process the sandbox dies with
        self.cgroup = cgroup
        # Over this view of the cgroup: gVisor's _stop swaps self.cgroup for what remains.
        self._meter = Meter(cgroup)
        self.channel = channel
        self._egress = egress
        self._forget = forget
        self._destroyed = False
        self._destroy_lock = asyncio.Lock()
        #: What runs in the sandbox once its agent is up (its init, relay, agent): kept.
        self.baseline: frozenset[int] = frozenset()
        if isinstance(channel, ExecChannel):
            channel.after_exec = self._after_exec
            # The browser the agent started (and the renderers it forked) lives for the
            # sandbox's life: it joins what the sweep after each execution keeps.
            channel.after_browser = self._take_baseline

    @property
    def alive(self) -> bool:
        return not self._destroyed and self.process.returncode is None

    async def attach_egress(self, proxy: EgressProxy, policy: EgressPolicy,
                            labels: dict[str, str]) -> None:
        await self._egress.attach(proxy, policy, labels)

    def pss_kib(self) -> int | None:
        """PSS of every process in the instance's cgroup (whatever the sandbox forked)."""
        return self.cgroup.pss_kib()

    def start_metering(self) -> None:
        self._meter.start()

    def usage(self) -> ResourceUsage | None:
        return self._meter.read()

    async def destroy(self) -> None:
        async with self._destroy_lock:
            if self._destroyed:
                return
            self._destroyed = True
            self._meter.stop()  # before the cgroup goes (runsc's delete removes it too)
            self.channel.close()
            await self._egress.close()
            await self._stop()
            # The cgroup holds every process of the sandbox, whatever it forked or detached;
            # destroying it thaws a paused (frozen) sandbox first — a frozen process ignores
            # SIGKILL until thawed, and waiting for it would hang.
            await asyncio.to_thread(self.cgroup.destroy)
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
            await asyncio.to_thread(shutil.rmtree, self.directory, True)
            self._forget(self.id)

    async def _stop(self) -> None:
        """Backend-specific teardown before the process is killed (none by default)."""

    async def _take_baseline(self) -> None:
        """Note what runs once the agent is up (by default: the cgroup's members)."""
        self.baseline = frozenset(await asyncio.to_thread(self.cgroup.pids))

    async def _end_leftovers(self) -> None:
        """Kill what the last execution left running (backend-specific)."""

    async def _after_exec(self) -> None:
        # If the leftovers cannot be ended, the sandbox is not used again: lost, destroyed.
        try:
            await self._end_leftovers()
        except (OSError, SandboxUnavailable) as exc:
            await self.destroy()
            raise SandboxLost(f"{self.backend} sandbox {self.id}: could not end what the "
                              f"execution left running: {exc}") from None

    async def ready(self, timeout: float, log: Path, label: str) -> None:  # noqa: ASYNC109
        """Wait for the agent's hello; on failure destroy the instance and say why, with
        the tail of the backend's own log."""
        try:
            await self.channel.wait_ready(timeout)
            await self._take_baseline()
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError) as exc:
            detail = tail(log)
            await self.destroy()
            raise SandboxUnavailable(f"{label} sandbox did not become ready "
                                     f"({type(exc).__name__}): {detail}") from None
        except BaseException:
            await self.destroy()
            raise


def tail(path: Path, limit: int = 2000) -> str:
    """The end of a backend's log file, for error messages."""
    try:
        return path.read_text(errors="replace")[-limit:].strip() or "(no output)"
    except OSError:
        return "(no log)"
