"""An OAuth tool server connected from the operator console in a real headless Chromium
(Debian's, driven by Playwright), end to end: a tenant's MCP server that is its own OAuth
authorization server (tests/support/oauth_mcp_server.py, built on the official SDK) is
registered by the tenant through its own API; the operator opens the tenant's tool servers
page and clicks *Connect*; the browser goes through the authorization server and lands on
the platform's callback; runs call the tool with tokens refreshed before every use; when
the grant is revoked a run waits for the server and the page says so, and connecting again
from the browser lets that run finish by itself. No token the server issued shows up
anywhere but where it belongs. The API and a worker run in this process, as `tenantry up`
runs them. Screenshots go to test-artifacts/console/."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from tests.support.api import Api
from tests.support.browser import Visit, log_in, needs_chromium, shot
from tests.support.leaks import assert_no_token_in, readable_places
from tests.support.oauth_mcp_server import WHOAMI_TEXT, OAuthMcpServer
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes

async_api = pytest.importorskip("playwright.async_api")

pytestmark = [pytest.mark.e2e, needs_chromium]
TENANT = "Initrode Support"


@pytest.fixture
async def whoami() -> AsyncIterator[OAuthMcpServer]:
    # 1-second access tokens: always within the platform's 60 s refresh margin, so every
    # use of one is preceded by a refresh (no clock to wait on).
    async with OAuthMcpServer(access_seconds=1) as server:
        yield server


class Seen:
    """The HTML of every console and callback page the browser showed (for the no-token
    checks), as it stood when the test looked at it."""

    def __init__(self) -> None:
        self.pages: list[str] = []

    async def keep(self, page: Any) -> None:
        self.pages.append(await page.content())


async def connect_in_browser(page: Any, seen: Seen) -> None:
    """On the tool servers page: Connect, through the authorization server (it approves at
    once and sends the browser back), to the platform's callback page saying so."""
    await page.get_by_role("button", name="Connect tool server whoami").click()
    await page.wait_for_url("**/oauth/callback?*")
    await async_api.expect(page.locator("body")).to_have_text(
        "whoami is connected. You can close this window.")
    await seen.keep(page)


async def tool_result(api: Api, h: dict[str, str], run_id: str) -> str:
    """What the run's one tool call returned, once the run has finished."""
    events = await api.events_until_end(h, run_id)
    assert events[-1]["type"] == "RunFinished", events[-1]
    completed: list[Any] = [e["data"] for e in events if e["type"] == "ToolCompleted"]
    assert len(completed) == 1, completed
    return str(completed[0].get("result"))


async def test_an_oauth_server_connected_from_the_console_and_again_when_a_run_waits(
    visit: Visit, platform: Api, fakes: Fakes, whoami: OAuthMcpServer,
    admin_conn: asyncpg.Connection, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    seen = Seen()
    tenant, h = await platform.tenant(TENANT)
    # The tenant registers its server itself, with its own key (on this machine: the test
    # platform lets tenants' servers be at private addresses).
    r = await platform.client.post("/v1/tool-servers", headers=h, json={
        "name": "whoami", "url": whoami.url, "honours_idempotency_keys": False})
    assert r.status_code == 201, r.text
    assert r.json()["oauth"]["status"] == "authorization_required"
    assert r.json()["registered_by"] == "tenant"

    # The operator finds the tenant's tool servers from its row on the Tenants page.
    page = await visit.page()
    assert await log_in(page) == 303
    await page.goto("/console/tenants")
    await page.get_by_role("link", name=f"Tool servers of {TENANT}").click()
    await page.wait_for_url(f"**/console/tenants/{tenant}/tool-servers")
    row = page.locator('tr[data-server="whoami"]')
    await async_api.expect(row).to_have_attribute("data-oauth", "authorization_required")
    await async_api.expect(row.locator("td.authorization")).to_contain_text(
        "authorization required: not connected yet")
    await async_api.expect(row.locator("td.registered-by")).to_have_text("tenant")
    await seen.keep(page)
    await shot(page, "tool-servers-not-connected")

    await connect_in_browser(page, seen)
    assert (whoami.registrations, whoami.authorizations, whoami.code_exchanges) == (1, 1, 1)
    await page.goto(f"/console/tenants/{tenant}/tool-servers")
    await async_api.expect(row).to_have_attribute("data-oauth", "connected")
    await async_api.expect(row.locator("td.num").first).to_have_text("1")  # tools, pinned
    await seen.keep(page)
    await shot(page, "tool-servers-connected")

    # A run calls the tool. Its token lives 1 s: the worker refreshes it before the call.
    agent = await platform.agent(h, tools=["whoami"])
    refreshes = whoami.refreshes
    run = await platform.start(h, agent, scripted(call("whoami"), answer("{last_tool_result}")))
    assert await tool_result(platform, h, run) == WHOAMI_TEXT
    assert whoami.refreshes > refreshes
    assert whoami.whoami_tokens == [whoami.issued[-1].access_token]
    assert whoami.issued[-1].grant == "refresh_token"

    # The person revokes the grant: the next run's refresh is refused, and the run waits.
    whoami.revoke_refresh_tokens()
    waiting = await platform.start(h, agent, scripted(call("whoami"),
                                                      answer("{last_tool_result}")))

    async def waits() -> bool:
        return (await platform.run(h, waiting))["status"] == "waiting"

    await until(waits, "the run waits for its tool server's connection", 30)
    assert (await platform.run(h, waiting))["waiting_reason"] == "authorization_required"
    await page.reload()
    await async_api.expect(row).to_have_attribute("data-oauth", "authorization_required")
    await async_api.expect(row.locator("td.authorization")).to_contain_text(
        "refused to refresh the token (invalid_grant): connect again")
    await async_api.expect(row).to_have_attribute("data-waiting", "1")
    await async_api.expect(row.get_by_role("link", name="1")).to_be_visible()
    await seen.keep(page)
    await shot(page, "tool-servers-run-waiting")
    assert len(whoami.whoami_tokens) == 1  # the waiting run's call was not made

    # Connected again from the browser: the waiting run goes on by itself.
    await connect_in_browser(page, seen)
    assert await tool_result(platform, h, waiting) == WHOAMI_TEXT
    assert (whoami.registrations, whoami.authorizations, whoami.code_exchanges) == (1, 2, 2)
    # Each run's call was made exactly once, with a token the server had issued.
    assert len(whoami.whoami_tokens) == 2
    assert all(t in whoami.access_tokens for t in whoami.whoami_tokens)
    await page.goto(f"/console/tenants/{tenant}/tool-servers")
    await async_api.expect(row).to_have_attribute("data-oauth", "connected")
    await async_api.expect(row).to_have_attribute("data-waiting", "0")
    await seen.keep(page)
    await shot(page, "tool-servers-connected-again")
    await page.goto(f"/console/actions?tenant={tenant}")
    await async_api.expect(page.locator('#actions tr[data-action="connect_tool_server"]')
                           ).to_have_count(2)
    await seen.keep(page)
    visit.only_this_server(whoami.origin)  # the browser went there to authorize

    # No token the server issued is anywhere it should not be.
    tokens = whoami.access_tokens + whoami.refresh_tokens
    assert len(tokens) >= 8  # two codes and the refreshes: what the checks look for
    places = await readable_places(admin_conn, fakes, caplog)
    assert_no_token_in({**places, "console and callback pages": "\n".join(seen.pages)}, tokens)
