"""The session's real sandboxes, shared by every folder of tests that needs them
(tests/integration/sandbox, tests/chaos): one warm-pooled driver per backend, so a backend's
pool (and the microVM template, booted once and cached on disk) is made once per session,
not once per folder. Registered as a plugin by tests/conftest.py. A backend whose program
is missing fails its tests with the Debian package to install — none is skipped."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tenantry.sandbox.pool import PooledDriver
from tests.support.sandbox import BACKENDS, pooled_driver, require, sandbox_settings


@pytest.fixture(scope="session")
def guest_image() -> None:
    """Build the microVM image if `make test` has not (a no-op when it is there)."""
    from tenantry.sandbox.image.build import build_image

    settings = sandbox_settings(Path("/nonexistent"), "microvm")
    build_image(settings.sandbox_dir)


@pytest.fixture(scope="session")
def browser_image() -> None:
    """The microVM's browser image variant, likewise (`make test` builds both)."""
    from tenantry.sandbox.image.build import build_image

    settings = sandbox_settings(Path("/nonexistent"), "microvm")
    build_image(settings.sandbox_dir, variant="browser")


@pytest.fixture(scope="session", params=BACKENDS)
async def driver(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                 ) -> AsyncIterator[PooledDriver]:
    """One warm-pooled driver per backend for the session."""
    name: str = request.param
    require(name)
    if name == "microvm":
        request.getfixturevalue("guest_image")
    async with pooled_driver(tmp_path_factory.mktemp(f"sandbox-{name}"), name) as pooled:
        yield pooled
