"""The operator's approvals inbox is grouped by tenant and can be filtered by tenant, so a
tenant that files thousands of approvals cannot bury another tenant's one.

The inbox used to be one list of every tenant's pending approvals, oldest first, 50 a page:
a tenant whose runs filed 10,000 approvals pushed every later approval of every other
tenant 200 pages back, where no operator would find it before it expired."""

from __future__ import annotations

import re

from tenantry.api.console import epoch, reads, session
from tenantry.db import Database
from tenantry.ids import ApprovalId, RunId, TenantId
from tenantry.tools import approvals
from tests.support.api import OPERATOR_TOKEN, Api

FLOOD = 10_000


async def _file(db: Database, tenant: str, run: str, count: int, tool: str) -> list[ApprovalId]:
    """``count`` pending approvals of ``run``, filed as the tool gateway files them."""
    filed = []
    async with db.tenant_tx(TenantId(tenant)) as conn:
        for i in range(count):
            approval, _ = await approvals.open_request(
                conn, TenantId(tenant), RunId.parse(run), f"{run}:{i}:0", tool, {"n": i})
            filed.append(approval)
    return filed


async def _inbox(api: Api, **params: str) -> str:
    cookie, _ = session.issue(OPERATOR_TOKEN, epoch=epoch.FIRST)
    r = await api.client.get("/console/approvals", params=params,
                             headers={"Cookie": f"{session.SESSION_COOKIE}={cookie}"})
    assert r.status_code == 200, r.text
    return r.text


def _shown(page: str) -> list[str]:
    return re.findall(r'<article class="approval" data-approval="([^"]+)"', page)


async def test_a_flood_of_approvals_does_not_bury_another_tenants_one(
        api: Api, db: Database) -> None:
    noisy, hn = await api.tenant("Noisy")
    quiet, hq = await api.tenant("Quiet")
    noisy_run = await api.start(hn, await api.agent(hn), "x")
    quiet_run = await api.start(hq, await api.agent(hq), "x")
    flood = await _file(db, noisy, noisy_run, FLOOD, "spam")
    (single,) = await _file(db, quiet, quiet_run, 1, "refund")  # filed after all of them
    # Oldest first is id order (ids are time-ordered; within a millisecond, by their bits).
    flood.sort(key=lambda a: a.uuid)

    first_page = await _inbox(api)
    shown = _shown(first_page)
    assert str(single) in shown, "the quiet tenant's approval is not on the first page"
    # The noisy tenant gets its first few and a count, not the page.
    assert shown == [str(a) for a in flood[:reads.INBOX_EACH]] + [str(single)]
    summary = dict(re.findall(r'<tr data-tenant="([^"]+)"><td>.*?</td><td class="num">(\d+)<',
                              first_page))
    assert summary == {noisy: str(FLOOD), quiet: "1"}
    assert f"All {FLOOD} of {noisy}" in first_page

    # Filtered by tenant: only that tenant's, oldest first, page by page.
    assert _shown(await _inbox(api, tenant=quiet)) == [str(single)]
    page = await _inbox(api, tenant=noisy)
    assert _shown(page) == [str(a) for a in flood[:reads.PAGE]]
    more = re.search(r'<a href="/console/approvals\?([^"]+)">More', page)
    assert more, "no next page of the noisy tenant's approvals"
    after = dict(p.split("=", 1) for p in more[1].replace("&amp;", "&").split("&"))
    assert after["tenant"] == noisy
    next_page = await _inbox(api, **after)
    assert _shown(next_page) == [str(a) for a in flood[reads.PAGE:2 * reads.PAGE]]


async def test_an_unknown_tenant_filter_shows_nothing_of_anyone(api: Api, db: Database) -> None:
    tenant, h = await api.tenant("Someone")
    run = await api.start(h, await api.agent(h), "x")
    await _file(db, tenant, run, 1, "refund")
    assert _shown(await _inbox(api, tenant="nobody-here")) == []
    page = await _inbox(api, tenant="NOT A TENANT")
    assert "No such tenant" in page


async def test_the_operator_api_groups_and_filters_the_inbox_by_tenant(
        api: Api, db: Database) -> None:
    noisy, hn = await api.tenant("Noisy")
    quiet, hq = await api.tenant("Quiet")
    noisy_run = await api.start(hn, await api.agent(hn), "x")
    quiet_run = await api.start(hq, await api.agent(hq), "x")
    flood = sorted(await _file(db, noisy, noisy_run, 300, "spam"), key=lambda a: a.uuid)
    (single,) = await _file(db, quiet, quiet_run, 1, "refund")

    r = await api.client.get("/admin/v1/approvals/pending", params={"each": 2},
                             headers=api.operator)
    assert r.status_code == 200, r.text
    groups = {g["tenant_id"]: g for g in r.json()["tenants"]}
    assert [g["tenant_id"] for g in r.json()["tenants"]] == [noisy, quiet]  # longest waiting
    assert groups[noisy]["pending"] == 300 and groups[quiet]["pending"] == 1
    assert [a["approval_id"] for a in groups[noisy]["first"]] == [str(a) for a in flood[:2]]
    assert [a["approval_id"] for a in groups[quiet]["first"]] == [str(single)]
    assert groups[quiet]["first"][0]["tool"] == "refund"

    seen: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, str | int] = {"limit": 200, **({"cursor": cursor} if cursor else {})}
        r = await api.client.get(f"/admin/v1/tenants/{noisy}/approvals/pending",
                                 params=params, headers=api.operator)
        assert r.status_code == 200, r.text
        seen += [a["approval_id"] for a in r.json()["data"]]
        cursor = r.json()["next_cursor"]
        if cursor is None:
            break
    assert seen == [str(a) for a in flood]
    r = await api.client.get(f"/admin/v1/tenants/{quiet}/approvals/pending",
                             headers=api.operator)
    assert [a["approval_id"] for a in r.json()["data"]] == [str(single)]
    # Operator only: a tenant's key lists nothing here.
    for path in ("/admin/v1/approvals/pending", f"/admin/v1/tenants/{quiet}/approvals/pending"):
        assert (await api.client.get(path, headers=hq)).status_code == 401
