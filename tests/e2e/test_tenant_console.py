"""The tenant console in a real headless Chromium (Debian's, driven by Playwright): a
tenant's person signs in with a one-time link, an approver decides an approval and the run
goes on (a real worker, the scripted model, the fake tool server), a viewer gets no
decision forms and a decision forged with their session is refused, and another tenant's
run is not found; a developer promotes an agent's version (a viewer cannot) and connects an
OAuth tool server, an admin makes an API key that works and whose secret is shown once, and
a viewer reads the month's usage against the spend cap. The API and a worker run in this
process, as `tenantry up` runs them."""

from __future__ import annotations

import pytest

from tests.support.api import Api
from tests.support.browser import Visit, needs_chromium, shot
from tests.support.console import REFUND, waiting_run
from tests.support.oauth_mcp_server import OAuthMcpServer
from tests.support.scripts import answer, call, scripted
from tests.support.tenant_console import SESSION_COOKIE, invite, link
from tests.support.worker import Fakes

async_api = pytest.importorskip("playwright.async_api")

pytestmark = [pytest.mark.e2e, needs_chromium]


async def _sign_in(visit: Visit, url: str, email: str) -> async_api.Page:
    """Open the link as the person would (from their mail) and press Sign in."""
    page = await visit.page()
    await page.goto(url)
    await async_api.expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url("**/app")
    await async_api.expect(page.locator("#signed-in-as")).to_contain_text(email)
    return page


async def _person(visit: Visit, api: Api, h: dict[str, str], email: str,
                  role: str) -> tuple[str, str, async_api.Page]:
    user_id = await invite(api, h, email, role)
    url = await link(api, h, user_id)
    return user_id, url, await _sign_in(visit, url, email)


async def test_an_approver_signs_in_with_a_link_and_approves_the_run_goes_on(
    visit: Visit, platform: Api, fakes: Fakes,
) -> None:
    _, h, run_id, approval_id = await waiting_run(platform, fakes)
    user_id, url, page = await _person(visit, platform, h, "ann@acme.example", "approver")
    cookie, = [c for c in await visit.context.cookies() if c["name"] == SESSION_COOKIE]
    assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (True, "Strict", "/app")
    await async_api.expect(page.locator(f'tr[data-run="{run_id}"]')
                           ).to_have_attribute("data-status", "waiting")
    await shot(page, "app-runs")

    await page.get_by_role("link", name="Approvals").click()
    card = page.locator(f'article[data-approval="{approval_id}"]')
    # The exact arguments the call will be sent with.
    await async_api.expect(card.locator("pre.args")).to_contain_text(f'"note": "{REFUND}"')
    await shot(page, "app-inbox")
    await card.locator('input[name="comment"]').fill("fine by finance")
    await card.get_by_role("button", name="Approve").click()
    await page.wait_for_url("**/app/approvals?decided=*")
    await async_api.expect(page.get_by_role("status")).to_contain_text("approved")
    await async_api.expect(page.locator("#inbox-empty")).to_be_visible()

    events = await platform.events_until_end(h, run_id)
    decided = [e["data"] for e in events if e["type"] == "ApprovalDecided"]
    assert decided == [{"approval_id": approval_id, "key": f"{run_id}:2:0",
                        "decision": "approved", "comment": "fine by finance",
                        "decided_by": f"user:{user_id}"}]
    assert events[-1]["type"] == "RunFinished"
    assert [c.arguments for c in fakes.mcp.calls] == [{"note": REFUND}]
    # The approval's own page shows it approved, with the comment, and no form any more.
    await page.goto(f"/app/approvals/{approval_id}")
    await async_api.expect(page.locator(f'article[data-approval="{approval_id}"] .status')
                           ).to_have_text("approved")
    await async_api.expect(page.locator("main")).to_contain_text("fine by finance")
    await async_api.expect(page.locator("form.decide")).to_have_count(0)
    # The run's page shows it finished, the approval approved, no form left.
    await page.goto(f"/app/runs/{run_id}")
    await async_api.expect(page.locator("#run-status")).to_have_text("finished")
    await async_api.expect(page.locator("#run-answer")).to_contain_text(f"applied {REFUND}")
    await async_api.expect(page.locator("form.decide")).to_have_count(0)
    await shot(page, "app-run")
    # The account change is in the tenant's trail, under the person's name.
    r = await platform.client.get("/v1/audit", params={"actor": f"user:{user_id}"}, headers=h)
    assert [(e["action"], e["target"]) for e in r.json()["data"]] == [
        ("POST /app/approvals/{approval_id}", f"/app/approvals/{approval_id}")]

    # The link is spent: used again, it signs nobody in.
    again = await visit.page()
    await again.goto(url)
    async with again.expect_response(lambda r: r.url.endswith("/app/sign-in")
                                     and r.request.method == "POST") as answered:
        await again.get_by_role("button", name="Sign in").click()
    assert (await answered.value).status == 410
    await async_api.expect(again.get_by_role("alert")).to_contain_text("used already")
    await shot(again, "app-link-used")
    # Signing out ends the session.
    await page.get_by_role("button", name="Sign out").click()
    await async_api.expect(page.get_by_role("status")).to_contain_text("signed out")
    await page.goto("/app")
    await async_api.expect(page.get_by_role("alert")).to_contain_text("not signed in")
    visit.only_this_server()


def _errors(page: async_api.Page) -> list[str]:
    """What the page logs as errors (a CSP violation is one), as they come."""
    found: list[str] = []
    page.on("console", lambda m: found.append(m.text) if m.type == "error" else None)
    return found


async def test_an_open_run_page_follows_the_run_to_its_answer(
    visit: Visit, platform: Api, fakes: Fakes,
) -> None:
    _, h, run_id, approval_id = await waiting_run(platform, fakes)
    _, _, page = await _person(visit, platform, h, "ann@acme.example", "approver")
    errors = _errors(page)
    await page.goto(f"/app/runs/{run_id}")
    await async_api.expect(page.locator("#run-status")).to_have_text("waiting")
    await async_api.expect(page.locator('tr[data-type="ApprovalRequested"]')).to_have_count(1)
    card = page.locator(f'article[data-approval="{approval_id}"]')
    await async_api.expect(card.locator("form.decide")).to_have_count(1)
    await async_api.expect(page.locator("#no-outcome")).to_be_visible()
    await async_api.expect(page.locator("#stream-state")).to_have_text("(live)")
    await page.evaluate("window.stayed = true")  # gone if the page were reloaded

    # The tenant decides through its API; the open page follows without a reload.
    r = await platform.client.post(f"/v1/approvals/{approval_id}", headers=h,
                                   json={"decision": "approve"})
    assert r.status_code == 200, r.text
    await async_api.expect(page.locator('tr[data-type="ApprovalDecided"]')).to_have_count(1)
    await async_api.expect(page.locator('tr[data-type="RunFinished"]')).to_have_count(1)
    await async_api.expect(page.locator("#stream-state")).to_have_text("(run ended)")
    await async_api.expect(page.locator("#run-status")).to_have_text("finished")
    await async_api.expect(page.locator("#run-finished")).not_to_have_text("—")
    await async_api.expect(page.locator("#run-answer")).to_contain_text(f"applied {REFUND}")
    await async_api.expect(card.locator(".status")).to_have_text("approved")
    await async_api.expect(card.locator("form.decide")).to_have_count(0)
    await async_api.expect(page.locator("table.waterfall tr.k-approval")).to_have_count(1)
    # An event that came live expands to all of its data, as one rendered with the page.
    ended = page.locator('tr[data-type="RunFinished"] details.payload')
    await ended.locator("summary").click()
    await async_api.expect(ended.locator("pre")).to_contain_text(f"applied {REFUND}")
    assert await page.evaluate("window.stayed === true")
    await shot(page, "app-run-live")
    assert errors == []
    visit.only_this_server()


async def test_an_approval_that_arrives_live_is_decided_from_the_open_page(
    visit: Visit, platform: Api, fakes: Fakes,
) -> None:
    """The second approval's form came with a live update (the fragment), not with the
    page: it carries the session's CSRF token all the same."""
    tenant, h = await platform.tenant("Acme Refunds")
    await platform.tool_server(tenant, fakes.mcp.url)
    agent = await platform.agent(h, tools=["effect"], needs_approval=["effect"])
    run_id = await platform.start(h, agent, scripted(
        call("effect", note="first"), call("effect", note="second"),
        answer("{last_tool_result}")))
    _, _, page = await _person(visit, platform, h, "ann@acme.example", "approver")
    errors = _errors(page)
    await page.goto(f"/app/runs/{run_id}")
    cards = page.locator("article.approval")
    await async_api.expect(cards).to_have_count(1)  # the first, once the run asks
    first = await cards.first.get_attribute("data-approval")
    await page.evaluate("window.stayed = true")

    r = await platform.client.post(f"/v1/approvals/{first}", headers=h,
                                   json={"decision": "approve"})
    assert r.status_code == 200, r.text
    await async_api.expect(cards).to_have_count(2)
    second = cards.locator("form.decide")
    await async_api.expect(second).to_have_count(1)
    await async_api.expect(second.locator("xpath=..").locator("pre.args")
                           ).to_contain_text('"note": "second"')
    assert await page.evaluate("window.stayed === true")  # it came live
    await second.locator('input[name="comment"]').fill("also fine")
    async with page.expect_response(lambda r: r.request.method == "POST") as answered:
        await second.get_by_role("button", name="Approve").click()
    assert (await answered.value).status == 303  # not 403: the token was the session's
    await page.wait_for_url(f"**/app/runs/{run_id}")
    await async_api.expect(page.locator("#run-status")).to_have_text("finished")
    await async_api.expect(page.locator("#run-answer")).to_contain_text("applied second")
    assert [c.arguments for c in fakes.mcp.calls] == [{"note": "first"}, {"note": "second"}]
    assert errors == []
    visit.only_this_server()


async def test_a_viewer_gets_no_decision_and_a_forged_one_is_refused(
    visit: Visit, platform: Api, fakes: Fakes,
) -> None:
    _, h, run_id, approval_id = await waiting_run(platform, fakes)
    _, _, page = await _person(visit, platform, h, "vic@acme.example", "viewer")
    await page.goto("/app/approvals")
    card = page.locator(f'article[data-approval="{approval_id}"]')
    await async_api.expect(card.locator("pre.args")).to_contain_text(REFUND)
    await async_api.expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    await async_api.expect(page.locator("form.decide")).to_have_count(0)
    await async_api.expect(page.get_by_role("link", name="Audit trail")).to_have_count(0)
    await shot(page, "app-inbox-viewer")
    await page.goto(f"/app/runs/{run_id}")
    await async_api.expect(page.locator(f'article[data-approval="{approval_id}"]')
                           ).to_be_visible()
    await async_api.expect(page.locator("form.decide")).to_have_count(0)

    # The form the approver would post, with the viewer's own cookie and CSRF token.
    csrf = await page.locator('form.logout input[name="csrf"]').get_attribute("value")
    assert csrf
    forged = await page.request.post(f"/app/approvals/{approval_id}", max_redirects=0,
                                     form={"csrf": csrf, "decision": "approve"})
    assert forged.status == 403
    assert "approvals:decide" in await forged.text()
    approval = (await platform.client.get(f"/v1/approvals/{approval_id}", headers=h)).json()
    assert approval["status"] == "pending"
    assert (await platform.run(h, run_id))["status"] == "waiting"
    assert fakes.mcp.calls == []
    # And the audit page is not theirs.
    r = await page.goto("/app/audit")
    assert r is not None and r.status == 403
    visit.only_this_server()


async def test_another_tenants_run_and_approval_are_not_found(
    visit: Visit, platform: Api, fakes: Fakes,
) -> None:
    _, their_h, their_run, their_approval = await waiting_run(platform, fakes)
    _, mine = await platform.tenant("Other Co")
    my_run = await platform.start(mine, await platform.agent(mine), scripted(answer("ok")))
    _, _, page = await _person(visit, platform, mine, "ann@other.example", "admin")
    await async_api.expect(page.locator(f'tr[data-run="{my_run}"]')).to_have_count(1)
    await async_api.expect(page.locator(f'tr[data-run="{their_run}"]')).to_have_count(0)

    theirs = await page.goto(f"/app/runs/{their_run}")
    assert theirs is not None and theirs.status == 404
    shown = await page.locator("main").inner_text()
    assert their_run not in shown
    nothing = await page.goto("/app/runs/run_" + "0" * 32)
    assert nothing is not None and nothing.status == 404
    assert await page.locator("main").inner_text() == shown  # the same page: no hint
    await shot(page, "app-not-found")
    # Their approval's page: the not-found page, as for an approval that never was.
    theirs = await page.goto(f"/app/approvals/{their_approval}")
    assert theirs is not None and theirs.status == 404
    shown = await page.locator("main").inner_text()
    assert their_approval not in shown and REFUND not in shown
    nothing = await page.goto("/app/approvals/apr_" + "0" * 32)
    assert nothing is not None and nothing.status == 404
    assert await page.locator("main").inner_text() == shown
    # Deciding their approval from here: not found, and it stays pending.
    await page.goto("/app/approvals")
    await async_api.expect(page.locator(f'article[data-approval="{their_approval}"]')
                           ).to_have_count(0)
    csrf = await page.locator('form.logout input[name="csrf"]').get_attribute("value")
    forged = await page.request.post(f"/app/approvals/{their_approval}", max_redirects=0,
                                     form={"csrf": csrf or "", "decision": "approve"})
    assert forged.status == 404
    approval = (await platform.client.get(f"/v1/approvals/{their_approval}",
                                          headers=their_h)).json()
    assert approval["status"] == "pending"
    visit.only_this_server()


async def test_a_developer_promotes_a_version_and_a_viewer_cannot(
    visit: Visit, platform: Api,
) -> None:
    _, h = await platform.tenant()
    agent = await platform.agent(h, name="support")
    r = await platform.client.post(f"/v1/agents/{agent}/versions", headers=h,
                                   json={"model": "scripted", "system_prompt": "Be briefer."})
    assert r.status_code == 201, r.text
    _, _, page = await _person(visit, platform, h, "dev@acme.example", "developer")
    await page.get_by_role("link", name="Agents").click()
    await async_api.expect(page.locator(f'tr[data-agent="{agent}"] td.live')).to_have_text("v1")
    await page.get_by_role("link", name="support").click()
    await async_api.expect(page.locator("#live-version")).to_have_text("v1")
    await async_api.expect(page.locator("#no-evaluations")).to_be_visible()
    live = page.locator('tr[data-version="1"]')
    await async_api.expect(live.get_by_role("button", name="Promote")).to_have_count(0)
    await shot(page, "app-agent")
    await page.locator('tr[data-version="2"]').get_by_role("button", name="Promote").click()
    await page.wait_for_url(f"**/app/agents/{agent}?promoted=2")
    await async_api.expect(page.get_by_role("status")).to_contain_text("Version 2 is live")
    await async_api.expect(page.locator("#live-version")).to_have_text("v2")
    await async_api.expect(page.locator("#promotions")).to_contain_text("v1 → v2")
    assert (await platform.client.get(f"/v1/agents/{agent}", headers=h)
            ).json()["live_version"] == 2

    # A viewer reads the same page with no form, and the form posted anyway is refused.
    _, _, viewer = await _person(visit, platform, h, "vic@acme.example", "viewer")
    await viewer.goto(f"/app/agents/{agent}")
    await async_api.expect(viewer.locator("#live-version")).to_have_text("v2")
    await async_api.expect(viewer.locator('tr[data-version="1"]')).to_be_visible()
    await async_api.expect(viewer.get_by_role("button", name="Promote")).to_have_count(0)
    await async_api.expect(viewer.get_by_role("link", name="API keys")).to_have_count(0)
    csrf = await viewer.locator('form.logout input[name="csrf"]').get_attribute("value")
    forged = await viewer.request.post(f"/app/agents/{agent}/promote", max_redirects=0,
                                       form={"csrf": csrf or "", "version": "1"})
    assert forged.status == 403 and "agents:manage" in await forged.text()
    assert (await platform.client.get(f"/v1/agents/{agent}", headers=h)
            ).json()["live_version"] == 2
    visit.only_this_server()


async def test_an_admin_makes_a_key_sees_its_secret_once_and_it_works(
    visit: Visit, platform: Api,
) -> None:
    _, h = await platform.tenant()
    user_id, _, page = await _person(visit, platform, h, "boss@acme.example", "admin")
    await page.get_by_role("link", name="API keys").click()
    form = page.locator("#create-key")
    await form.get_by_label("Name").fill("dashboard")
    # runs:read is ticked already; a key for reading runs and the audit trail.
    await form.get_by_role("checkbox", name="audit:read").check()
    await form.get_by_label("Expires after (days; empty: never)").fill("30")
    await form.get_by_role("button", name="Make key").click()
    secret = (await page.locator("#new-key-secret").inner_text()).strip()
    await async_api.expect(page.locator("#new-key")).to_contain_text("shown this once")
    await shot(page, "app-key-made")
    key = {"Authorization": f"Bearer {secret}"}
    assert (await platform.client.get("/v1/runs", headers=key)).status_code == 200
    assert (await platform.client.get("/v1/api-keys", headers=key)).status_code == 403
    made = (await platform.client.get("/v1/api-keys", headers=h)).json()["data"][0]
    assert (made["name"], made["scopes"], made["created_by"]) == (
        "dashboard", ["audit:read", "runs:read"], f"user:{user_id}")
    row = page.locator(f'tr[data-key="{made["key_id"]}"]')
    await async_api.expect(row).to_have_attribute("data-state", "active")

    # Never again: the list shows its prefix, not the key.
    await page.goto("/app/keys")
    await async_api.expect(page.locator("#new-key")).to_have_count(0)
    assert secret not in await page.content()
    await async_api.expect(row).to_contain_text(made["prefix"])
    await row.get_by_role("button", name="Revoke").click()
    await page.wait_for_url("**/app/keys?revoked=*")
    await async_api.expect(row).to_have_attribute("data-state", "revoked")
    assert (await platform.client.get("/v1/runs", headers=key)).status_code == 401
    visit.only_this_server()


async def test_usage_shows_the_months_figures_against_the_spend_cap(
    visit: Visit, platform: Api,
) -> None:
    tenant, h = await platform.tenant()
    agent = await platform.agent(h)
    run = await platform.start(h, agent, scripted(answer("ok")))
    assert (await platform.events_until_end(h, run))[-1]["type"] == "RunFinished"
    r = await platform.client.put(f"/admin/v1/tenants/{tenant}/policy",
                                  headers=platform.operator,
                                  json={"monthly_spend_cap_micros": 25_000_000})
    assert r.status_code == 200, r.text
    total = (await platform.client.get("/v1/usage", headers=h)).json()["total"]
    _, _, page = await _person(visit, platform, h, "vic@acme.example", "viewer")
    await page.get_by_role("link", name="Usage").click()
    await async_api.expect(page.locator("#spend-cap")).to_have_text("$25.000000")
    await async_api.expect(page.locator('tr[data-cap="spend"] meter')).to_be_visible()
    totals = page.locator("#usage-total td")
    await async_api.expect(totals.nth(0)).to_have_text("1")
    await async_api.expect(totals.nth(1)).to_have_text(f"{total['calls']:,}")
    await async_api.expect(totals.nth(2)).to_have_text(
        f"{total['input_tokens']:,} / {total['output_tokens']:,}")
    await async_api.expect(page.locator(f'tr[data-agent="{agent}"]')).to_be_visible()
    await shot(page, "app-usage")
    visit.only_this_server()


async def test_a_developer_connects_an_oauth_tool_server_through_its_authorization_server(
    visit: Visit, platform: Api,
) -> None:
    """The Connect form's answer redirects to another origin: the page's CSP names it in
    form-action, or Chromium would stop the browser there."""
    async with OAuthMcpServer() as whoami:
        tenant, h = await platform.tenant()
        await platform.tool_server(tenant, whoami.url, name="whoami",
                                   honours_idempotency_keys=False)
        _, _, page = await _person(visit, platform, h, "dev@acme.example", "developer")
        await page.get_by_role("link", name="Tool servers").click()
        row = page.locator('tr[data-server="whoami"]')
        await async_api.expect(row).to_have_attribute("data-oauth", "authorization_required")
        await shot(page, "app-tool-servers")
        await row.get_by_role("button", name="Connect tool server whoami").click()
        await page.wait_for_url("**/oauth/callback?*")
        await async_api.expect(page.locator("body")).to_contain_text("whoami is connected")
        await page.goto("/app/tool-servers")
        await async_api.expect(row).to_have_attribute("data-oauth", "connected")
        visit.only_this_server(whoami.origin)
