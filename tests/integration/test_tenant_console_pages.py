"""The tenant console's account pages over HTTP (issue 41): agents with their versions,
evaluations and promotion; API keys; usage against the caps. Each form does what the
API's route does, for a role holding the route's scope only, and is recorded in the
tenant's audit trail under the person's name. The browser's view of the same pages is
tests/e2e/test_tenant_console.py."""

from __future__ import annotations

import re
from collections.abc import Mapping

import asyncpg

from tests.support.api import Api
from tests.support.evaluations import (
    POLICY_CASE,
    STATUS_CASE,
    agent_with_two_versions,
    evaluation_done,
)
from tests.support.oauth_mcp_server import OAuthMcpServer
from tests.support.scripts import answer, scripted
from tests.support.tenant_console import person
from tests.support.worker import Fakes


async def _version(api: Api, h: dict[str, str], agent: str) -> int:
    r = await api.client.post(f"/v1/agents/{agent}/versions", headers=h,
                              json={"model": "scripted", "system_prompt": "Be briefer."})
    assert r.status_code == 201, r.text
    number: int = r.json()["version"]
    return number


async def _live(api: Api, h: dict[str, str], agent: str) -> int:
    r = await api.client.get(f"/v1/agents/{agent}", headers=h)
    live: int = r.json()["live_version"]
    return live


async def test_a_developer_promotes_a_version_as_the_api_does(api: Api) -> None:
    _, h = await api.tenant()
    agent = await api.agent(h, name="support")
    assert await _version(api, h, agent) == 2
    dev = await person(api, h, "dev@example.com", "developer")
    listed = await api.client.get("/app/agents", headers=dev.headers)
    assert listed.status_code == 200 and f'data-agent="{agent}"' in listed.text
    page = await api.client.get(f"/app/agents/{agent}", headers=dev.headers)
    assert page.status_code == 200
    assert re.search(r'id="live-version">v1<', page.text)
    assert 'id="no-evaluations"' in page.text
    assert page.text.count('class="decide promote"') == 1  # v2's: v1 is live

    r = await api.client.post(f"/app/agents/{agent}/promote", headers=dev.headers,
                              data=dev.form(version="2"))
    assert r.status_code == 303 and r.headers["location"] == f"/app/agents/{agent}?promoted=2"
    assert await _live(api, h, agent) == 2
    promotions = (await api.client.get(f"/v1/agents/{agent}/promotions", headers=h)).json()
    assert [(x["version"], x["previous_version"], x["promoted_by"])
            for x in promotions["data"]] == [(2, 1, f"user:{dev.user_id}")]
    trail = (await api.client.get("/v1/audit", params={"actor": f"user:{dev.user_id}"},
                                  headers=h)).json()["data"]
    assert [(e["action"], e["target"], e["status"]) for e in trail] == [
        ("POST /app/agents/{agent_id}/promote", f"/app/agents/{agent}/promote", 303)]
    page = await api.client.get(f"/app/agents/{agent}?promoted=2", headers=dev.headers)
    assert re.search(r'id="live-version">v2<', page.text)
    assert "Version 2 is live now." in page.text

    # No such version, or evidence that is no evaluation: refused, nothing changes.
    r = await api.client.post(f"/app/agents/{agent}/promote", headers=dev.headers,
                              data=dev.form(version="3"))
    assert r.status_code == 409
    r = await api.client.post(f"/app/agents/{agent}/promote", headers=dev.headers,
                              data=dev.form(version="1", evaluation_id="eval_nope"))
    assert r.status_code == 409
    for version in ("x", "²", "0"):
        r = await api.client.post(f"/app/agents/{agent}/promote", headers=dev.headers,
                                  data=dev.form(version=version))
        assert r.status_code == 400, version
    assert await _live(api, h, agent) == 2


async def test_a_viewer_sees_agents_but_cannot_promote(api: Api) -> None:
    _, h = await api.tenant()
    agent = await api.agent(h)
    await _version(api, h, agent)
    viewer = await person(api, h, "vic@example.com", "viewer")
    page = await api.client.get(f"/app/agents/{agent}", headers=viewer.headers)
    assert page.status_code == 200 and 'data-version="2"' in page.text
    assert "/promote" not in page.text
    r = await api.client.post(f"/app/agents/{agent}/promote", headers=viewer.headers,
                              data=viewer.form(version="2"))
    assert r.status_code == 403 and "agents:manage" in r.text
    r = await api.client.post(f"/app/agents/{agent}/promote", headers=viewer.headers,
                              data={"version": "2"})
    assert r.status_code == 403 and "CSRF" in r.text
    assert await _live(api, h, agent) == 1


async def test_another_tenants_agent_is_not_found(api: Api) -> None:
    _, theirs = await api.tenant("Theirs")
    their_agent = await api.agent(theirs, name="secret-agent")
    _, mine = await api.tenant("Mine")
    boss = await person(api, mine, "boss@mine.example", "admin")
    listed = await api.client.get("/app/agents", headers=boss.headers)
    assert their_agent not in listed.text and 'id="no-agents"' in listed.text
    page = await api.client.get(f"/app/agents/{their_agent}", headers=boss.headers)
    nothing = await api.client.get("/app/agents/agt_" + "0" * 32, headers=boss.headers)
    assert page.status_code == nothing.status_code == 404 and page.text == nothing.text
    r = await api.client.post(f"/app/agents/{their_agent}/promote", headers=boss.headers,
                              data=boss.form(version="1"))
    assert r.status_code == 404
    assert (await api.client.get(f"/v1/agents/{their_agent}/promotions",
                                 headers=theirs)).json()["data"] == []


async def test_evaluations_side_by_side_and_a_promotion_on_their_evidence(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    _, h, agent = await agent_with_two_versions(api, fakes)
    dev = await person(api, h, "dev@example.com", "developer")
    evaluations = []
    for cases in ([STATUS_CASE], [POLICY_CASE, STATUS_CASE]):
        r = await api.client.post(f"/v1/agents/{agent}/test-sets", headers=h, json={
            "name": f"{len(cases)} cases", "cases": cases,
            "stubs": {"effect": "shipped (stub)"}})
        assert r.status_code == 201, r.text
        r = await api.client.post(f"/v1/agents/{agent}/evaluations", headers=h, json={
            "test_set_id": r.json()["test_set_id"], "candidate": {"version": 2}})
        assert r.status_code == 201, r.text
        evaluations.append(await evaluation_done(api, h, agent, r.json()["evaluation_id"]))
    passed, failed = (e["evaluation_id"] for e in evaluations)

    page = (await api.client.get(f"/app/agents/{agent}", headers=dev.headers)).text
    rows = {m[0]: m[1] for m in re.findall(r'<tr data-evaluation="([^"]+)">(.*?)</tr>', page,
                                           re.S)}
    # Each side's results, the baseline's beside the candidate's.
    assert re.search(r'data-side="baseline">v1: .*?1/1 passed', rows[passed])
    assert re.search(r'data-side="candidate">v2: .*?1/1 passed', rows[passed])
    assert re.search(r'data-side="baseline">v1: .*?2/2 passed', rows[failed])
    assert re.search(r'data-side="candidate">v2: .*?1/2 passed</span> · 1 failed', rows[failed])
    # Only the evaluation v2 passed offers it as evidence.
    assert f'name="evaluation_id" value="{passed}"' in rows[passed]
    assert "evaluation_id" not in rows[failed]

    # Evidence v2 failed: refused, as the API refuses it.
    r = await api.client.post(f"/app/agents/{agent}/promote", headers=dev.headers,
                              data=dev.form(version="2", evaluation_id=failed))
    assert r.status_code == 409 and "failed 1 case" in r.text
    assert await _live(api, h, agent) == 1
    r = await api.client.post(f"/app/agents/{agent}/promote", headers=dev.headers,
                              data=dev.form(version="2", evaluation_id=passed))
    assert r.status_code == 303
    promotions = (await api.client.get(f"/v1/agents/{agent}/promotions", headers=h)).json()
    assert [(x["version"], x["evaluation_id"]) for x in promotions["data"]] == [(2, passed)]
    page = (await api.client.get(f"/app/agents/{agent}", headers=dev.headers)).text
    assert re.search(r'<table class="grid" id="promotions">.*?v1 → v2.*?'
                     + re.escape(f"user:{dev.user_id}") + r".*?" + re.escape(passed), page,
                     re.S)


def _cell(html: str, row: str, column: int) -> str:
    """The text of a table row's ``column``-th cell (0-based), the row found by its id or
    data attribute."""
    found = re.search(rf"<tr {row}>(.*?)</tr>", html, re.S)
    assert found is not None, row
    cells = re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", found.group(1), re.S)
    return re.sub(r"<[^>]+>", "", cells[column]).strip()


async def test_an_admin_makes_a_key_that_works_sees_it_once_and_revokes_it(api: Api) -> None:
    _, h = await api.tenant()
    boss = await person(api, h, "boss@example.com", "admin")
    r = await api.client.post("/app/keys", headers=boss.headers, data={
        "csrf": boss.csrf, "name": "dashboard", "scope": ["runs:read", "audit:read"],
        "expires_in_days": "30"})
    assert r.status_code == 201, r.text
    secret = re.search(r'<pre id="new-key-secret">([^<]+)</pre>', r.text)
    assert secret is not None
    key = {"Authorization": f"Bearer {secret.group(1)}"}
    made = (await api.client.get("/v1/api-keys", headers=h)).json()["data"][0]
    assert (made["name"], made["scopes"], made["created_by"]) == (
        "dashboard", ["audit:read", "runs:read"], f"user:{boss.user_id}")
    assert made["expires_at"] is not None
    # The key does what its scopes allow, and nothing more.
    assert (await api.client.get("/v1/runs", headers=key)).status_code == 200
    assert (await api.client.get("/v1/audit", headers=key)).status_code == 200
    assert (await api.client.get("/v1/api-keys", headers=key)).status_code == 403
    # The list shows it, never its secret again.
    page = await api.client.get("/app/keys", headers=boss.headers)
    assert f'data-key="{made["key_id"]}" data-state="active"' in page.text
    assert made["prefix"] in page.text and secret.group(1) not in page.text

    r = await api.client.post(f"/app/keys/{made['key_id']}/revoke", headers=boss.headers,
                              data=boss.form())
    assert r.status_code == 303
    assert (await api.client.get("/v1/runs", headers=key)).status_code == 401
    page = await api.client.get(r.headers["location"], headers=boss.headers)
    assert f'data-key="{made["key_id"]}" data-state="revoked"' in page.text
    assert "revoked: it works no more" in page.text
    nothing = await api.client.post("/app/keys/key_" + "0" * 32 + "/revoke",
                                    headers=boss.headers, data=boss.form())
    assert nothing.status_code == 404
    trail = (await api.client.get("/v1/audit", params={"actor": f"user:{boss.user_id}"},
                                  headers=h)).json()["data"]
    assert [(e["action"], e["status"]) for e in trail] == [
        ("POST /app/keys/{key_id}/revoke", 303), ("POST /app/keys", 201)]


async def test_a_key_form_is_refused_without_keys_manage_or_beyond_the_role(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    _, h = await api.tenant()
    dev = await person(api, h, "dev@example.com", "developer")
    assert "/app/keys" not in (await api.client.get("/app", headers=dev.headers)).text
    r = await api.client.get("/app/keys", headers=dev.headers)
    assert r.status_code == 403 and "keys:manage" in r.text
    r = await api.client.post("/app/keys", headers=dev.headers,
                              data={"csrf": dev.csrf, "scope": "runs:read"})
    assert r.status_code == 403 and "keys:manage" in r.text
    boss = await person(api, h, "boss@example.com", "admin")
    for form, status, says in (
            ({"scope": "runs:fly"}, 400, "not a scope"),
            ({}, 400, "at least one scope"),
            ({"scope": "runs:read", "expires_in_days": "0"}, 400, "number of days"),
            ({"scope": "runs:read", "expires_in_days": "²"}, 400, "number of days")):
        r = await api.client.post("/app/keys", headers=boss.headers,
                                  data={"csrf": boss.csrf, **form})
        assert r.status_code == status and says in r.text, form
    r = await api.client.post("/app/keys", headers=boss.headers, data={"scope": "runs:read"})
    assert r.status_code == 403 and "CSRF" in r.text
    # A role narrower than a scope cannot grant it: the admin, made a developer.
    r = await api.client.patch(f"/v1/users/{boss.user_id}", headers=h, json={"role": "developer"})
    assert r.status_code == 200
    keys = await admin_conn.fetchval("SELECT count(*) FROM api_keys")
    r = await api.client.post("/app/keys", headers=boss.headers,
                              data={"csrf": boss.csrf, "scope": "audit:read"})
    assert r.status_code == 403
    assert await admin_conn.fetchval("SELECT count(*) FROM api_keys") == keys


async def test_usage_shows_the_months_figures_against_the_caps(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    tenant, h = await api.tenant()
    agent = await api.agent(h)
    run = await api.start(h, agent, scripted(answer("ok")))
    assert (await api.events_until_end(h, run))[-1]["type"] == "RunFinished"
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/policy", headers=api.operator,
                             json={"monthly_spend_cap_micros": 5_000_000, "max_queued": 40})
    assert r.status_code == 200, r.text
    viewer = await person(api, h, "vic@example.com", "viewer")
    page = await api.client.get("/app/usage", headers=viewer.headers)
    assert page.status_code == 200
    mine = (await api.client.get("/v1/usage", params={"group_by": "agent"},
                                 headers=h)).json()
    total = mine["total"]
    assert total["runs"] == 1 and total["calls"] >= 1
    assert _cell(page.text, 'id="usage-total"', 1) == "1"
    assert _cell(page.text, 'id="usage-total"', 2) == f"{total['calls']:,}"
    assert _cell(page.text, 'id="usage-total"', 3) == (
        f"{total['input_tokens']:,} / {total['output_tokens']:,}")
    assert _cell(page.text, f'data-agent="{agent}"', 1) == "1"
    assert _cell(page.text, 'data-cap="spend"', 2) == "$5.000000"
    assert _cell(page.text, 'data-cap="queued"', 2) == "40"
    assert _cell(page.text, 'data-cap="tokens"', 2) == "none"


def _server_row(page: str, name: str) -> str:
    start = page.index(f'<tr data-server="{name}"')
    return page[start:page.index("</tr>", start)]


def _form_action(headers: Mapping[str, str]) -> set[str]:
    directives = (d.split() for d in headers["content-security-policy"].split(";"))
    return next(set(d[1:]) for d in directives if d and d[0] == "form-action")


async def test_a_developer_connects_an_oauth_tool_server_a_viewer_cannot(
    api: Api, fakes: Fakes,
) -> None:
    async with OAuthMcpServer() as whoami:
        tenant, h = await api.tenant()
        await api.tool_server(tenant, fakes.mcp.url, name="effects")
        await api.tool_server(tenant, whoami.url, name="whoami", honours_idempotency_keys=False)
        viewer = await person(api, h, "vic@example.com", "viewer")
        dev = await person(api, h, "dev@example.com", "developer")

        # A viewer sees the servers and their state, with no Connect and no form it allows.
        page = await api.client.get("/app/tool-servers", headers=viewer.headers)
        assert page.status_code == 200
        assert 'data-oauth="authorization_required"' in _server_row(page.text, "whoami")
        assert "/connect" not in page.text and _form_action(page.headers) == {"'self'"}
        r = await api.client.post("/app/tool-servers/whoami/connect", headers=viewer.headers,
                                  data=viewer.form())
        assert r.status_code == 403 and "integrations:manage" in r.text
        assert whoami.registrations == 0

        page = await api.client.get("/app/tool-servers", headers=dev.headers)
        assert "/connect" not in _server_row(page.text, "effects")
        assert 'action="/app/tool-servers/whoami/connect"' in _server_row(page.text, "whoami")
        # Its form leads to the authorization server and back to the platform's callback.
        assert _form_action(page.headers) == {"'self'", api.base_url, whoami.origin}
        r = await api.client.post("/app/tool-servers/whoami/connect", headers=dev.headers,
                                  data={"csrf": "0" * 64})
        assert r.status_code == 403 and whoami.registrations == 0
        r = await api.client.post("/app/tool-servers/effects/connect", headers=dev.headers,
                                  data=dev.form())
        assert r.status_code == 409 and "does not authorize with OAuth" in r.text
        r = await api.client.post("/app/tool-servers/nope/connect", headers=dev.headers,
                                  data=dev.form())
        assert r.status_code == 404

        sent = await api.client.post("/app/tool-servers/whoami/connect", headers=dev.headers,
                                     data=dev.form())
        assert sent.status_code == 303
        assert sent.headers["location"].startswith(f"{whoami.origin}/authorize?")
        back = await api.client.get(sent.headers["location"], follow_redirects=False)
        landed = await api.client.get(back.headers["location"])
        assert landed.status_code == 200 and "whoami is connected" in landed.text
        page = await api.client.get("/app/tool-servers", headers=dev.headers)
        assert 'data-oauth="connected"' in _server_row(page.text, "whoami")
        trail = (await api.client.get("/v1/audit", params={"actor": f"user:{dev.user_id}"},
                                      headers=h)).json()["data"]
        assert [(e["action"], e["target"]) for e in trail] == [
            ("POST /app/tool-servers/{name}/connect", "/app/tool-servers/whoami/connect")]
