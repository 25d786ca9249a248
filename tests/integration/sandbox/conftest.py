"""Real sandboxes for the tests: every backend this platform supports, started for real.
A backend whose program is missing fails its tests with the Debian package to install —
none is skipped here (`make test` installs them and builds the guest image)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tenantry.blobs import DirectoryBlobStore
from tenantry.sandbox import probe as sandbox_probe
from tenantry.sandbox.manager import SandboxManager
from tenantry.sandbox.pool import PooledDriver
from tests.support.sandbox import BACKENDS, TEST_LIMITS, require, sandbox_settings


@pytest.fixture(scope="session")
def guest_image() -> None:
    """Build the microVM image if `make test` has not (a no-op when it is there)."""
    from tenantry.sandbox.image.build import build_image

    settings = sandbox_settings(Path("/nonexistent"), "microvm")
    build_image(settings.sandbox_dir)


@pytest.fixture(scope="session", params=BACKENDS)
async def driver(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                 ) -> AsyncIterator[PooledDriver]:
    """One warm-pooled driver per backend for the session (the microVM template is booted
    once and cached on disk)."""
    name: str = request.param
    require(name)
    if name == "microvm":
        request.getfixturevalue("guest_image")
    settings = sandbox_settings(tmp_path_factory.mktemp(f"sandbox-{name}"), name)
    pooled = PooledDriver(sandbox_probe.build_backend(name, settings), pool_size=1,
                          limits=TEST_LIMITS[name])
    pooled.start()
    try:
        yield pooled
    finally:
        await pooled.close()


@pytest.fixture
async def manager(driver: PooledDriver, tmp_path: Path) -> AsyncIterator[SandboxManager]:
    """A worker's sandbox manager over the session's driver (closing it keeps the driver)."""
    boxes = SandboxManager(driver, DirectoryBlobStore(tmp_path / "blobs"),
                           limits=TEST_LIMITS[driver.backend], hibernate_after=0)
    try:
        yield boxes
    finally:
        await boxes.destroy_all()
