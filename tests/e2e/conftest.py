"""What the console's browser tests share: one headless Chromium for the session (driven by
Playwright, imported only when a test asks for it), the platform a console page is served
by (the API and a worker in this process, as `tenantry up` runs them) and a browser
context on it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tenantry.runs.inprocess import LocalWorkers
from tests.support.api import Api, serving_api
from tests.support.browser import ARTIFACTS, DOC_IMAGES, Visit, launch_chromium
from tests.support.worker import Fakes, running_worker


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    DOC_IMAGES.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
async def browser(artifacts: Path) -> AsyncIterator[Any]:
    async_api = pytest.importorskip("playwright.async_api")
    async with async_api.async_playwright() as pw:
        launched = await launch_chromium(pw)
        yield launched
        await launched.close()


@pytest.fixture
async def platform(database_dsn: str, fakes: Fakes) -> AsyncIterator[Api]:
    local = LocalWorkers()
    async with running_worker(database_dsn, fakes.model.base_url) as worker, \
            serving_api(database_dsn, local=local) as api:
        with local.serving(worker.engine):
            yield api


@pytest.fixture
async def visit(browser: Any, platform: Api) -> AsyncIterator[Visit]:
    context = await browser.new_context(base_url=platform.base_url,
                                        viewport={"width": 1360, "height": 900})
    try:
        yield Visit(context, platform.base_url)
    finally:
        await context.close()
