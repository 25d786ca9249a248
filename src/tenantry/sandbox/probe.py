"""Probing which sandbox backend works here and building the worker's sandbox manager over
it at start-up (DESIGN §10): the configured backend, or the first that works here of
microvm → gvisor → bwrap. The choice and the reasons the others were passed over are
logged, and every sandbox reports its backend in the trace."""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from tenantry.blobs import BlobStore
from tenantry.config import Settings
from tenantry.sandbox.backends.protocol import Backend
from tenantry.sandbox.manager import SandboxManager
from tenantry.sandbox.pool import PooledDriver
from tenantry.sandbox.types import BACKENDS, Limits, SandboxUnavailable

logger = logging.getLogger(__name__)

AGENT_PATH = Path(__file__).parent / "guest" / "agent.py"
#: Debian package that provides each backend's program (the project's setup installs it).
PACKAGES = {"microvm": ("qemu-system-x86_64", "qemu-system-x86"),
            "gvisor": ("runsc", "runsc"), "bwrap": ("bwrap", "bubblewrap")}


@dataclass(frozen=True, slots=True)
class Detection:
    chosen: str | None
    why_not: dict[str, str] = field(default_factory=dict)  # backend → what it lacks


def detect(settings: Settings) -> Detection:
    """What works on this host, without starting anything."""
    why_not: dict[str, str] = {}
    for name in BACKENDS:
        program, package = PACKAGES[name]
        if shutil.which(program) is None:
            why_not[name] = f"{program} not found (Debian package {package})"
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
                  timeout_s=float(settings.sandbox_timeout_seconds))


def build_backend(name: str, settings: Settings) -> Backend:
    """The named backend; SandboxUnavailable (with the reason) if it cannot run here."""
    program, package = PACKAGES[name]
    if shutil.which(program) is None:
        raise SandboxUnavailable(f"{name}: {program} not found (Debian package {package})")
    state = settings.data_dir / "sandbox-state" / name
    state.mkdir(parents=True, exist_ok=True)
    if name == "microvm":
        from tenantry.sandbox.backends.microvm import MicroVmBackend
        from tenantry.sandbox.image import find_image

        image = find_image(settings.sandbox_dir)
        if image is None:
            raise SandboxUnavailable("microvm: no guest image; run `tenantry sandbox "
                                     "build-image`")
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
    name = settings.sandbox_backend
    if name == "none":
        yield None
        return
    if name is None:
        found = detect(settings)
        for other, reason in found.why_not.items():
            logger.info("sandbox backend %s not usable here: %s", other, reason)
        if found.chosen is None:
            logger.warning("no sandbox backend works here: built-in code tools will answer "
                           "that code execution is unavailable")
            yield None
            return
        name = found.chosen
    driver = PooledDriver(build_backend(name, settings), pool_size=settings.sandbox_pool_size,
                          limits=default_limits(settings))
    logger.info("sandbox backend: %s", name, extra={"pool_size": settings.sandbox_pool_size})
    driver.start()
    manager = SandboxManager(driver, blobs, limits=default_limits(settings),
                             hibernate_after=float(settings.sandbox_hibernate_seconds))
    try:
        yield manager
    finally:
        await manager.close()
