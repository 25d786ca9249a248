"""The sandbox vocabulary shared by every backend: limits, the binding of a
sandbox to one tenant's run, what an execution returns, and the errors. It imports nothing
else of ``sandbox/``; the protocols built on it live with what they describe —
``Instance``/``Backend`` in ``backends/protocol.py``, ``SandboxDriver`` in ``sandbox.py``."""

from __future__ import annotations

from dataclasses import dataclass

from tenantry.errors import TenantryError
from tenantry.ids import AttemptId, RunId, TenantId

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
    """Whose sandbox it is. Set once, at claim; a sandbox never serves another run.
    ``run`` is the run it serves, or the activity attempt (an attempt is not a run, but
    the sandbox treats both alike: labels, blob names, never reused) — unless ``serves`` names
    the activity version it may serve again, for the same tenant only."""

    tenant: TenantId
    run: RunId | AttemptId
    egress: tuple[str, ...] = ()  # hosts the tenant allowed; empty → no network at all
    #: Set only for an activity sandbox that may serve more than one task (batching, warm
    #: state; ADR 0014): the one activity version it serves, ``"{agent_id}@{version}"``,
    #: always of ``tenant``. None: it serves ``run`` alone.
    serves: str | None = None


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
class ResourceUsage:
    """What a sandbox's host processes used since it was bound (ADR 0016), as the host
    accounts them (cgroup, or QEMU's own process): CPU time, user + system, and the highest
    memory charged. None: the host could not read that figure (never a made-up 0)."""

    cpu_ns: int | None
    peak_memory_bytes: int | None

    @property
    def cpu_s(self) -> float | None:
        return None if self.cpu_ns is None else self.cpu_ns / 1e9


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
