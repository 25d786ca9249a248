"""The console's browser tests' Chromium: Debian's own (never a downloaded one), how it is
launched, and where screenshots go. Nothing here imports Playwright: the test modules do."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
#: Skips a browser test only where Debian's chromium is missing (it is installed by
#: scripts/install-system-packages, so `make test` runs every browser test here).
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Debian's chromium is not installed "
                                  "(scripts/system-packages.txt)")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "console"
# docs/how-to/console.md shows these: made by the browser tests, never by hand, so they
# show the console as it is. Written into docs/ only when asked (TENANTRY_DOC_SCREENSHOTS=1):
# ids and times differ every run, and a test run must not leave the checkout modified.
DOC_IMAGES = (ROOT / "docs" / "how-to" / "images"
              if os.environ.get("TENANTRY_DOC_SCREENSHOTS") else ARTIFACTS)


async def launch_chromium(playwright: Any) -> Any:
    """Debian's chromium, headless, through a started Playwright."""
    return await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
