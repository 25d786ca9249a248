"""Every page of both consoles fits a laptop's window (1,024 px wide): the page never scrolls
sideways (a wide table scrolls in its own box) and every control of the header — links,
the search box, the log-out buttons — is inside the window. The pages are listed once here
and checked against the consoles' routes, so a new page cannot be left out; each is opened
with data in it (a run waiting for approval, a finished one, an evaluation)."""

from __future__ import annotations

from typing import Any

import pytest

from tenantry.api import console, tenant_console
from tenantry.api.console import view as console_view
from tenantry.api.tenant_console import view as tenant_view
from tests.support.api import Api
from tests.support.browser import Visit, log_in, needs_chromium, shot, sign_in_by_link
from tests.support.console import waiting_run
from tests.support.evaluations import POLICY_CASE, agent_with_two_versions, evaluation_done
from tests.support.tenant_console import invite, link
from tests.support.worker import Fakes

async_api = pytest.importorskip("playwright.async_api")

pytestmark = [pytest.mark.e2e, needs_chromium]

LAPTOP = {"width": 1024, "height": 768}

#: Every page of the operator console, by its route; {placeholders} are filled per test.
CONSOLE_PAGES = (
    "/console/login", "/console/runs", "/console/runs/{tenant_id}/{run_id}",
    "/console/approvals", "/console/tenants", "/console/tenants/{tenant_id}/tool-servers",
    "/console/tenants/{tenant_id}/access", "/console/models", "/console/billing",
    "/console/sandboxes", "/console/activities", "/console/actions", "/console/search",
    "/console/charts", "/console/evaluations/{tenant_id}/{evaluation_id}",
)
#: ... and of the tenant console.
TENANT_PAGES = (
    "/app/sign-in", "/app", "/app/runs/{run_id}", "/app/agents", "/app/agents/{agent_id}",
    "/app/approvals", "/app/approvals/{approval_id}", "/app/tool-servers", "/app/usage",
    "/app/keys", "/app/audit",
)
#: GET routes that are not pages: assets, redirects, a run's live parts and event stream,
#: an event's payload, the OpenID Connect round trip; and the operator console's own
#: sign-in link landing (it shows a form only with a valid link: test_console_sessions).
NOT_PAGES = frozenset({
    "/console", "/console/static/{name}", "/console/runs/{tenant_id}/{run_id}/live",
    "/console/runs/{tenant_id}/{run_id}/events",
    "/console/runs/{tenant_id}/{run_id}/events/{seq}/{field}", "/console/oidc/start",
    "/console/oidc/callback", "/console/sign-in",
    "/app/static/{name}", "/app/runs/{run_id}/live", "/app/runs/{run_id}/events",
    "/app/oidc/start", "/app/oidc/callback",
})


def _get_routes(pages: tuple[Any, ...], prefix: str) -> set[str]:
    return {prefix + route.path for page in pages for route in page.router.routes
            if "GET" in getattr(route, "methods", ())}


def test_every_console_page_is_in_the_list() -> None:
    served = (_get_routes(console._PAGES, console_view.PREFIX)
              | _get_routes((console.assets, *tenant_console._PAGES), tenant_view.PREFIX))
    assert served - NOT_PAGES == set(CONSOLE_PAGES) | set(TENANT_PAGES)


async def _fits(page: async_api.Page, url: str) -> None:
    """``url``, opened: no sideways scroll of the page, every header control in view."""
    r = await page.goto(url)
    assert r is not None and r.status < 500, url
    await page.wait_for_load_state("load")
    widths = await page.evaluate(
        "[document.documentElement.scrollWidth, document.body.scrollWidth, innerWidth]")
    assert max(widths[:2]) <= widths[2], f"{url}: the page is {widths[:2]} px wide in " \
                                         f"{widths[2]}"
    controls = page.locator("header.top").locator("a, button, input:not([type=hidden])")
    count = await controls.count()
    for i in range(count):
        box = await controls.nth(i).bounding_box()
        label = await controls.nth(i).evaluate("e => e.outerHTML.slice(0, 80)")
        assert box is not None, f"{url}: {label} is not shown"
        assert box["x"] >= 0 and box["x"] + box["width"] <= widths[2], \
            f"{url}: {label} is off-screen ({box})"


async def _evaluation(platform: Api, fakes: Fakes) -> tuple[str, str]:
    """A finished evaluation: its tenant and id (its page is the widest table)."""
    tenant, h, agent = await agent_with_two_versions(platform, fakes)
    r = await platform.client.post(f"/v1/agents/{agent}/test-sets", headers=h,
                                   json={"name": "policy", "cases": [POLICY_CASE]})
    assert r.status_code == 201, r.text
    r = await platform.client.post(f"/v1/agents/{agent}/evaluations", headers=h, json={
        "test_set_id": r.json()["test_set_id"], "candidate": {"version": 2}})
    assert r.status_code == 201, r.text
    evaluation: str = r.json()["evaluation_id"]
    await evaluation_done(platform, h, agent, evaluation)
    return tenant, evaluation


async def test_every_operator_console_page_fits_1024_px(
    browser: Any, platform: Api, fakes: Fakes,
) -> None:
    tenant, _, run_id, _ = await waiting_run(platform, fakes)
    evaluated, evaluation = await _evaluation(platform, fakes)
    context = await browser.new_context(base_url=platform.base_url, viewport=LAPTOP)
    try:
        visit = Visit(context, platform.base_url)
        page = await visit.page()
        await _fits(page, "/console/login")
        assert await log_in(page) == 303
        for route in CONSOLE_PAGES[1:]:
            # The evaluation is its own tenant's.
            await _fits(page, route.format(
                tenant_id=evaluated if "{evaluation_id}" in route else tenant,
                run_id=run_id, evaluation_id=evaluation))
        await shot(page, "laptop-evaluation")
        await _fits(page, "/console/tenants")
        await shot(page, "laptop-tenants")
        visit.only_this_server()
    finally:
        await context.close()


async def test_every_tenant_console_page_fits_1024_px(
    browser: Any, platform: Api, fakes: Fakes,
) -> None:
    _, h, run_id, approval_id = await waiting_run(platform, fakes)
    agent = (await platform.run(h, run_id))["agent_id"]
    user_id = await invite(platform, h, "ann@acme.example", "admin")
    url = await link(platform, h, user_id)
    context = await browser.new_context(base_url=platform.base_url, viewport=LAPTOP)
    try:
        visit = Visit(context, platform.base_url)
        page = await visit.page()
        await _fits(page, url)  # the sign-in page the link opens
        await sign_in_by_link(page, url)
        for route in TENANT_PAGES[1:]:
            await _fits(page, route.format(run_id=run_id, agent_id=agent,
                                           approval_id=approval_id))
        await shot(page, "laptop-app-audit")
        visit.only_this_server()
    finally:
        await context.close()
