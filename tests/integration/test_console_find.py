"""The console finds things: its search (run or task id, idempotency key, tenant id or name,
agent name) finds each target and only it, across tenants; a query that can match nothing
is a page with a note, never an error; tenant and agent names are shown beside their ids;
and the lists' filters survive in their links, so a reload or a shared link shows the
same view.

Before, an operator holding an idempotency key from a customer's ticket, or the name of a
tenant, had no way in: the console took ids only, in each list's own filter box."""

from __future__ import annotations

import re
from dataclasses import dataclass
from html import unescape
from urllib.parse import parse_qs, urlsplit

import asyncpg
import httpx2
import pytest

from tenantry.api.console import dead_letters, epoch, reads, session
from tenantry.db import Database
from tenantry.ids import RunId, TenantId
from tenantry.tools import approvals
from tests.support.activities import publish_activity
from tests.support.api import OPERATOR_TOKEN, Api


@dataclass(frozen=True)
class World:
    acme: str
    acme_key: dict[str, str]
    globex: str
    refunds: str  # Acme's agent "refund-helper"
    ledger: str  # Globex's agent "ledger-bot"
    acme_run: str  # started with the key "ticket-4411"
    globex_run: str  # started with the key "ticket-9000"
    task: str  # an Acme activity task


def _cookie() -> dict[str, str]:
    cookie, _ = session.issue(OPERATOR_TOKEN, epoch=epoch.FIRST)
    return {"Cookie": f"{session.SESSION_COOKIE}={cookie}"}


async def _page(api: Api, path: str, **params: str) -> httpx2.Response:
    return await api.client.get(path, params=params, headers=_cookie())


async def _search(api: Api, q: str) -> dict[str, list[str]]:
    """The search page's hits by kind: each hit's data-id."""
    r = await _page(api, "/console/search", q=q)
    assert r.status_code == 200, r.text
    hits: dict[str, list[str]] = {}
    for kind, body in re.findall(r'<section class="search-kind" data-kind="(\w+)">(.*?)</section>',
                                 r.text, re.S):
        hits[kind] = re.findall(r'<li data-id="([^"]+)"', body)
    return hits


@pytest.fixture
async def world(api: Api) -> World:
    acme, ha = await api.tenant("Acme Corp")
    globex, hg = await api.tenant("Globex")
    refunds = await api.agent(ha, "refund-helper")
    await api.agent(ha, "summarizer")
    ledger = await api.agent(hg, "ledger-bot")
    r = await api.client.post("/v1/runs", json={"agent_id": refunds, "input": "refund"},
                              headers={**ha, "Idempotency-Key": "ticket-4411"})
    assert r.status_code == 202, r.text
    acme_run = r.json()["run_id"]
    r = await api.client.post("/v1/runs", json={"agent_id": ledger, "input": "post"},
                              headers={**hg, "Idempotency-Key": "ticket-9000"})
    assert r.status_code == 202, r.text
    globex_run = r.json()["run_id"]
    await publish_activity(api, ha, "resize-image", "def handle(v, c):\n    return v\n")
    r = await api.client.post("/v1/activity-tasks", json={"activity": "resize-image",
                                                           "input": {"w": 10}}, headers=ha)
    assert r.status_code == 202, r.text
    return World(acme, ha, globex, refunds, ledger, acme_run, globex_run, r.json()["task_id"])


async def test_each_kind_of_query_finds_its_target_and_only_it(api: Api, world: World) -> None:
    w = world
    assert await _search(api, w.acme_run) == {"run": [w.acme_run]}
    assert await _search(api, w.globex_run) == {"run": [w.globex_run]}
    assert await _search(api, w.task) == {"task": [w.task]}
    # An idempotency key is exact: its run, in whichever tenant holds it.
    assert await _search(api, "ticket-9000") == {"key": [w.globex_run]}
    assert await _search(api, "ticket-4411") == {"key": [w.acme_run]}
    assert await _search(api, "ticket-44") == {}
    # Tenants by the start of their name or id, in any case.
    assert await _search(api, "acme c") == {"tenant": [w.acme]}
    assert await _search(api, "GLOB") == {"tenant": [w.globex]}
    assert await _search(api, w.globex[:-3].upper()) == {"tenant": [w.globex]}
    # Agents by the start of their name, or their id.
    assert await _search(api, "Refund") == {"agent": [w.refunds]}
    assert await _search(api, "ledger-b") == {"agent": [w.ledger]}
    assert await _search(api, w.ledger) == {"agent": [w.ledger]}
    # A well-formed id of nothing finds nothing.
    assert await _search(api, str(RunId.new())) == {}


async def test_hits_link_to_their_pages_with_names(api: Api, world: World) -> None:
    r = await _page(api, "/console/search", q="ticket-9000")
    page = unescape(r.text)
    assert f'href="/console/runs/{world.globex}/{world.globex_run}"' in page
    assert "tenant Globex" in page and "agent ledger-bot" in page
    r = await _page(api, "/console/search", q="ledger")
    assert (f"/console/runs?tenant={world.globex}&agent={world.ledger}"
            in unescape(r.text))
    # The header's box on every page, labelled, with the query kept in it.
    assert '<label for="console-search">Search</label>' in r.text
    assert 'id="console-search" name="q" type="search" value="ledger"' in r.text


@pytest.mark.parametrize("q", [
    "run\x00abc", "a" * 10_000, "\x07bell", "%", "_", "'; DROP TABLE runs; --", "agt_xyz",
    "run_" + "0" * 31 + "g", "<script>alert(1)</script>", "\u202e\u0000", "  ", "🦄",
])
async def test_a_query_that_can_match_nothing_is_an_empty_page(api: Api, world: World,
                                                                  q: str) -> None:
    r = await _page(api, "/console/search", q=q)
    assert r.status_code == 200, r.text
    assert 'class="search-kind"' not in r.text
    assert "<script>alert" not in r.text
    if "\x00" in q or "\x07" in q or len(q) > 255:
        assert 'id="search-note"' in r.text
        assert q not in r.text  # not written back


async def test_the_search_needs_the_operator_session(api: Api, world: World) -> None:
    r = await api.client.get("/console/search", params={"q": "Acme"})
    assert r.status_code == 303 and r.headers["location"].startswith("/console/login")
    _, key = await api.tenant("Initech")
    r = await api.client.get("/console/search", params={"q": "Acme"}, headers=key)
    assert r.status_code == 303 and "Acme Corp" not in r.text


async def test_names_are_shown_beside_ids(api: Api, db: Database, world: World) -> None:
    w = world
    runs = unescape((await _page(api, "/console/runs")).text)
    row = re.search(rf'<tr data-run="{w.globex_run}".*?</tr>', runs, re.S)
    assert row, runs
    assert "Globex" in row[0] and f"<code class=\"muted\">{w.globex}</code>" in row[0]
    assert "ledger-bot" in row[0] and f"<code class=\"muted\">{w.ledger}</code>" in row[0]
    live = unescape((await _page(api, "/console/runs", partial="1")).text)
    assert "refund-helper" in live and "Acme Corp" in live

    run = unescape((await _page(api, f"/console/runs/{w.acme}/{w.acme_run}")).text)
    assert f"Acme Corp</a> <code class=\"muted\">{w.acme}</code>" in run
    assert f"refund-helper <code>{w.refunds}</code>" in run

    async with db.tenant_tx(TenantId(w.globex)) as conn:
        await approvals.open_request(conn, TenantId(w.globex), RunId.parse(w.globex_run),
                                     f"{w.globex_run}:0:0", "send_money", {"n": 1})
    for params in ({}, {"tenant": w.globex}):
        inbox = unescape((await _page(api, "/console/approvals", **params)).text)
        assert "Globex" in inbox and f"<code class=\"muted\">{w.globex}</code>" in inbox, params

    tenants = unescape((await _page(api, "/console/tenants")).text)
    assert f"Globex</a><br><code class=\"muted\">{w.globex}</code>" in tenants


def _link(page: str, label: str) -> dict[str, list[str]]:
    found = re.search(rf'<a href="([^"]+)">{re.escape(label)}</a>', page)
    assert found, page
    return parse_qs(urlsplit(unescape(found[1])).query)


async def test_filters_survive_reload_and_pagination(api: Api, db: Database,
                                                      world: World) -> None:
    w = world
    _, h = await api.tenant("Busy")
    busy = await api.agent(h, "busy-bee")
    for i in range(reads.PAGE + 1):
        await api.start(h, busy, f"n{i}")
    # The runs list: status, tenant and agent are read from the URL, shown in the form,
    # and kept in the next page's link and the live refresh's.
    r = await _page(api, "/console/runs", status="queued", agent=busy)
    assert r.status_code == 200
    page = unescape(r.text)
    assert '<option value="queued" selected>' in page
    assert f'name="agent" value="{busy}"' in page
    older = _link(page, "Older runs →")
    assert older["status"] == ["queued"] and older["agent"] == [busy] and older["before"]
    refresh = re.search(r'data-refresh="([^"]+)"', page)
    assert refresh and "status=queued" in refresh[1] and busy in refresh[1]
    second = unescape((await _page(api, "/console/runs", **{k: v[0] for k, v in
                                                             older.items()})).text)
    assert '<option value="queued" selected>' in second
    assert len(re.findall(r"<tr data-run=", second)) == 1  # 51 runs: one on page two

    # The inbox filtered by tenant keeps the tenant in its "More" link.
    async with db.tenant_tx(TenantId(w.acme)) as conn:
        for i in range(reads.PAGE + 1):
            await approvals.open_request(conn, TenantId(w.acme), RunId.parse(w.acme_run),
                                         f"{w.acme_run}:{i}:0", "refund", {"n": i})
    inbox = unescape((await _page(api, "/console/approvals", tenant=w.acme)).text)
    more = _link(inbox, "More →")
    assert more["tenant"] == [w.acme] and more["after"]
    again = unescape((await _page(api, "/console/approvals",
                                  **{k: v[0] for k, v in more.items()})).text)
    assert f'id="inbox-tenant">{w.acme}</code>' in again
    assert len(re.findall(r'<article class="approval"', again)) == 1



async def test_the_activities_tenant_filter_survives_pagination(
        api: Api, admin_conn: asyncpg.Connection, world: World) -> None:
    w = world
    for _ in range(dead_letters.PAGE):  # with the world's one: a page and one more
        r = await api.client.post("/v1/activity-tasks", json={"activity": "resize-image",
                                                               "input": {}}, headers=w.acme_key)
        assert r.status_code == 202, r.text
    _, other = await api.tenant("Other")
    await publish_activity(api, other, "noise", "def handle(v, c):\n    return v\n")
    r = await api.client.post("/v1/activity-tasks", json={"activity": "noise", "input": {}},
                              headers=other)
    assert r.status_code == 202, r.text
    # Dead-lettered as the dispatcher leaves them (no sandbox runs in this test).
    await admin_conn.execute(
        "UPDATE runs SET status = 'waiting', "
        "error = '{\"dead_lettered\": true, \"message\": \"sandbox died\"}'::jsonb "
        "WHERE kind = 'activity'")
    first = unescape((await _page(api, "/console/activities", tenant=w.acme)).text)
    assert set(re.findall(r'<tr data-task="[^"]+" data-tenant="([^"]+)"', first)) == {w.acme}
    assert "Acme Corp" in first
    older = _link(first, "Older →")
    assert older["tenant"] == [w.acme] and older["before"]
    second = unescape((await _page(api, "/console/activities",
                                   **{k: v[0] for k, v in older.items()})).text)
    assert f'id="dead-letters-tenant">{w.acme}</code>' in second
    assert re.findall(r'<tr data-task="[^"]+" data-tenant="([^"]+)"', second) == [w.acme]
