"""The sandboxes the replay gate's scenarios need (tests/support/replay_gate.py): built-in
code and browser tools run in the run's own sandbox, and activities called as tools run in
a fresh one per attempt (ADR 0015). The gate uses bwrap, the fast development backend — it
tests what the platform *decides*, which is the same on every backend — and keeps these
scenarios to a small share of its runs.

One bwrap driver of the browser variant serves the workers' code and browser sandboxes and
the activity dispatcher; its egress proxy reaches only the test web of tests/support/pages.py
(``pages.example``). bwrap and Chromium come from scripts/system-packages.txt (`make test`
installs them); a missing program fails the gate, it is never skipped."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from tenantry.blobs import Blobs
from tenantry.db import Database
from tenantry.sandbox import probe
from tenantry.sandbox.manager import SandboxManager
from tenantry.sandbox.pool import PooledDriver
from tenantry.sandbox.types import Limits
from tenantry.tools.builtin import BrowserPolicy
from tests.support.activities import dispatching
from tests.support.blob_stores import directory_blobs
from tests.support.pages import HOST, page_world
from tests.support.sandbox import sandbox_settings

BACKEND = "bwrap"
#: Code gets the tests' small limits; Chromium needs more memory and processes.
CODE_LIMITS = Limits(memory_mib=256, pids=64, timeout_s=30)
BROWSER_LIMITS = Limits(memory_mib=1536, pids=256, timeout_s=60)
#: bwrap shares the host's kernel: its browser is for tests and development only.
BROWSER_POLICY = BrowserPolicy(page_timeout_s=60.0, max_pages=20, allow_dev_backends=True)
PAGES = f"http://{HOST}"
#: Activity attempts at once (each a fresh sandbox).
DISPATCH_SLOTS = 4


@dataclass
class GateSandboxes:
    """What the gate's workers and scenarios share: the driver, the blob store (a
    directory, its registry in the gate's database), and where the test web is."""

    driver: PooledDriver
    blobs: Blobs
    pages: str = PAGES

    def manager(self) -> SandboxManager:
        """A worker's sandbox manager (one per worker, as each process has its own)."""
        return SandboxManager(self.driver, self.blobs, limits=CODE_LIMITS,
                              browser_driver=self.driver, browser_limits=BROWSER_LIMITS)


@asynccontextmanager
async def gate_sandboxes(db: Database) -> AsyncIterator[GateSandboxes]:
    """The driver (a warm sandbox kept ready), the test web, and an activity dispatcher
    on ``db``, all stopped on the way out."""
    program, package = probe.PACKAGES[BACKEND]
    if shutil.which(program) is None:
        raise RuntimeError(f"the replay gate's sandbox scenarios need {program}: install the "
                           f"Debian package {package} (scripts/install-system-packages does)")
    with tempfile.TemporaryDirectory(prefix="tenantry-gate-sandboxes-") as tmp, \
            page_world() as world:
        folder = Path(tmp)
        driver = PooledDriver(
            probe.build_backend(BACKEND, sandbox_settings(folder, BACKEND), variant="browser"),
            pool_size=1, limits=CODE_LIMITS, egress=world.proxy())
        driver.start()
        try:
            async with dispatching(db, driver, slots=DISPATCH_SLOTS, limits=CODE_LIMITS):
                yield GateSandboxes(driver, directory_blobs(db, folder / "blobs"))
        finally:
            with contextlib.suppress(Exception):
                await driver.close()
