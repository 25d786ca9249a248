"""Signing in to the tenant console by OpenID Connect in a real headless Chromium, against
a real provider (oidc-provider-mock, built on Authlib): the person presses "Sign in with …",
signs in on the provider's page and lands in their tenant's console — the flow's cookie
crossing from the provider's site and back, the session's strict cookie set on a page
that moves on by itself."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.api import Api
from tests.support.browser import Visit, needs_chromium, shot
from tests.support.oidc import FLOW_COOKIE, Provider
from tests.support.tenant_console import SESSION_COOKIE, invite

async_api = pytest.importorskip("playwright.async_api")

pytestmark = [pytest.mark.e2e, needs_chromium]


@pytest.fixture
async def browsing(browser: Any, oidc_api: Api) -> AsyncIterator[Visit]:
    context = await browser.new_context(base_url=oidc_api.base_url,
                                        viewport={"width": 1360, "height": 900})
    try:
        yield Visit(context, oidc_api.base_url)
    finally:
        await context.close()


async def test_a_person_signs_in_with_the_identity_provider(
    browsing: Visit, oidc_api: Api, oidc: Provider,
) -> None:
    _, admin = await oidc_api.tenant("Acme")
    await invite(oidc_api, admin, "ann@acme.example", "approver")
    _, other = await oidc_api.tenant("Globex")
    theirs = await oidc_api.start(other, await oidc_api.agent(other), "theirs")
    oidc.person("ann-1", email="ann@acme.example", email_verified=True)

    page = await browsing.page()
    await page.goto("/app")
    await page.get_by_role("link", name="Sign in with localhost").click()
    await page.wait_for_url(f"{oidc.issuer}/oauth2/authorize?*")
    await page.locator('input[name="sub"]').fill("ann-1")
    await page.get_by_role("button", name="Authorize").click()
    await page.wait_for_url("**/app")
    await async_api.expect(page.locator("#signed-in-as")).to_contain_text(
        "ann@acme.example · approver")
    await shot(page, "app-oidc-signed-in")
    cookies = {c["name"]: c for c in await browsing.context.cookies()}
    assert FLOW_COOKIE not in cookies  # spent by the callback
    session = cookies[SESSION_COOKIE]
    assert (session["httpOnly"], session["sameSite"]) == (True, "Strict")
    # Their own tenant only: another tenant's run is the console's 404.
    response = await page.goto(f"/app/runs/{theirs}")
    assert response is not None and response.status == 404
    # The callback's URL again (from the history): no flow any more, nobody signed in anew.
    callback = next(u for u in browsing.fetched if "/app/oidc/callback?" in u)
    response = await page.goto(callback)
    assert response is not None and response.status == 400
    await async_api.expect(page.get_by_role("alert")).to_contain_text("start it again")
