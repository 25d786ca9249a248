"""What the gVisor and bwrap instances share: a sandbox held by one child process of the
worker, its agent on that child's stdio, its egress stream, its cgroup and its folder."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Callable
from pathlib import Path

from tenantry.sandbox.cgroups import CgroupV1
from tenantry.sandbox.channel import AgentChannel
from tenantry.sandbox.egress import EgressPolicy, EgressProxy
from tenantry.sandbox.egress_port import EgressPort
from tenantry.sandbox.types import SandboxUnavailable


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
        self.channel = channel
        self._egress = egress
        self._forget = forget
        self._destroyed = False
        self._destroy_lock = asyncio.Lock()

    @property
    def alive(self) -> bool:
        return not self._destroyed and self.process.returncode is None

    async def attach_egress(self, proxy: EgressProxy, policy: EgressPolicy,
                            labels: dict[str, str]) -> None:
        await self._egress.attach(proxy, policy, labels)

    def pss_kib(self) -> int | None:
        """PSS of every process in the instance's cgroup (whatever the sandbox forked)."""
        return self.cgroup.pss_kib()

    async def destroy(self) -> None:
        async with self._destroy_lock:
            if self._destroyed:
                return
            self._destroyed = True
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

    async def ready(self, timeout: float, log: Path, label: str) -> None:  # noqa: ASYNC109
        """Wait for the agent's hello; on failure destroy the instance and say why, with
        the tail of the backend's own log."""
        try:
            await self.channel.wait_ready(timeout)
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
