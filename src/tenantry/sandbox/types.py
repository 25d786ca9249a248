"""The sandbox vocabulary shared by every backend (DESIGN §10): limits, the binding of a
sandbox to one tenant's run, what an execution returns, the errors, and the two protocols
— ``Instance`` (what a backend starts) and ``SandboxDriver`` (what the platform uses)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tenantry.errors import TenantryError
from tenantry.ids import RunId, TenantId

if TYPE_CHECKING:
    from tenantry.sandbox.channel import AgentChannel
    from tenantry.sandbox.egress import EgressPolicy, EgressProxy
    from tenantry.sandbox.sandbox import Sandbox

#: Exit codes with a meaning of their own, whatever the backend (coreutils' ``timeout``
#: and the shell's 128+SIGKILL): the model and the trace can tell them apart.
EXIT_TIMEOUT = 124
EXIT_KILLED = 137

BACKENDS = ("microvm", "gvisor", "bwrap")


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-sandbox limits. Memory is the guest's RAM (microvm) or the cgroup's limit;
    ``pids`` caps processes (a fork bomb stops there); ``timeout_s`` is per execution."""

    cpus: float = 1.0
    memory_mib: int = 512
    pids: int = 128
    timeout_s: float = 60.0
    disk_mib: int = 256


@dataclass(frozen=True, slots=True)
class Binding:
    """Whose sandbox it is. Set once, at claim; a sandbox never serves another run."""

    tenant: TenantId
    run: RunId
    egress: tuple[str, ...] = ()  # hosts the tenant allowed; empty → no network at all


@dataclass(frozen=True, slots=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str
    duration_ms: float
    truncated: bool = False

    @property
    def timed_out(self) -> bool:
        return self.exit_code == EXIT_TIMEOUT

    @property
    def killed(self) -> bool:
        return self.exit_code == EXIT_KILLED


@dataclass(frozen=True, slots=True)
class FileEntry:
    name: str
    kind: str  # file | dir | link | other
    size: int


class SandboxError(TenantryError):
    type = "sandbox_error"
    title = "Sandbox error"


class SandboxUnavailable(SandboxError):
    """No sandbox could be started here (backend missing, image not built, host full)."""

    type = "sandbox_unavailable"
    retryable = True


class SandboxLost(SandboxError):
    """The sandbox died under us (guest crash, VM killed, channel closed): that step fails,
    the run goes on with a fresh sandbox."""

    type = "sandbox_lost"
    retryable = True


class SandboxRefused(SandboxError):
    """A request the sandbox will not carry out (a path outside the work directory, a file
    too large, a sandbox already bound to another run)."""

    type = "sandbox_refused"
    status = 400


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


class Backend(Protocol):
    name: str

    async def launch(self, limits: Limits) -> Instance:
        """A fresh instance, ready (its agent answered), the cheapest way this backend
        has (microvm: restore a clone of the booted template)."""

    async def close(self) -> None: ...


class SandboxDriver(Protocol):
    """What the platform uses: create (bound), then the sandbox's own methods."""

    backend: str

    async def create(self, binding: Binding, limits: Limits) -> Sandbox: ...

    async def close(self) -> None: ...
