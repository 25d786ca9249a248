"""Real sandboxes for the chaos tests of activities: one warm-pooled driver per backend for
the session, as tests/integration/sandbox has (its fixtures are not visible from here). The
microVM template lives in the shared image folder, so it is booted once per machine, not
once per folder of tests. A backend whose program is missing fails, never skips."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tenantry.sandbox import probe as sandbox_probe
from tenantry.sandbox.pool import PooledDriver
from tests.support.sandbox import BACKENDS, TEST_LIMITS, require, sandbox_settings


@pytest.fixture(scope="session")
def guest_image() -> None:
    """Build the microVM image if `make test` has not (a no-op when it is there)."""
    from tenantry.sandbox.image.build import build_image

    build_image(sandbox_settings(Path("/nonexistent"), "microvm").sandbox_dir)


@pytest.fixture(scope="session", params=BACKENDS)
async def driver(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                 ) -> AsyncIterator[PooledDriver]:
    name: str = request.param
    require(name)
    if name == "microvm":
        request.getfixturevalue("guest_image")
    settings = sandbox_settings(tmp_path_factory.mktemp(f"chaos-sandbox-{name}"), name)
    pooled = PooledDriver(sandbox_probe.build_backend(name, settings), pool_size=1,
                          limits=TEST_LIMITS[name])
    pooled.start()
    try:
        yield pooled
    finally:
        await pooled.close()
