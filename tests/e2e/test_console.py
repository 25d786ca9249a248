"""The operator console in a real headless Chromium (Debian's, driven by Playwright): log in,
watch a run's page follow it live (events, status, answer, trace; payloads expand), decide
an approval from the inbox, and the refusals (wrong token, forged form). The API and a
worker run in this process, as `tenantry up` runs them; the browser talks to the real
loopback port. Screenshots go to test-artifacts/console/, and the run page's to
docs/how-to/images/ with TENANTRY_DOC_SCREENSHOTS=1."""

from __future__ import annotations

import re

import pytest

from tests.support.api import OPERATOR_TOKEN, Api
from tests.support.browser import (
    DOC_IMAGES,
    Visit,
    log_in,
    needs_chromium,
    shot,
)
from tests.support.console import REFUND, waiting_run
from tests.support.worker import Fakes

async_api = pytest.importorskip("playwright.async_api")

pytestmark = [pytest.mark.e2e, needs_chromium]
async def test_wrong_token_is_refused(visit: Visit) -> None:
    page = await visit.page()
    assert await log_in(page, "not-the-operator-token") == 401
    await async_api.expect(page.get_by_role("alert")).to_contain_text("not the operator token")
    await shot(page, "login-refused")
    assert not [c for c in await visit.context.cookies() if c["name"] == "tenantry_console"]
    await page.goto("/console/approvals")
    assert "/console/login" in page.url  # still nothing behind the login
    visit.only_this_server()


async def test_a_run_page_shows_new_events_live(
    visit: Visit, platform: Api, fakes: Fakes,
) -> None:
    tenant, h, run_id, approval_id = await waiting_run(platform, fakes)
    page = await visit.page()
    assert await log_in(page) == 303
    listing = await visit.page()
    await listing.goto(f"/console/runs?tenant={tenant}")
    row = listing.locator(f'tr[data-run="{run_id}"]')
    await async_api.expect(row).to_have_attribute("data-status", "waiting")

    await page.goto(f"/console/runs/{tenant}/{run_id}")
    await async_api.expect(page.locator("#run-status")).to_have_text("waiting")
    await async_api.expect(page.locator('tr[data-type="ApprovalRequested"]')).to_have_count(1)
    await async_api.expect(page.locator(f'article[data-approval="{approval_id}"] pre.args')
                           ).to_contain_text(REFUND)
    await async_api.expect(page.locator("#stream-state")).to_have_text("(live)")
    await shot(page, "run-waiting")
    await page.evaluate("window.stayed = true")  # gone if the page were reloaded

    # The tenant decides through its own API; the open page follows without a reload.
    r = await platform.client.post(f"/v1/approvals/{approval_id}", headers=h,
                                   json={"decision": "approve"})
    assert r.status_code == 200, r.text
    await async_api.expect(page.locator('tr[data-type="ApprovalDecided"]')).to_have_count(1)
    await async_api.expect(page.locator('tr[data-type="RunFinished"]')).to_have_count(1)
    await async_api.expect(page.locator("#stream-state")).to_have_text("(run ended)")
    # The whole page follows, not only the event list: status, finished time, the
    # approval's outcome, the answer and the trace.
    await async_api.expect(page.locator("#run-status")).to_have_text("finished")
    await async_api.expect(page.locator("#run-finished")).not_to_have_text("—")
    card = page.locator(f'article[data-approval="{approval_id}"]')
    await async_api.expect(card.locator(".status")).to_have_text("approved")
    await async_api.expect(card.locator("form.decide")).to_have_count(0)
    await async_api.expect(page.locator("#run-answer")).to_contain_text(f"applied {REFUND}")
    await async_api.expect(page.locator("table.waterfall tr.k-approval")).to_have_count(1)
    # Payloads expand to all of their data: one rendered with the page, one that came live.
    asked = page.locator('tr[data-type="ApprovalRequested"] details.payload')
    await asked.locator("summary").click()
    await async_api.expect(asked.locator("pre")).to_contain_text(f'"note": "{REFUND}"')
    ended = page.locator('tr[data-type="RunFinished"] details.payload')
    await ended.locator("summary").click()
    await async_api.expect(ended.locator("pre")).to_contain_text(f"applied {REFUND}")
    assert await page.evaluate("window.stayed === true")
    await shot(page, "run-live-finished")
    await page.screenshot(path=str(DOC_IMAGES / "console-run.png"), full_page=True)
    # The runs list refreshed its status in place too.
    await async_api.expect(row).to_have_attribute("data-status", "finished")
    assert await listing.evaluate("document.readyState") == "complete"

    # Reopened, the ended run shows its trace: an approval wait among the spans.
    await page.reload()
    await async_api.expect(page.locator("table.waterfall tr.k-approval")).to_have_count(1)
    await async_api.expect(page.locator("table.waterfall tr.k-model")).to_have_count(2)
    await shot(page, "run-trace")
    visit.only_this_server()


async def test_approving_from_the_inbox_lets_the_run_finish(
    visit: Visit, platform: Api, fakes: Fakes,
) -> None:
    tenant, h, run_id, approval_id = await waiting_run(platform, fakes)
    page = await visit.page()
    assert await log_in(page) == 303
    await page.goto("/console/approvals")
    card = page.locator(f'article[data-approval="{approval_id}"]')
    await async_api.expect(card.locator("pre.args")).to_contain_text(REFUND)
    await async_api.expect(card).to_contain_text("effect")
    await async_api.expect(card).to_contain_text(f"{run_id}:2:0")  # the call's key
    await shot(page, "inbox")
    await card.locator('input[name="comment"]').fill("checked with finance")
    await card.get_by_role("button", name="Approve").click()
    await page.wait_for_url("**/console/approvals?decided=*")
    await async_api.expect(page.get_by_role("status")).to_contain_text("approved")
    await async_api.expect(page.locator("#inbox-empty")).to_be_visible()
    await shot(page, "inbox-decided")

    events = await platform.events_until_end(h, run_id)
    decided = [e for e in events if e["type"] == "ApprovalDecided"]
    assert [e["data"] for e in decided] == [{  # type: ignore[index]
        "approval_id": approval_id, "key": f"{run_id}:2:0", "decision": "approved",
        "comment": "checked with finance", "decided_by": "operator"}]
    assert events[-1]["type"] == "RunFinished"
    assert (await platform.run(h, run_id))["answer"] == f"applied {REFUND}"
    assert [c.arguments for c in fakes.mcp.calls] == [{"note": REFUND}]

    await page.goto(f"/console/runs/{tenant}/{run_id}")
    await async_api.expect(page.locator("#run-status")).to_have_text("finished")
    await async_api.expect(page.locator(f'article[data-approval="{approval_id}"]')
                           ).to_contain_text("approved")
    await shot(page, "run-after-inbox")
    visit.only_this_server()


async def test_a_post_without_the_csrf_token_is_refused(
    visit: Visit, platform: Api, fakes: Fakes,
) -> None:
    tenant, h, run_id, approval_id = await waiting_run(platform, fakes)
    page = await visit.page()
    assert await log_in(page) == 303
    target = f"/console/approvals/{tenant}/{approval_id}"
    # The request carries the session cookie (the browser context's), but no token / a
    # made-up one: refused, and nothing is decided.
    for form in ({"decision": "approve"}, {"decision": "approve", "csrf": "0" * 64}):
        refused = await page.request.post(target, form=form, max_redirects=0)
        assert refused.status == 403
    logout = await page.request.post("/console/logout", form={}, max_redirects=0)
    assert logout.status == 403
    # Before login, the login form's own token guards it the same way.
    anonymous = await visit.context.browser.new_context(  # type: ignore[union-attr]
        base_url=platform.base_url)
    try:
        forged = await anonymous.request.post("/console/login", max_redirects=0,
                                              form={"token": OPERATOR_TOKEN})
        assert forged.status == 403
        assert "tenantry_console=" not in (forged.headers.get("set-cookie") or "")
    finally:
        await anonymous.close()
    approval = (await platform.client.get(f"/v1/approvals/{approval_id}", headers=h)).json()
    assert approval["status"] == "pending"
    assert (await platform.run(h, run_id))["status"] == "waiting"
    # With the page's own form it goes through (the token was the only thing missing).
    await page.goto(f"/console/runs/{tenant}/{run_id}")
    await page.get_by_role("button", name="Deny").click()
    await page.wait_for_url(f"**/console/runs/{tenant}/{run_id}")
    events = await platform.events_until_end(h, run_id)
    assert [e["data"]["decision"] for e in events  # type: ignore[index]
            if e["type"] == "ApprovalDecided"] == ["denied"]
    assert fakes.mcp.calls == []


async def test_tenants_models_and_sandboxes_pages(
    visit: Visit, platform: Api, fakes: Fakes,
) -> None:
    tenant, _, _, _ = await waiting_run(platform, fakes)
    r = await platform.client.put(f"/admin/v1/tenants/{tenant}/policy", headers=platform.operator,
                                  json={"max_running": 7, "monthly_spend_cap_micros": 5_000_000})
    assert r.status_code == 200, r.text
    page = await visit.page()
    assert await log_in(page) == 303
    await page.goto("/console/tenants")
    row = page.locator(f'tr[data-tenant="{tenant}"]')
    await async_api.expect(row).to_contain_text("Acme Refunds")
    await async_api.expect(row).to_contain_text("0 / 7")  # running / max_running
    await async_api.expect(row).to_contain_text("$5.000000")  # the monthly cap
    await shot(page, "tenants")
    await page.goto("/console/models")
    # The in-process worker's breaker for its configured model account.
    await async_api.expect(page.locator('tr[data-account="fake"] td.breaker')
                           ).to_have_text("closed")
    await shot(page, "models")
    await page.goto("/console/sandboxes")
    await async_api.expect(page.locator("main")).to_contain_text("No sandbox backend")
    await shot(page, "sandboxes")
    await page.get_by_role("button", name="Log out").click()
    await page.wait_for_url("**/console/login")
    await page.goto("/console/tenants")
    assert "/console/login" in page.url
    visit.only_this_server()


async def _tab_to(page: async_api.Page, selector: str, presses: int = 80) -> None:
    """Press Tab from the top of the page until ``selector`` has the focus: the control is
    reachable by keyboard alone."""
    await page.locator("body").focus()
    for _ in range(presses):
        await page.keyboard.press("Tab")
        if await page.evaluate("s => document.activeElement?.matches(s) ?? false", selector):
            return
    raise AssertionError(f"{selector} is not reachable with Tab")


async def _every_control_is_named(page: async_api.Page) -> None:
    """Each button, checkbox and text field has an accessible name (a label, text or
    aria-label): what a screen reader announces it as."""
    named = re.compile(r"\S")
    for role in ("button", "checkbox", "textbox"):
        every = await page.get_by_role(role).count()
        assert every == await page.get_by_role(role, name=named).count(), role


async def test_cancel_bulk_approve_pause_and_revoke_from_the_console(
    visit: Visit, platform: Api, fakes: Fakes,
) -> None:
    doomed = await waiting_run(platform, fakes)
    kept = [await waiting_run(platform, fakes) for _ in range(2)]
    page = await visit.page()
    assert await log_in(page) == 303

    tenant, h, run_id, _ = doomed
    await page.goto(f"/console/runs/{tenant}/{run_id}")
    await _every_control_is_named(page)
    await _tab_to(page, "#cancel-run")
    async with page.expect_navigation():
        await page.keyboard.press("Enter")
    await async_api.expect(page.locator("#run-status")).to_have_text("cancelled")
    await async_api.expect(page.locator("#cancel-run")).to_have_count(0)
    assert (await platform.run(h, run_id))["status"] == "cancelled"

    await page.goto("/console/approvals")
    await _every_control_is_named(page)
    for _, _, _, approval_id in kept:
        box = page.get_by_role("checkbox", name=re.compile(approval_id))
        await box.focus()
        await page.keyboard.press("Space")  # ticked from the keyboard
        await async_api.expect(box).to_be_checked()
    await page.get_by_role("group", name="Decide every selected approval at once"
                           ).get_by_role("textbox", name="Comment").fill("bulk: finance ok")
    await shot(page, "inbox-bulk")
    await page.screenshot(path=str(DOC_IMAGES / "console-bulk-approve.png"), full_page=True)
    await page.get_by_role("button", name="Approve selected").click()
    await page.wait_for_url("**/console/approvals?bulk=*")
    await async_api.expect(page.get_by_role("status")).to_contain_text("2 approved")
    for _, h2, run2, _ in kept:
        events = await platform.events_until_end(h2, run2)
        assert [e["data"]["comment"] for e in events  # type: ignore[index]
                if e["type"] == "ApprovalDecided"] == ["bulk: finance ok"]
        assert events[-1]["type"] == "RunFinished"

    # Pause the tenant's admissions and revoke its key, from its Keys and admissions page.
    await page.goto(f"/console/tenants/{tenant}/access")
    await _every_control_is_named(page)
    await page.get_by_role("button", name="Pause admissions").click()
    await async_api.expect(page.locator("#admissions-state")).to_contain_text("Paused")
    agent = (await platform.run(h, run_id))["agent_id"]
    refused = await platform.client.post("/v1/runs", headers=h,
                                         json={"agent_id": agent, "input": "x"})
    assert refused.status_code == 409 and refused.json()["type"] == "admissions_paused"
    await page.get_by_role("button", name=re.compile("^Revoke API key")).first.click()
    await async_api.expect(page.get_by_role("status")).to_contain_text("revoked")
    assert (await platform.client.get("/v1/runs", headers=h)).status_code == 401

    await page.get_by_role("link", name="Actions", exact=True).click()
    rows = page.locator("#actions tbody tr")
    # The five done here, newest first; older, the operator API's that set the tenants up.
    await async_api.expect(rows.filter(has_text="console session")).to_have_count(5)
    await async_api.expect(rows.nth(0)).to_contain_text("revoke api key")
    await async_api.expect(rows.nth(1)).to_contain_text("pause admissions")
    await async_api.expect(rows.nth(4)).to_contain_text("cancel run")
    await async_api.expect(page.locator("#actions")).to_contain_text("console session")
    await page.screenshot(path=str(DOC_IMAGES / "console-actions.png"), full_page=True)


async def test_finding_a_run_by_its_key_and_a_filter_kept_across_reload(
    visit: Visit, platform: Api,
) -> None:
    tenant, h = await platform.tenant("Initech Claims")
    agent = await platform.agent(h, "claims-bot")
    r = await platform.client.post("/v1/runs", json={"agent_id": agent, "input": "hello"},
                                   headers={**h, "Idempotency-Key": "ticket-7781"})
    assert r.status_code == 202, r.text
    run_id = r.json()["run_id"]
    await platform.events_until_end(h, run_id)  # its status stays what the filter picks
    page = await visit.page()
    assert await log_in(page) == 303
    # The box has a label, Tab reaches it right after the page links, and "/" jumps to it.
    box = page.get_by_label("Search")
    await async_api.expect(box).to_have_attribute("id", "console-search")
    await page.locator("nav a").last.focus()  # the last of the page links
    await page.keyboard.press("Tab")
    await async_api.expect(box).to_be_focused()
    await page.locator("h1").click()
    await page.keyboard.press("/")
    await async_api.expect(box).to_be_focused()
    await page.keyboard.type("ticket-7781")
    await page.keyboard.press("Enter")
    await page.wait_for_url("**/console/search?q=ticket-7781")
    hits = page.locator('section[data-kind="key"] li')
    await async_api.expect(hits).to_have_count(1)
    await async_api.expect(hits).to_contain_text("Initech Claims")
    await async_api.expect(hits).to_contain_text("claims-bot")
    await async_api.expect(box).to_have_value("ticket-7781")
    await page.screenshot(path=str(DOC_IMAGES / "console-search.png"), full_page=True)
    await hits.get_by_role("link", name=run_id).click()
    await page.wait_for_url(f"**/console/runs/{tenant}/{run_id}")
    facts = page.locator('section[data-part="facts"]')
    await async_api.expect(facts).to_contain_text("Initech Claims")
    await async_api.expect(facts).to_contain_text("claims-bot")
    # From the run to its tenant's runs, narrowed by status: the URL holds the view.
    await facts.get_by_role("link", name="Initech Claims").click()
    await page.wait_for_url(f"**/console/runs?tenant={tenant}")
    status = (await platform.run(h, run_id))["status"]
    await page.get_by_label("Status").select_option(str(status))
    await page.get_by_role("button", name="Filter").click()
    await page.wait_for_url(f"**/console/runs?tenant={tenant}&status={status}&agent=")
    await page.reload()
    await async_api.expect(page.get_by_label("Status")).to_have_value(str(status))
    await async_api.expect(page.get_by_label("Tenant", exact=True)).to_have_value(tenant)
    rows = page.locator("#run-rows tr[data-run]")
    await async_api.expect(rows).to_have_count(1)
    await async_api.expect(rows).to_contain_text("Initech Claims")
    await shot(page, "runs-filtered")
    visit.only_this_server()
