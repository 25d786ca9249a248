"""The console's charts page in a real headless Chromium (Debian's, driven by Playwright),
after real runs through a worker in this process (as `tenantry up` runs it): every chart
has an accessible name and draws its numbers, nothing is fetched from elsewhere. The
screenshot goes to test-artifacts/console/, and to docs/how-to/images/ with
TENANTRY_DOC_SCREENSHOTS=1 (its times differ every run: a test run leaves docs/ alone)."""

from __future__ import annotations

import pytest

from tenantry.runs.inprocess import LocalWorkers
from tests.support.api import OPERATOR_TOKEN, Api, serving_api
from tests.support.browser import ARTIFACTS, DOC_IMAGES, launch_chromium, needs_chromium
from tests.support.scripts import answer, call, scripted
from tests.support.worker import Fakes, running_worker

async_api = pytest.importorskip("playwright.async_api")

pytestmark = [pytest.mark.e2e, needs_chromium]
TITLES = ("Runs started and finished per minute, last hour",
          "Queue wait per minute (p50, p95), last hour", "Slots used against caps",
          "Spend this month, to date, against the monthly cap", "Tokens per day, this month",
          "Model calls per account, last 24 hours",
          "Model call errors per account, since this process's workers started",
          "Sandbox pool occupancy")
SLOTS_BY_CLASS = "Running runs against max_running, by tenant class"


async def test_the_charts_page_draws_every_chart_with_a_name(
    database_dsn: str, fakes: Fakes,
) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    DOC_IMAGES.mkdir(parents=True, exist_ok=True)
    local = LocalWorkers()
    async with running_worker(database_dsn, fakes.model.base_url) as worker, \
            serving_api(database_dsn, local=local) as api, \
            async_api.async_playwright() as pw:
        with local.serving(worker.engine):
            tenant = await _runs(api, fakes)
            browser = await launch_chromium(pw)
            context = await browser.new_context(base_url=api.base_url,
                                                viewport={"width": 1400, "height": 900})
            fetched: list[str] = []
            context.on("request", lambda request: fetched.append(request.url))
            page = await context.new_page()
            page.set_default_timeout(30_000)
            await page.goto("/console/login?next=/console/charts")
            await page.fill("#token", OPERATOR_TOKEN)
            await page.get_by_role("button", name="Log in").click()
            await page.wait_for_url("**/console/charts")
            # The nav leads here; by keyboard, the tenant box picks one tenant.
            await async_api.expect(page.get_by_role("link", name="Charts")).to_have_attribute(
                "aria-current", "page")
            await page.get_by_role("textbox", name="Tenant", exact=True).fill(tenant)
            await page.keyboard.press("Enter")
            await page.wait_for_url(f"**/console/charts?tenant={tenant}")
            for title in TITLES[:-2]:  # the tenant's own: no per-tenant error counters
                await async_api.expect(page.get_by_role("img", name=title)).to_have_count(1)
            started = page.locator('#chart-runs circle[data-series="started"]')
            assert sum(float(v or 0) for v in await started.evaluate_all(
                "els => els.map(e => e.dataset.value)")) == 2

            await page.get_by_role("link", name="All tenants").click()
            await page.wait_for_url("**/console/charts")
            for title in (t.replace(TITLES[2], SLOTS_BY_CLASS) for t in TITLES):
                chart = page.get_by_role("img", name=title)
                await async_api.expect(chart).to_have_count(1)
                # This worker has no sandbox backend: that chart says so instead.
                await async_api.expect(chart).to_have_attribute(
                    "data-empty", "true" if title == TITLES[-1] else "false")
                box = await chart.bounding_box()
                assert box is not None and box["width"] > 300 and box["height"] > 100
                # Its numbers, in a table a screen reader reads (hidden from the eye).
                table = page.get_by_role("table", name=f"{title}: the numbers plotted")
                await async_api.expect(table).to_have_count(1)
            await async_api.expect(page.locator('figure[data-chart="chart-sandboxes"]')
                                   ).to_contain_text("No sandbox backend")
            errors = page.locator('#chart-errors rect[data-series="answered"]')
            assert await errors.count() >= 1  # this process's worker counted its calls
            await page.screenshot(path=str(ARTIFACTS / "charts.png"), full_page=True)
            await page.screenshot(path=str(DOC_IMAGES / "console-charts.png"), full_page=True)
            strays = [u for u in fetched if not u.startswith(api.base_url + "/")]
            assert strays == [], f"the console fetched from elsewhere: {strays}"
            await browser.close()


async def _runs(api: Api, fakes: Fakes) -> str:
    """Two finished runs of a fresh tenant, one with a tool call: its id."""
    tenant, h = await api.tenant("Charted")
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["echo"])
    for script in (scripted(call("echo", text="hi"), answer("done")), scripted(answer("ok"))):
        run_id = await api.start(h, agent, script)
        events = await api.events_until_end(h, run_id)
        assert events[-1]["type"] == "RunFinished", events[-1]
    return tenant
