"""Approvers see what they approve, in both consoles (a real Chromium): the inbox shows the
run's agent, its input and what the model said before asking; once decided, the run's page
says who decided, when, and the comment. A run's answer reads as text (not an escaped JSON
string) and its input, JSON, as indented JSON; in the trace an approval wait is not drawn
in the colour of a failure."""

from __future__ import annotations

import re

import pytest

from tests.support.api import Api
from tests.support.browser import Visit, log_in, needs_chromium, shot, sign_in_by_link
from tests.support.console import AGENT, REFUND, SAID, waiting_run
from tests.support.scripts import answer, call, scripted
from tests.support.tenant_console import invite, link
from tests.support.worker import Fakes

async_api = pytest.importorskip("playwright.async_api")

pytestmark = [pytest.mark.e2e, needs_chromium]

#: An answer that is text holding JSON and a newline: shown as written.
PYTHON_SAID = 'Python said: {"exit_code":0,"stdout":"4"}\nAll good.'
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


async def _approve_from_inbox(page: async_api.Page, inbox: str, approval_id: str,
                             agent: str, comment: str) -> None:
    """The inbox at ``inbox`` shows the approval's agent, run input and what the model said;
    approve it there with ``comment``."""
    await page.goto(inbox)
    card = page.locator(f'article[data-approval="{approval_id}"]')
    await _asked_is_shown(card, agent)
    await shot(page, f"{inbox.strip('/').replace('/', '-')}-context")
    await card.locator('input[name="comment"]').fill(comment)
    await card.get_by_role("button", name="Approve").click()
    await page.wait_for_url(f"**{inbox}?decided=*")


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


async def _failure_red(page: async_api.Page) -> str:
    """The console's colour of a failure, as getComputedStyle writes a colour."""
    value = str(await page.evaluate("getComputedStyle(document.documentElement)"
                                    ".getPropertyValue('--bad').trim()")).lstrip("#")
    red, green, blue = (int(value[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgb({red}, {green}, {blue})"


async def _decided_page(page: async_api.Page, url: str, approval_id: str, by: str,
                        comment: str) -> None:
    """The page at ``url`` says who decided the approval, when, and their comment; the
    run's answer reads as its text; the approval wait is drawn, not in a failure's red."""
    await page.goto(url)
    decision = page.locator(f'article[data-approval="{approval_id}"] p.decision')
    await async_api.expect(decision.locator(".decided-by")).to_have_text(by)
    await async_api.expect(decision.locator(".decision-comment")).to_have_text(comment)
    await async_api.expect(decision).to_contain_text(TIMESTAMP)
    if "/runs/" in url:
        answer_shown = page.locator("#run-answer")
        await async_api.expect(answer_shown).to_have_attribute("data-shape", "text")
        await async_api.expect(answer_shown).to_have_text(f"applied {REFUND}")
        await async_api.expect(page.locator("#run-input")).to_have_attribute(
            "data-shape", "json")
        assert await _fill(page, "table.waterfall rect.bar.approval") != \
            await _failure_red(page)


async def test_the_operator_reads_the_context_and_the_run_page_says_who_decided(
    visit: Visit, platform: Api, fakes: Fakes,
) -> None:
    tenant, h, run_id, approval_id = await waiting_run(platform, fakes)
    agent = (await platform.run(h, run_id))["agent_id"]
    page = await visit.page()
    assert await log_in(page) == 303
    await _approve_from_inbox(page, "/console/approvals", approval_id, agent,
                              "checked with finance")
    await platform.events_until_end(h, run_id)

    await _decided_page(page, f"/console/runs/{tenant}/{run_id}", approval_id,
                        "the platform operator", "checked with finance")
    await shot(page, "run-decided")

    # A failed call is red, and a text answer holding JSON reads as that text.
    other = await platform.agent(h, "coder", tools=["effect"])
    failing = await platform.start(h, other, scripted(call("no_such_tool"),
                                                      answer(PYTHON_SAID)))
    await platform.events_until_end(h, failing)
    await page.goto(f"/console/runs/{tenant}/{failing}")
    await async_api.expect(page.locator("#run-answer")).to_have_text(PYTHON_SAID)
    assert await page.locator("#run-answer").inner_text() == PYTHON_SAID
    assert await _fill(page, "table.waterfall tr.failed rect.bar") == \
        await _failure_red(page)
    await shot(page, "run-text-answer")
    visit.only_this_server()


async def test_a_tenants_approver_reads_the_context_and_sees_who_decided(
    visit: Visit, platform: Api, fakes: Fakes,
) -> None:
    _, h, run_id, approval_id = await waiting_run(platform, fakes)
    agent = (await platform.run(h, run_id))["agent_id"]
    user_id = await invite(platform, h, "ann@acme.example", "approver")
    page = await visit.page()
    await sign_in_by_link(page, await link(platform, h, user_id))
    await _approve_from_inbox(page, "/app/approvals", approval_id, agent, "fine by finance")
    await platform.events_until_end(h, run_id)

    for url in (f"/app/approvals/{approval_id}", f"/app/runs/{run_id}"):
        await _decided_page(page, url, approval_id, f"user {user_id}", "fine by finance")
    await shot(page, "app-run-decided")
    visit.only_this_server()
