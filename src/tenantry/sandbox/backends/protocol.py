"""The two protocols every backend implements: ``Backend`` starts sandboxes,
``Instance`` is one started sandbox, not yet bound to a run."""

from __future__ import annotations

from typing import Protocol

from tenantry.sandbox.channel import AgentChannel
from tenantry.sandbox.egress.policy import EgressPolicy
from tenantry.sandbox.egress.proxy import EgressProxy
from tenantry.sandbox.types import Limits, ResourceUsage


class Instance(Protocol):
    """A started sandbox of one backend, not yet bound to a run. The backend owns the
    process (QEMU, runsc, bwrap); the guest agent answers on ``channel``."""

    backend: str
    id: str
    channel: AgentChannel

    @property
    def alive(self) -> bool: ...

    @property
    def pid(self) -> int | None:
        """The host process that holds the sandbox (QEMU, the runsc sandbox, bwrap)."""

    async def pause(self) -> None:
        """Stop using CPU while pooled (microvm: the VM stops; others may do nothing)."""

    async def resume(self) -> None: ...

    async def apply_limits(self, limits: Limits) -> None:
        """Narrow CPU (and whatever else can change after start) for the bound run."""

    async def attach_egress(self, proxy: EgressProxy, policy: EgressPolicy,
                            labels: dict[str, str]) -> None:
        """Serve the byte stream behind the guest's egress relay (its only way out) with
        ``proxy`` under the bound run's ``policy`` until ``destroy``. Once, at bind: until
        then nothing reads that stream, so a pooled sandbox reaches nothing."""

    async def destroy(self) -> None:
        """Kill the process and remove every file it had on the host. Idempotent."""

    def pss_kib(self) -> int | None:
        """Proportional set size of the backend's processes, for the benchmarks."""

    def start_metering(self) -> None:
        """Count resource use from now (the claim: launching and warming a pooled sandbox
        are the platform's, not the bound run's). Called again, it counts from then (a
        reused activity sandbox's next task)."""

    def usage(self) -> ResourceUsage | None:
        """CPU time and peak memory since ``start_metering``, as the host accounts the
        sandbox's processes; frozen at ``destroy``. None: this backend cannot tell."""


class Backend(Protocol):
    name: str

    async def launch(self, limits: Limits) -> Instance:
        """A fresh instance, ready (its agent answered), the cheapest way this backend
        has (microvm: restore a clone of the booted template)."""

    async def close(self) -> None: ...
