"""Real sandboxes for the tests: every backend this platform supports, started for real.
The session's drivers (`driver`, `guest_image`) are tests.support.sandbox_fixtures, shared
with tests/chaos; here, a worker's sandbox manager over them. A backend whose program is
missing fails its tests with the Debian package to install — none is skipped here
(`make test` installs them and builds the guest image)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tenantry.db import Database
from tenantry.sandbox.manager import SandboxManager
from tenantry.sandbox.pool import PooledDriver
from tests.support.blob_stores import directory_blobs
from tests.support.sandbox import TEST_LIMITS


@pytest.fixture
async def manager(driver: PooledDriver, db: Database, tmp_path: Path
                  ) -> AsyncIterator[SandboxManager]:
    """A worker's sandbox manager over the session's driver (closing it keeps the driver),
    its blobs in a directory with their registry in the test's database."""
    boxes = SandboxManager(driver, directory_blobs(db, tmp_path / "blobs"),
                           limits=TEST_LIMITS[driver.backend], hibernate_after=0)
    try:
        yield boxes
    finally:
        await boxes.destroy_all()
