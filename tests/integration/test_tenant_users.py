"""A tenant's people (ADR 0043 §5-6): invited by a keys:manage key or the operator, signed
in to the tenant console with a one-time link (single use, 15 minutes), in a session that
shows their own tenant only and lets them do what their role's scopes allow."""

from __future__ import annotations

import asyncpg

from tests.support.api import Api
from tests.support.tenant_console import (
    SESSION_COOKIE,
    invite,
    link,
    person,
    signed_in,
    token_of,
    use_link,
)


async def _users(api: Api, h: dict[str, str]) -> list[dict[str, object]]:
    r = await api.client.get("/v1/users?limit=200", headers=h)
    assert r.status_code == 200, r.text
    data: list[dict[str, object]] = r.json()["data"]
    return data


async def test_a_keys_manage_key_invites_lists_changes_and_disables_users(api: Api) -> None:
    _, admin = await api.tenant()
    r = await api.client.post("/v1/users", headers=admin,
                              json={"email": "ada@example.com", "role": "approver"})
    assert r.status_code == 201, r.text
    ada = r.json()
    assert ada["user_id"].startswith("usr_") and ada["email"] == "ada@example.com"
    assert (ada["role"], ada["scopes"]) == ("approver", ["approvals:decide", "runs:read"])
    assert ada["created_by"].startswith("key:key_") and ada["disabled_at"] is None
    user = f"/v1/users/{ada['user_id']}"
    assert (await api.client.get(user, headers=admin)).json() == ada
    assert [u["user_id"] for u in await _users(api, admin)] == [ada["user_id"]]
    # The same address again (any case) is a conflict, not a second user.
    r = await api.client.post("/v1/users", headers=admin,
                              json={"email": "ADA@example.com", "role": "viewer"})
    assert r.status_code == 409, r.text
    r = await api.client.patch(user, headers=admin, json={"role": "viewer"})
    assert r.status_code == 200 and r.json()["scopes"] == ["runs:read"], r.text
    r = await api.client.delete(user, headers=admin)
    assert r.status_code == 200 and r.json()["disabled_at"] is not None, r.text
    # Disabled: still listed (the trail names them), no longer given a link.
    assert [u["disabled_at"] is not None for u in await _users(api, admin)] == [True]
    r = await api.client.post(f"{user}/sign-in-links", headers=admin)
    assert r.status_code == 409, r.text
    assert (await api.client.get("/v1/users/usr_" + "0" * 32, headers=admin)).status_code == 404
    assert (await api.client.get("/v1/users/nonsense", headers=admin)).status_code == 404
    # The account changes are in the tenant's trail, by the key that made them.
    r = await api.client.get("/v1/audit", params={"kind": "change"}, headers=admin)
    actions = [e["action"] for e in r.json()["data"] if e["actor"].startswith("key:")]
    assert actions == ["DELETE /v1/users/{user_id}", "PATCH /v1/users/{user_id}",
                       "POST /v1/users"]
    # A key without keys:manage is refused.
    r = await api.client.post("/v1/api-keys", headers=admin, json={"scopes": ["runs:read"]})
    reader = {"Authorization": f"Bearer {r.json()['api_key']}"}
    r = await api.client.post("/v1/users", headers=reader,
                              json={"email": "eve@example.com", "role": "admin"})
    assert r.status_code == 403 and r.json()["scope"] == "keys:manage"


async def test_bad_input_is_a_problem_and_stores_nothing(api: Api) -> None:
    _, admin = await api.tenant()
    for body in ({"email": "not-an-address", "role": "viewer"},
                 {"email": "a@b", "role": "viewer"},
                 {"email": "ada\u0000@example.com", "role": "viewer"},
                 {"email": "ada@example.com\u0000", "role": "viewer"},
                 {"email": "ada @example.com", "role": "viewer"},
                 {"email": "x" * 250 + "@example.com", "role": "viewer"},
                 {"email": "ada@example.com", "role": "owner"},
                 {"email": "ada@example.com", "role": "viewer\u0000"},
                 {"email": "ada@example.com"},
                 {"email": "ada@example.com", "role": "viewer", "scopes": ["keys:manage"]},
                 {"email": 7, "role": "viewer"}):
        r = await api.client.post("/v1/users", headers=admin, json=body)
        assert r.status_code == 400, (body, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
    r = await api.client.post("/v1/users", headers={**admin, "content-type": "application/json"},
                              content=b'{"email": "a\\ud800@ex.com", "role": "viewer"}')
    assert r.status_code == 400, r.text
    assert await _users(api, admin) == []
    user_id = await invite(api, admin, "ada@example.com", "viewer")
    r = await api.client.patch(f"/v1/users/{user_id}", headers=admin, json={"role": "root"})
    assert r.status_code == 400, r.text
    assert (await api.client.get(f"/v1/users/{user_id}", headers=admin)).json()["role"] == "viewer"


async def test_the_operator_invites_a_tenants_first_admin_and_makes_their_link(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    tenant, h = await api.tenant()
    r = await api.client.post(f"/admin/v1/tenants/{tenant}/users", headers=api.operator,
                              json={"email": "root@acme.example", "role": "admin"})
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["created_by"] == "operator" and made["role"] == "admin"
    r = await api.client.post(
        f"/admin/v1/tenants/{tenant}/users/{made['user_id']}/sign-in-links",
        headers=api.operator)
    assert r.status_code == 201, r.text
    url = r.json()["url"]
    assert url.startswith(f"{api.base_url}/app/sign-in?token=tsl_")
    # Only the token's hash is stored.
    stored = await admin_conn.fetch("SELECT link_hash FROM sign_in_links")
    assert len(stored) == 1 and token_of(url).encode() not in stored[0]["link_hash"]
    assert (await signed_in(api, made["user_id"], url)).csrf
    # Another tenant's id, or none: not found.
    r = await api.client.post("/admin/v1/tenants/tnt_nope/users", headers=api.operator,
                              json={"email": "root@acme.example", "role": "admin"})
    assert r.status_code == 404, r.text
    r = await api.client.post(f"/admin/v1/tenants/{tenant}/users", headers=h,
                              json={"email": "root2@acme.example", "role": "admin"})
    assert r.status_code == 401
    # The operator's changes are in the tenant's trail too.
    r = await api.client.get("/v1/audit", params={"actor": "operator"}, headers=h)
    assert [e["action"] for e in r.json()["data"] if "users" in e["action"]] == [
        "POST /admin/v1/tenants/{tenant_id}/users/{user_id}/sign-in-links",
        "POST /admin/v1/tenants/{tenant_id}/users"]


async def test_a_link_signs_in_once_and_a_replay_is_refused(api: Api) -> None:
    _, admin = await api.tenant()
    user_id = await invite(api, admin, "ada@example.com", "viewer")
    url = await link(api, admin, user_id)
    # Opening the link (a preview bot, a mail scanner) does not use it.
    parts = url.split("/app/", 1)[1]
    for _ in range(2):
        assert (await api.client.get(f"/app/{parts}")).status_code == 200
    ada = await signed_in(api, user_id, url)
    page = await api.client.get("/app", headers=ada.headers)
    assert page.status_code == 200 and "ada@example.com" in page.text
    api.client.cookies.clear()
    replay = await use_link(api.client, url)
    assert replay.status_code == 410 and "used already" in replay.text
    assert SESSION_COOKIE not in replay.cookies
    # A made-up token, and a form without its double-submit cookie, are refused too.
    api.client.cookies.clear()
    r = await use_link(api.client, url.replace("token=tsl_", "token=tsl_x"))
    assert r.status_code == 410
    api.client.cookies.clear()
    r = await api.client.post("/app/sign-in", data={"csrf": "0" * 32,
                                                    "token": token_of(url)})
    assert r.status_code == 403 and SESSION_COOKIE not in r.cookies


async def test_an_expired_link_is_refused(api: Api, admin_conn: asyncpg.Connection) -> None:
    _, admin = await api.tenant()
    user_id = await invite(api, admin, "ada@example.com", "viewer")
    url = await link(api, admin, user_id)
    lasted = await admin_conn.fetchval(
        "SELECT expires_at - created_at FROM sign_in_links")
    assert lasted.total_seconds() == 15 * 60
    await admin_conn.execute(
        "UPDATE sign_in_links SET expires_at = now() - interval '1 second'")
    r = await use_link(api.client, url)
    assert r.status_code == 410 and "expired" in r.text
    assert await admin_conn.fetchval("SELECT count(*) FROM app_sessions") == 0


async def test_sign_out_and_disabling_end_the_session(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    _, admin = await api.tenant()
    ada = await person(api, admin, "ada@example.com", "admin")
    bob = await person(api, admin, "bob@example.com", "viewer")
    api.client.cookies.clear()
    # Sign-out is a form: without the session's token it is refused.
    r = await api.client.post("/app/sign-out", headers=ada.headers, data={})
    assert r.status_code == 403
    assert (await api.client.get("/app", headers=ada.headers)).status_code == 200
    r = await api.client.post("/app/sign-out", headers=ada.headers, data=ada.form())
    assert r.status_code == 200 and "signed out" in r.text
    # The session row ended: the cookie's copy is useless now.
    r = await api.client.get("/app", headers=ada.headers)
    assert r.status_code == 401 and "not signed in" in r.text
    # Disabling a user ends their sessions at once.
    assert (await api.client.get("/app", headers=bob.headers)).status_code == 200
    await api.client.delete(f"/v1/users/{bob.user_id}", headers=admin)
    assert (await api.client.get("/app", headers=bob.headers)).status_code == 401
    # An expired session is no session either.
    carl = await person(api, admin, "carl@example.com", "viewer")
    await admin_conn.execute("UPDATE app_sessions SET expires_at = now() "
                             "WHERE revoked_at IS NULL")
    assert (await api.client.get("/app", headers=carl.headers)).status_code == 401
    # Nor is one of an erased tenant: the erase deletes its people (their addresses are
    # personal data) with their links and sessions.
    gone, h = await api.tenant("Gone")
    dave = await person(api, h, "dave@gone.example", "admin")
    unused = await link(api, h, await invite(api, h, "erin@gone.example", "viewer"))
    r = await api.client.post(f"/admin/v1/tenants/{gone}/erase", headers=api.operator)
    assert r.status_code == 202, r.text
    assert (await api.client.get("/app", headers=dave.headers)).status_code == 401
    assert (await use_link(api.client, unused)).status_code == 410
    for table in ("tenant_users", "sign_in_links", "app_sessions"):
        assert await admin_conn.fetchval(
            f"SELECT count(*) FROM {table} WHERE tenant_id = $1", gone) == 0, table


async def test_a_session_shows_its_own_tenant_only(api: Api) -> None:
    _, a = await api.tenant("A")
    _, b = await api.tenant("B")
    run_a = await api.start(a, await api.agent(a), "a's question")
    run_b = await api.start(b, await api.agent(b), "b's question")
    ada = await person(api, a, "ada@a.example", "admin")
    home = await api.client.get("/app", headers=ada.headers)
    assert run_a in home.text and run_b not in home.text
    mine = await api.client.get(f"/app/runs/{run_a}", headers=ada.headers)
    assert mine.status_code == 200 and "a&#39;s question" in mine.text
    theirs = await api.client.get(f"/app/runs/{run_b}", headers=ada.headers)
    nothing = await api.client.get("/app/runs/run_" + "0" * 32, headers=ada.headers)
    # Another tenant's run is the page for no run at all: nothing says it exists.
    assert theirs.status_code == nothing.status_code == 404
    assert theirs.text == nothing.text and run_b not in theirs.text
    # The same person's role reaches no further on the API (a session is no key).
    r = await api.client.get(f"/v1/runs/{run_a}", headers=ada.headers)
    assert r.status_code == 401


async def test_each_page_checks_the_role(api: Api) -> None:
    _, admin = await api.tenant()
    viewer = await person(api, admin, "vic@example.com", "viewer")
    boss = await person(api, admin, "boss@example.com", "admin")
    await api.client.post("/v1/users", headers=admin,
                          json={"email": "x@example.com", "role": "viewer"})
    # The audit trail is for audit:read (admin) only; the nav shows what the role may see.
    r = await api.client.get("/app/audit", headers=viewer.headers)
    assert r.status_code == 403 and "audit:read" in r.text
    assert "/app/audit" not in (await api.client.get("/app", headers=viewer.headers)).text
    r = await api.client.get("/app/audit", headers=boss.headers)
    assert r.status_code == 200 and "POST /v1/users" in r.text
    # A viewer's decision is refused before anything is looked up, with or without a token.
    target = "/app/approvals/apr_" + "0" * 32
    r = await api.client.post(target, headers=viewer.headers,
                              data=viewer.form(decision="approve"))
    assert r.status_code == 403 and "approvals:decide" in r.text
    r = await api.client.post(target, headers=viewer.headers, data={"decision": "approve"})
    assert r.status_code == 403 and "CSRF" in r.text
    # An admin's form for no such approval: the not-found page.
    r = await api.client.post(target, headers=boss.headers, data=boss.form(decision="approve"))
    assert r.status_code == 404
    # A role change is in force on the person's next request, their session unchanged.
    ann = await person(api, admin, "ann@example.com", "approver")
    r = await api.client.post(target, headers=ann.headers, data=ann.form(decision="deny"))
    assert r.status_code == 404  # may decide: the approval is what is missing
    r = await api.client.patch(f"/v1/users/{ann.user_id}", headers=admin, json={"role": "viewer"})
    assert r.status_code == 200, r.text
    r = await api.client.post(target, headers=ann.headers, data=ann.form(decision="deny"))
    assert r.status_code == 403 and "approvals:decide" in r.text
    # Every page carries the console's headers: nothing from elsewhere, no framing.
    for path in ("/app", "/app/approvals", "/app/audit", "/app/sign-in?token=x"):
        r = await api.client.get(path, headers=boss.headers)
        assert r.headers["content-security-policy"].startswith("default-src 'none'"), path
        assert r.headers["x-frame-options"] == "DENY"
    # Without a session: the signed-out page, never a tenant's data.
    api.client.cookies.clear()
    r = await api.client.get("/app/approvals")
    assert r.status_code == 401 and "not signed in" in r.text
