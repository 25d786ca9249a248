"""The console's browser tests' Chromium: Debian's own (never a downloaded one), how it is
launched, where screenshots go, and what those tests do with it (a browser context that
remembers what it fetched, logging in, a screenshot). Nothing here imports Playwright: the
test modules do (skipped where it is missing), and hand its objects in."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import OPERATOR_TOKEN

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


class Visit:
    """One browser context on the platform, remembering every URL the browser fetched."""

    def __init__(self, context: Any, base: str) -> None:
        self.context = context
        self.base = base
        self.fetched: list[str] = []
        context.on("request", lambda request: self.fetched.append(request.url))

    async def page(self) -> Any:
        page = await self.context.new_page()
        page.set_default_timeout(30_000)
        return page

    def only_this_server(self, *also: str) -> None:
        """Nothing was fetched from anywhere but the platform (and the origins ``also``,
        where the test sent the browser on purpose)."""
        allowed = tuple(f"{origin}/" for origin in (self.base, *also))
        strays = [u for u in self.fetched if not u.startswith(allowed)]
        assert strays == [], f"the console fetched from elsewhere: {strays}"


async def shot(page: Any, name: str) -> None:
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


async def log_in(page: Any, token: str = OPERATOR_TOKEN) -> int:
    """Open a console page, get sent to the login form, submit ``token``; the answer's
    status (303 then the page on success)."""
    await page.goto("/console/runs")
    assert "/console/login" in page.url
    await page.fill("#token", token)
    async with page.expect_response(lambda r: r.url.endswith("/console/login")
                                    and r.request.method == "POST") as answered:
        await page.get_by_role("button", name="Log in").click()
    status: int = (await answered.value).status
    await page.wait_for_load_state()
    return status


async def sign_in_by_link(page: Any, url: str) -> None:
    """In the tenant console: open a person's sign-in link ``url`` and press Sign in, as
    they would from their mail."""
    await page.goto(url)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url("**/app")
