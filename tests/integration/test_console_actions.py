"""The console acts (docs/how-to/console.md): cancel a run, decide approvals in bulk, revoke an API
key, pause and resume a tenant's admissions — each a form post with the session's CSRF token,
refused without it (nothing changes, nothing is logged), and recorded in the action log as the
session that did it. Pausing is also the operator API's (PUT .../admissions, logged by its route
as every operator API change is): a paused tenant's new runs get 409 admissions_paused."""

from __future__ import annotations

import asyncpg
import pytest

from tenantry.db import Database
from tests.support.api import Api, serving_api
from tests.support.console import api_actions, logged_actions, operator
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

pytestmark = pytest.mark.timeout(120)
FORGED = {"csrf": "0" * 64}


async def test_cancelling_a_run_from_its_page(api: Api, admin_conn: asyncpg.Connection) -> None:
    me = operator()
    tenant, h = await api.tenant()
    run = await api.start(h, await api.agent(h), "x")  # no worker here: it stays queued
    url = f"/console/runs/{tenant}/{run}/cancel"
    page = await api.client.get(f"/console/runs/{tenant}/{run}", headers=me.headers)
    assert f'action="/console/runs/{tenant}/{run}/cancel"' in page.text

    for form in ({}, FORGED):
        refused = await api.client.post(url, headers=me.headers, data=form)
        assert refused.status_code == 403
    assert (await api.run(h, run))["status"] == "queued"
    assert await logged_actions(admin_conn) == []

    done = await api.client.post(url, headers=me.headers, data=me.form())
    assert done.status_code == 303
    assert done.headers["location"] == f"/console/runs/{tenant}/{run}"
    assert (await api.run(h, run))["status"] == "cancelled"
    events = await api.events_until_end(h, run)
    assert [e["type"] for e in events][-2:] == ["CancelRequested", "RunCancelled"]
    ended = await api.client.get(f"/console/runs/{tenant}/{run}", headers=me.headers)
    assert "/cancel" not in ended.text  # no button on an ended run

    again = await api.client.post(url, headers=me.headers, data=me.form())
    assert again.status_code == 303  # asking twice changes nothing (the API's cancel)
    other = await api.client.post(f"/console/runs/{tenant}/run_{'0' * 32}/cancel",
                                  headers=me.headers, data=me.form())
    assert other.status_code == 404
    logged = await logged_actions(admin_conn)
    assert logged == [(me.actor, "cancel_run", tenant, run, "done")] * 2
    shown = await api.client.get("/console/actions", headers=me.headers)
    assert shown.status_code == 200 and shown.text.count(f'data-target="{run}"') == 2
    assert me.actor in shown.text


async def _pending(api: Api, h: dict[str, str]) -> str:
    found: list[str] = []

    async def asked() -> bool:
        page = (await api.client.get("/v1/approvals", params={"status": "pending"},
                                     headers=h)).json()
        found[:] = [a["approval_id"] for a in page["data"]]
        return bool(found)

    await until(asked, "the run asks for approval", 30)
    return found[0]


async def _waiting(api: Api, fakes: Fakes, name: str) -> tuple[str, dict[str, str], str, str]:
    tenant, h = await api.tenant(name)
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["effect"], needs_approval=["effect"])
    run = await api.start(h, agent, scripted(call("effect", note=name), answer("done")))
    return tenant, h, run, await _pending(api, h)


async def test_deciding_approvals_of_two_tenants_in_bulk(
    database_dsn: str, fakes: Fakes, admin_conn: asyncpg.Connection,
) -> None:
    me = operator()
    async with serving_api(database_dsn) as api, running_worker(database_dsn,
                                                                fakes.model.base_url):
        one = await _waiting(api, fakes, "One")
        two = await _waiting(api, fakes, "Two")
        inbox = await api.client.get("/console/approvals", headers=me.headers)
        for tenant, _, _, approval in (one, two):
            assert f'form="bulk-decide" value="{tenant}/{approval}"' in inbox.text
        picks = [f"{t}/{a}" for t, _, _, a in (one, two)]

        refused = await api.client.post("/console/approvals/bulk", headers=me.headers,
                                        data={**FORGED, "decision": "approve", "pick": picks})
        assert refused.status_code == 403
        nothing = await api.client.post("/console/approvals/bulk", headers=me.headers,
                                        data={"csrf": me.csrf, "decision": "approve"})
        assert nothing.status_code == 400 and "Tick at least one" in nothing.text
        assert await logged_actions(admin_conn) == []

        done = await api.client.post(
            "/console/approvals/bulk", headers=me.headers,
            data=me.form(decision="approve", comment="ok by ops",
                         pick=[*picks, picks[0]]))  # one sent twice is decided once
        assert done.status_code == 303
        shown = await api.client.get(done.headers["location"], headers=me.headers)
        assert "2 approved." in shown.text
        for _, h, run, _ in (one, two):
            events = await api.events_until_end(h, run)
            decided = [e["data"] for e in events if e["type"] == "ApprovalDecided"]
            assert [(d["decision"], d["decided_by"], d["comment"])  # type: ignore[index]
                    for d in decided] == [("approved", "operator", "ok by ops")]
            assert events[-1]["type"] == "RunFinished"

        # Decided meanwhile: refused alone, and on record as refused.
        late = await api.client.post("/console/approvals/bulk", headers=me.headers,
                                     data=me.form(decision="deny", pick=picks[0]))
        assert "0 denied, 1 refused" in (await api.client.get(
            late.headers["location"], headers=me.headers)).text
    logged = await logged_actions(admin_conn)
    assert logged[:2] == [(me.actor, "approve", one[0], one[3], "done"),
                          (me.actor, "approve", two[0], two[3], "done")]
    assert logged[2][:4] == (me.actor, "deny", one[0], one[3])
    assert logged[2][4].startswith("refused: ") and len(logged) == 3


async def test_revoking_an_api_key_from_the_tenants_page(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    me = operator()
    tenant, h = await api.tenant("Keyed")
    key_id = (await api.client.get(f"/admin/v1/tenants/{tenant}/api-keys",
                                   headers=api.operator)).json()["data"][0]["key_id"]
    tenants = await api.client.get("/console/tenants", headers=me.headers)
    assert f'href="/console/tenants/{tenant}/access"' in tenants.text
    page = await api.client.get(f"/console/tenants/{tenant}/access", headers=me.headers)
    url = f"/console/tenants/{tenant}/keys/{key_id}/revoke"
    assert f'action="{url}"' in page.text
    assert (await api.client.get("/v1/agents", headers=h)).status_code == 200  # cached now

    refused = await api.client.post(url, headers=me.headers, data=FORGED)
    assert refused.status_code == 403
    assert (await api.client.get("/v1/agents", headers=h)).status_code == 200

    done = await api.client.post(url, headers=me.headers, data=me.form())
    assert done.status_code == 303
    # The cached key is dropped at once: the next call with it is refused.
    assert (await api.client.get("/v1/agents", headers=h)).status_code == 401
    after = await api.client.get(done.headers["location"], headers=me.headers)
    assert "revoked." in after.text and f'action="{url}"' not in after.text
    missing = await api.client.post(f"/console/tenants/{tenant}/keys/key_{'0' * 32}/revoke",
                                    headers=me.headers, data=me.form())
    assert missing.status_code == 404
    assert await logged_actions(admin_conn) == [
        (me.actor, "revoke_api_key", tenant, key_id, "done")]


async def test_pausing_and_resuming_a_tenants_admissions(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    me = operator()
    tenant, h = await api.tenant("Paused")
    _, oh = await api.tenant("Unpaused")
    agent, other_agent = await api.agent(h), await api.agent(oh)
    url = f"/console/tenants/{tenant}/admissions"

    assert (await api.client.post(url, headers=me.headers,
                                  data={**FORGED, "paused": "true"})).status_code == 403
    await api.start(h, agent, "still admitted")
    bad = await api.client.post(url, headers=me.headers, data=me.form(paused="maybe"))
    assert bad.status_code == 400

    paused = await api.client.post(url, headers=me.headers, data=me.form(paused="true"))
    assert paused.status_code == 303
    page = await api.client.get(paused.headers["location"], headers=me.headers)
    assert "Admissions paused." in page.text and "Resume admissions" in page.text
    r = await api.client.post("/v1/runs", json={"agent_id": agent, "input": "x"}, headers=h)
    assert r.status_code == 409, r.text
    problem = r.json()
    assert problem["type"] == "admissions_paused" and problem["paused_at"]
    assert "resume" in problem["detail"]
    await api.start(oh, other_agent, "another tenant is not paused")

    # The operator API resumes (and pauses): the same flag, recorded as the API's.
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/admissions", headers=api.operator,
                             json={"paused": False})
    assert r.status_code == 200 and r.json() == {"tenant_id": tenant, "paused": False,
                                                 "paused_at": None}
    await api.start(h, agent, "admitted again")
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/admissions", headers=api.operator,
                             json={"paused": "yes please"})
    assert r.status_code in (400, 422) and r.headers["content-type"].startswith(
        "application/problem+json")
    bad_body = r.status_code
    r = await api.client.put("/admin/v1/tenants/nobody/admissions", headers=api.operator,
                             json={"paused": True})
    assert r.status_code == 404
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/admissions", json={"paused": True})
    assert r.status_code == 401
    assert await logged_actions(admin_conn) == [
        (me.actor, "pause_admissions", tenant, tenant, "done")]
    # The API's, by its route as every operator API change is (test_operator_actions.py),
    # once each: the refused ones with their status, the one without the token not at all.
    route = "PUT /admin/v1/tenants/{tenant_id}/admissions"
    path = f"/admin/v1/tenants/{tenant}/admissions"
    assert [a for a in await api_actions(admin_conn) if a[1] == route] == [
        ("operator API", route, tenant, path, "done (200)"),
        ("operator API", route, tenant, path, f"refused ({bad_body})"),
        ("operator API", route, "nobody", "/admin/v1/tenants/nobody/admissions",
         "refused (404)")]


async def test_the_tenant_pool_cannot_touch_the_action_log(db: Database) -> None:
    async with db.unscoped() as conn:
        for statement in ("SELECT * FROM console_actions",
                          "SELECT * FROM tenantry_console_actions(NULL, NULL, 10)",
                          "SELECT tenantry_console_record_action('me', 'cancel_run', 't', "
                          "'r', 'done', NULL)"):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.fetch(statement)
