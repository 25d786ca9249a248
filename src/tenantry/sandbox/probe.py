"""Probing which sandbox backend works here and building the worker's sandbox manager over
it at start-up: the configured backend, or the first that works here of
microvm → gvisor → bwrap. The choice and the reasons the others were passed over are
logged, and every sandbox reports its backend in the trace.

The boundary in force is ranked against ``TENANTRY_SANDBOX_MIN_BOUNDARY``, strongest first:
microvm > gvisor > microvm degraded > bwrap. A microVM is *degraded* when its QEMU runs
without its own network namespace, unprivileged uid and cgroup (the worker is not root, or
cgroup v1 is missing): an escape from QEMU then lands as the worker's user, on the host's
network, unlimited — worse than an escape from gVisor's sandboxed sentry, better than bwrap's
shared kernel. A production worker refuses a boundary below the minimum
(:func:`require_boundary`); ``tenantry up`` takes it with a warning (:func:`downgrade`)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from tenantry.blobs import BlobStore
from tenantry.config import Settings
from tenantry.sandbox.backends.cgroups import CgroupV1
from tenantry.sandbox.backends.protocol import Backend
from tenantry.sandbox.manager import SandboxManager
from tenantry.sandbox.pool import PooledDriver
from tenantry.sandbox.types import BACKENDS, Limits, SandboxError, SandboxUnavailable

logger = logging.getLogger(__name__)

AGENT_PATH = Path(__file__).parent / "guest" / "agent.py"
#: Debian package that provides each backend's program (the project's setup installs it).
PACKAGES = {"microvm": ("qemu-system-x86_64", "qemu-system-x86"),
            "gvisor": ("runsc", "runsc"), "bwrap": ("bwrap", "bubblewrap")}


@dataclass(frozen=True, slots=True)
class Detection:
    chosen: str | None
    why_not: dict[str, str] = field(default_factory=dict)  # backend → what it lacks


#: Strength of each boundary (higher is stronger); a degraded microVM sits between gVisor
#: and bwrap (the module's docstring says why). The minimum takes the three plain names.
STRENGTH = {"microvm": 4, "gvisor": 3, "microvm-degraded": 2, "bwrap": 1}
#: What each backend confines with when nothing is missing (for `sandbox probe`).
CONFINEMENT = {
    "microvm": "own guest kernel; QEMU with seccomp, in its own network namespace, as an "
               "unprivileged uid, in a cgroup",
    "gvisor": "gVisor user-space kernel (runsc), cgroup limits, no network",
    "bwrap": "namespaces, seccomp deny-list, cgroup limits; shares the host kernel "
             "(development only)",
}


class BoundaryTooWeak(SandboxError):
    """A production worker would run tenants' code behind less than the minimum."""

    type = "sandbox_boundary_too_weak"
    title = "Sandbox boundary below the minimum"


@dataclass(frozen=True, slots=True)
class Boundary:
    """The isolation a worker started now would give tenants' code. ``backend`` None:
    no code execution (configured ``none``, or nothing works here: ``configured`` says
    which); ``degradations`` lists what the backend runs without on this host."""

    backend: str | None
    configured: bool
    degradations: tuple[str, ...] = ()
    why_not: dict[str, str] = field(default_factory=dict)

    @property
    def rank(self) -> str | None:
        """The backend's place in :data:`STRENGTH` (None: no code execution)."""
        if self.backend == "microvm" and self.degradations:
            return "microvm-degraded"
        return self.backend

    @property
    def label(self) -> str:
        if self.backend is None:
            return "none (code execution off)" if self.configured else \
                "none (no sandbox backend works here: code execution off)"
        if self.degradations:
            return f"{self.backend}, degraded: {', '.join(self.degradations)}"
        return self.backend

    def weaker_than(self, minimum: str) -> bool:
        """Below ``minimum``; no code execution by choice is never a downgrade, by
        necessity always is (the operator did not ask to run without it)."""
        if self.rank is None:
            return not self.configured
        return STRENGTH[self.rank] < STRENGTH[minimum]


def microvm_degradations() -> tuple[str, ...]:
    """What the microvm backend's QEMU runs without here. It confines QEMU only as root
    (``MicroVmBackend._start``/``_cgroup``: ``unshare --net``, ``setpriv``, CgroupV1), so
    this reads the same two facts; its seccomp filter applies whatever the uid."""
    if os.geteuid() != 0:
        return ("no network namespace", "no cgroup limits",
                "no unprivileged uid (the worker is not root)")
    if not CgroupV1.available():
        return ("no cgroup limits (cgroup v1 memory, cpu and pids controllers not found)",)
    return ()


def boundary(settings: Settings) -> Boundary:
    """The boundary a worker would start with here, without starting anything."""
    name = settings.sandbox_backend
    if name == "none":
        return Boundary(None, configured=True)
    found = detect(settings)
    if name is None:
        name = found.chosen
        configured = False
    else:
        configured = True
    if name is None:
        return Boundary(None, configured=False, why_not=found.why_not)
    degraded = microvm_degradations() if name == "microvm" else ()
    return Boundary(name, configured, degraded, found.why_not)


def _shortfall(found: Boundary, minimum: str, *, starting: bool) -> str:
    """The boundary, why nothing stronger is available and what to do: one line."""
    have = STRENGTH[found.rank] if found.rank is not None else 0
    why = [f"{name}: {found.why_not[name]}" for name in BACKENDS
           if name in found.why_not and STRENGTH[name] > have]
    fix = []
    if found.configured:
        why.insert(0, f"TENANTRY_SANDBOX_BACKEND={found.backend} is configured")
        fix.append("unset TENANTRY_SANDBOX_BACKEND or configure a stronger one")
    if found.degradations:
        why.insert(0, "microvm runs QEMU unconfined unless the worker is root with cgroup v1")
        fix.append("run the worker as root (QEMU then gets its own network namespace, an "
                   "unprivileged uid and a cgroup)")
    if any(name in found.why_not for name in BACKENDS if STRENGTH[name] > have):
        fix.append("install or build what is missing")
    fix.append(f"or, knowingly, set TENANTRY_SANDBOX_MIN_BOUNDARY lower than {minimum}")
    fix.append("or TENANTRY_SANDBOX_BACKEND=none to run without code execution")
    verb = "is" if starting else "would be"
    return (f"sandbox boundary in force {verb} {found.label}, weaker than "
            f"TENANTRY_SANDBOX_MIN_BOUNDARY={minimum} ({'; '.join(why)}); to fix: "
            f"{', '.join(fix)}")


def require_boundary(settings: Settings) -> Boundary:
    """A production worker's check: the boundary in force, or BoundaryTooWeak (one line
    naming it, why nothing stronger is available and how to fix it)."""
    found = boundary(settings)
    if found.configured and found.backend in found.why_not:
        # Said now, in one line, rather than as a traceback once the worker builds it.
        raise SandboxUnavailable(f"TENANTRY_SANDBOX_BACKEND={found.backend} cannot run "
                                 f"here: {found.why_not[found.backend]}")
    if found.weaker_than(settings.sandbox_min_boundary):
        raise BoundaryTooWeak(_shortfall(found, settings.sandbox_min_boundary,
                                         starting=False))
    return found


def downgrade(settings: Settings) -> str | None:
    """Development (``tenantry up``): the warning line when the boundary in force is below
    the minimum (it starts anyway), else None."""
    found = boundary(settings)
    if not found.weaker_than(settings.sandbox_min_boundary):
        return None
    return ("warning: " + _shortfall(found, settings.sandbox_min_boundary, starting=True)
            + " (development: `tenantry up` starts anyway; `tenantry worker` refuses)")


def shortfall(settings: Settings) -> str | None:
    """``/readyz``'s reason while the boundary in force is below the minimum (``tenantry
    up`` starts anyway), else None."""
    found = boundary(settings)
    if not found.weaker_than(settings.sandbox_min_boundary):
        return None
    return (f"sandbox: the boundary in force is {found.label}, weaker than "
            f"TENANTRY_SANDBOX_MIN_BOUNDARY={settings.sandbox_min_boundary}")


def detect(settings: Settings) -> Detection:
    """What works on this host, without starting anything."""
    why_not: dict[str, str] = {}
    for name in BACKENDS:
        program, package = PACKAGES[name]
        if shutil.which(program) is None:
            why_not[name] = f"{program} not found (Debian package {package})"
            continue
        if name in ("gvisor", "bwrap") and not CgroupV1.available():
            # Both refuse to start without them (their constructors): probing must not
            # pick a backend that cannot start.
            why_not[name] = "needs cgroup v1 memory, cpu and pids controllers (not found)"
            continue
        if name == "microvm":
            from tenantry.sandbox.image import find_image

            if find_image(settings.sandbox_dir) is None:
                why_not[name] = ("no guest image built; run `tenantry sandbox build-image` "
                                 f"(looked in {settings.sandbox_dir})")
                continue
    available = [name for name in BACKENDS if name not in why_not]
    return Detection(available[0] if available else None, why_not)


def default_limits(settings: Settings) -> Limits:
    return Limits(memory_mib=settings.sandbox_memory_mib,
                  timeout_s=float(settings.sandbox_timeout_seconds),
                  disk_mib=settings.sandbox_work_mib)


#: Processes (threads count) a browser sandbox may have: Chromium's browser, renderer,
#: network and GPU processes and their threads come on top of the code's.
BROWSER_PIDS = 256
#: Where the gVisor and bwrap sandboxes find the browser (Debian's chromium-headless-shell,
#: in the host's read-only /usr); the microVM's browser image has its own copy.
HOST_BROWSER = Path("/usr/lib/chromium/chromium-headless-shell")


def browser_limits(settings: Settings) -> Limits:
    """A browser sandbox's limits: the code sandbox's, with the browser's memory and
    processes."""
    code = default_limits(settings)
    return replace(code, memory_mib=settings.sandbox_browser_memory_mib,
                   pids=max(code.pids, BROWSER_PIDS))


def browser_driver(name: str, settings: Settings) -> PooledDriver | None:
    """The driver of the worker's browser sandboxes (no warm pool: ADR 0033), or None with
    the reason logged — the browser tools then answer that the browser is unavailable."""
    try:
        if name != "microvm" and not HOST_BROWSER.exists():
            raise SandboxUnavailable(f"{HOST_BROWSER} not found: install the Debian package "
                                     "chromium-headless-shell")
        backend = build_backend(name, settings, variant="browser")
    except SandboxUnavailable as exc:
        logger.warning("the browser tools are not available on this worker: %s", exc.detail)
        return None
    return PooledDriver(backend, pool_size=0, limits=browser_limits(settings))


#: /tmp of a browser microVM (init.sh's tenantry.tmp_mib): Chromium's profile, cache and
#: shared memory (it runs with --disable-dev-shm-usage: /dev/shm is 16 MiB) live there.
BROWSER_TMP_MIB = 512


def build_backend(name: str, settings: Settings, *, variant: str = "code") -> Backend:
    """The named backend; SandboxUnavailable (with the reason) if it cannot run here.
    ``variant`` "browser": sandboxes that also run a headless Chromium — for microvm the
    browser guest image, with its own RAM size and a bigger /tmp; gvisor and bwrap take the
    browser from the host's /usr, so for them it changes nothing here."""
    if variant not in ("code", "browser"):
        raise ValueError(f"unknown sandbox variant {variant!r} (code or browser)")
    program, package = PACKAGES[name]
    if shutil.which(program) is None:
        raise SandboxUnavailable(f"{name}: {program} not found (Debian package {package})")
    state = settings.data_dir / "sandbox-state" / name
    state.mkdir(parents=True, exist_ok=True)
    if name == "microvm":
        from tenantry.sandbox.backends.microvm import MicroVmBackend
        from tenantry.sandbox.image import find_image

        image = find_image(settings.sandbox_dir, variant)
        if image is None:
            flag = "" if variant == "code" else f" --variant {variant}"
            raise SandboxUnavailable(f"microvm: no {variant} guest image; run `tenantry "
                                     f"sandbox build-image{flag}` (looked in "
                                     f"{settings.sandbox_dir})")
        if variant == "browser":
            return MicroVmBackend(image, settings.sandbox_dir / "microvm",
                                  memory_mib=settings.sandbox_browser_memory_mib,
                                  tmp_mib=BROWSER_TMP_MIB)
        return MicroVmBackend(image, settings.sandbox_dir / "microvm",
                              memory_mib=settings.sandbox_memory_mib)
    if name == "gvisor":
        from tenantry.sandbox.backends.gvisor import GvisorBackend

        return GvisorBackend(state, AGENT_PATH)
    from tenantry.sandbox.backends.bwrap import BwrapBackend

    return BwrapBackend(state, AGENT_PATH)


@contextlib.asynccontextmanager
async def sandbox_manager(settings: Settings,
                          blobs: BlobStore) -> AsyncIterator[SandboxManager | None]:
    """The worker's sandbox manager over the chosen backend's warm pool, or None when code
    execution is off (configured ``none``, or nothing works here: logged loudly)."""
    found = boundary(settings)
    if found.backend is None and found.configured:
        logger.info("sandbox boundary in force: %s", found.label)
        yield None
        return
    for other, reason in found.why_not.items():
        logger.info("sandbox backend %s not usable here: %s", other, reason)
    if found.backend is None:
        logger.warning("no sandbox backend works here: built-in code tools will answer "
                       "that code execution is unavailable")
        yield None
        return
    name = found.backend
    driver = PooledDriver(build_backend(name, settings), pool_size=settings.sandbox_pool_size,
                          limits=default_limits(settings))
    weaker = found.weaker_than(settings.sandbox_min_boundary)
    logger.log(logging.WARNING if weaker else logging.INFO,
               "sandbox boundary in force: %s%s", found.label,
               f" (below TENANTRY_SANDBOX_MIN_BOUNDARY={settings.sandbox_min_boundary})"
               if weaker else "",
               extra={"pool_size": settings.sandbox_pool_size, "backend": name,
                      "degradations": list(found.degradations)})
    driver.start()
    manager = SandboxManager(driver, blobs, limits=default_limits(settings),
                             hibernate_after=float(settings.sandbox_hibernate_seconds),
                             kept_max=settings.sandbox_kept_max,
                             kept_per_tenant=settings.sandbox_kept_per_tenant,
                             browser_driver=browser_driver(name, settings),
                             browser_limits=browser_limits(settings))
    try:
        yield manager
    finally:
        await manager.close()
