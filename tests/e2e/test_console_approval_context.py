"""Approvers see what they approve, in both consoles (a real Chromium): the inbox shows the
run's agent, its input and what the model said before asking; once decided, the run's page
says who decided, when, and the comment. A run's answer reads as text (not an escaped JSON
string) and its input, JSON, as indented JSON; in the trace an approval wait is not drawn
in the colour of a failure."""

from __future__ import annotations

import re

import pytest

from tests.support.api import Api
from tests.support.browser import Visit, log_in, needs_chromium, shot
from tests.support.console import AGENT, ASKED, REFUND, SAID, waiting_run
from tests.support.scripts import answer, call, scripted
from tests.support.tenant_console import invite, link
from tests.support.worker import Fakes

async_api = pytest.importorskip("playwright.async_api")

pytestmark = [pytest.mark.e2e, needs_chromium]

#: An answer that is text holding JSON and a newline: shown as written.
PYTHON_SAID = 'Python said: {"exit_code":0,"stdout":"4"}\nAll good.'
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


async def _asked_is_shown(card: async_api.Locator, agent: str) -> None:
    await async_api.expect(card.locator(".asked-agent")).to_contain_text(AGENT)
    await async_api.expect(card.locator(".asked-agent")).to_contain_text(agent)
    # The input is JSON (the script and the text), shown indented; its text keeps its
    # line break as JSON writes it.
    await async_api.expect(card.locator("pre.asked-input")).to_contain_text(
        '"input": "Order 9 never arrived.\\nPlease refund it."')
    await async_api.expect(card.locator("pre.asked-model")).to_have_text(SAID)


async def _fill(page: async_api.Page, selector: str) -> str:
    fill: str = await page.locator(selector).first.evaluate("e => getComputedStyle(e).fill")
    return fill


async def test_the_operator_reads_the_context_and_the_run_page_says_who_decided(
    visit: Visit, platform: Api, fakes: Fakes,
) -> None:
    tenant, h, run_id, approval_id = await waiting_run(platform, fakes)
    agent = (await platform.run(h, run_id))["agent_id"]
    page = await visit.page()
    assert await log_in(page) == 303
    await page.goto("/console/approvals")
    card = page.locator(f'article[data-approval="{approval_id}"]')
    await _asked_is_shown(card, agent)
    await shot(page, "inbox-context")
    await card.locator('input[name="comment"]').fill("checked with finance")
    await card.get_by_role("button", name="Approve").click()
    await page.wait_for_url("**/console/approvals?decided=*")
    await platform.events_until_end(h, run_id)

    await page.goto(f"/console/runs/{tenant}/{run_id}")
    decision = page.locator(f'article[data-approval="{approval_id}"] p.decision')
    await async_api.expect(decision.locator(".decided-by")).to_have_text(
        "the platform operator")
    await async_api.expect(decision.locator(".decision-comment")).to_have_text(
        "checked with finance")
    await async_api.expect(decision).to_contain_text(TIMESTAMP)
    answer_shown = page.locator("#run-answer")
    await async_api.expect(answer_shown).to_have_attribute("data-shape", "text")
    await async_api.expect(answer_shown).to_have_text(f"applied {REFUND}")
    await async_api.expect(page.locator("#run-input")).to_have_attribute("data-shape", "json")
    # The approval wait is drawn, and not in the red of a failure.
    waited = await _fill(page, "table.waterfall rect.bar.approval")
    bad = await page.evaluate("getComputedStyle(document.documentElement)"
                              ".getPropertyValue('--bad').trim()")
    assert waited != _rgb(bad)
    await shot(page, "run-decided")

    # A failed call is red, and a text answer holding JSON reads as that text.
    other = await platform.agent(h, "coder", tools=["effect"])
    failing = await platform.start(h, other, scripted(call("no_such_tool"),
                                                      answer(PYTHON_SAID)))
    await platform.events_until_end(h, failing)
    await page.goto(f"/console/runs/{tenant}/{failing}")
    await async_api.expect(page.locator("#run-answer")).to_have_text(PYTHON_SAID)
    assert await page.locator("#run-answer").inner_text() == PYTHON_SAID
    assert await _fill(page, "table.waterfall tr.failed rect.bar") == _rgb(bad)
    await shot(page, "run-text-answer")
    visit.only_this_server()


def _rgb(hex_colour: str) -> str:
    """``#rrggbb`` as getComputedStyle writes a colour."""
    value = hex_colour.lstrip("#")
    red, green, blue = (int(value[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgb({red}, {green}, {blue})"


async def test_a_tenants_approver_reads_the_context_and_sees_who_decided(
    visit: Visit, platform: Api, fakes: Fakes,
) -> None:
    _, h, run_id, approval_id = await waiting_run(platform, fakes)
    agent = (await platform.run(h, run_id))["agent_id"]
    user_id = await invite(platform, h, "ann@acme.example", "approver")
    page = await visit.page()
    await page.goto(await link(platform, h, user_id))
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url("**/app")
    await page.goto("/app/approvals")
    card = page.locator(f'article[data-approval="{approval_id}"]')
    await _asked_is_shown(card, agent)
    await shot(page, "app-inbox-context")
    await card.locator('input[name="comment"]').fill("fine by finance")
    await card.get_by_role("button", name="Approve").click()
    await page.wait_for_url("**/app/approvals?decided=*")
    await platform.events_until_end(h, run_id)

    for url in (f"/app/runs/{run_id}", f"/app/approvals/{approval_id}"):
        await page.goto(url)
        decision = page.locator(f'article[data-approval="{approval_id}"] p.decision')
        await async_api.expect(decision.locator(".decided-by")).to_have_text(
            f"user {user_id}")
        await async_api.expect(decision.locator(".decision-comment")).to_have_text(
            "fine by finance")
        await async_api.expect(decision).to_contain_text(TIMESTAMP)
    await page.goto(f"/app/runs/{run_id}")
    await async_api.expect(page.locator("#run-answer")).to_have_attribute("data-shape", "text")
    await async_api.expect(page.locator("#run-answer")).to_have_text(f"applied {REFUND}")
    waited = await _fill(page, "table.waterfall rect.bar.approval")
    bad = await page.evaluate("getComputedStyle(document.documentElement)"
                              ".getPropertyValue('--bad').trim()")
    assert waited != _rgb(bad)
    await shot(page, "app-run-decided")
    visit.only_this_server()
