"""One running microVM as the sandbox sees it (the ``microvm`` backend's instance): its QEMU
process, monitor (QMP), agent channel, egress port and cgroup, paused and resumed through the
monitor, metered from its cgroup (else the process), and destroyed with everything it had."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

from tenantry.sandbox.backends.accounting import Meter, ProcessSource
from tenantry.sandbox.backends.cgroups import CgroupV1
from tenantry.sandbox.backends.qmp import QmpClient, QmpError
from tenantry.sandbox.channel import AgentChannel
from tenantry.sandbox.egress.policy import EgressPolicy
from tenantry.sandbox.egress.port import EgressPort
from tenantry.sandbox.egress.proxy import EgressProxy
from tenantry.sandbox.types import Limits, ResourceUsage, SandboxLost


class MicroVmInstance:
    backend = "microvm"

    def __init__(self, instance_id: str, process: asyncio.subprocess.Process,
                 qmp: QmpClient, channel: AgentChannel, egress: EgressPort,
                 cgroup: CgroupV1 | None, directory: Path,
                 on_destroyed: Callable[[str], None] | None = None,
                 host_uid: int | None = None) -> None:
        self.id = instance_id
        self.channel = channel
        self._egress = egress
        self.pid = process.pid
        self.directory = directory
        self._process = process
        self._qmp = qmp
        self._cgroup = cgroup
        # QEMU's accounting: its cgroup (QEMU is its only process), else the process
        # itself — either way guest RAM the VM touched and the emulation's CPU count.
        self._meter = Meter(cgroup if cgroup is not None else ProcessSource(process.pid))
        self._destroyed = False
        self._on_destroyed = on_destroyed
        self.host_uid = host_uid  # None when not root: QEMU runs as the worker's uid

    @property
    def alive(self) -> bool:
        return not self._destroyed and self._process.returncode is None

    async def pause(self) -> None:
        await self._monitor("stop")

    async def resume(self) -> None:
        await self._monitor("cont")

    async def _monitor(self, command: str) -> None:
        try:
            await self._qmp.execute(command)
        except QmpError as exc:
            raise SandboxLost(f"microvm {self.id}: {command} failed: {exc}") from None

    async def status(self) -> str:
        """QEMU's run state: ``running``, ``paused``, … (``query-status``)."""
        try:
            reply = await self._qmp.execute("query-status")
        except QmpError as exc:
            raise SandboxLost(f"microvm {self.id}: query-status failed: {exc}") from None
        return str(reply.get("status"))

    async def apply_limits(self, limits: Limits) -> None:
        if self._cgroup is not None:
            self._cgroup.set_cpus(limits.cpus)

    async def attach_egress(self, proxy: EgressProxy, policy: EgressPolicy,
                            labels: dict[str, str]) -> None:
        await self._egress.attach(proxy, policy, labels)

    def start_metering(self) -> None:
        self._meter.start()

    def usage(self) -> ResourceUsage | None:
        return self._meter.read()

    async def destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        self._meter.stop()  # while QEMU and its cgroup are still there to read
        self.channel.close()
        await self._egress.close()
        self._qmp.close()
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.send_signal(signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            await self._process.wait()
        if self._cgroup is not None:
            await asyncio.to_thread(self._cgroup.destroy)
        shutil.rmtree(self.directory, ignore_errors=True)
        if self._on_destroyed is not None:
            self._on_destroyed(self.id)

    def pss_kib(self) -> int | None:
        try:
            text = Path(f"/proc/{self.pid}/smaps_rollup").read_text()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
        return None
