"""Operators are people (ADR 0043 §8): the token's holder invites operators with a role
(``/admin/v1/operators``); each signs in to the operator console as themselves, by a
one-time link or by the OpenID Connect provider, and may do what their role allows —
read-only sees and changes nothing, support acts on runs, admin also on keys and sessions
— with the Actions page naming them. Disabling one ends their session at its next page."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import asyncpg
import httpx2

from tenantry.api.console import session
from tests.support.api import OPERATOR_TOKEN, Api, serving_api
from tests.support.console import logged_actions
from tests.support.oidc import Provider, flow_cookie

_CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')
FLOW = "tenantry_console_oidc"


async def _invite(api: Api, email: str, role: str) -> str:
    r = await api.client.post("/admin/v1/operators", headers=api.operator,
                              json={"email": email, "role": role})
    assert r.status_code == 201, r.text
    operator_id: str = r.json()["operator_id"]
    return operator_id


async def _link(api: Api, operator_id: str) -> str:
    r = await api.client.post(f"/admin/v1/operators/{operator_id}/sign-in-links",
                              headers=api.operator)
    assert r.status_code == 201, r.text
    url: str = r.json()["url"]
    return url


async def _use(api: Api, url: str) -> httpx2.Response:
    """Open the link, then press its button, as the browser does."""
    parts = urlsplit(url)
    api.client.cookies.clear()
    page = await api.client.get(f"{parts.path}?{parts.query}")
    assert page.status_code == 200, page.text
    nonce = page.cookies[session.LOGIN_COOKIE]
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert csrf is not None
    api.client.cookies.clear()
    token = parts.query.removeprefix("token=")
    return await api.client.post("/console/sign-in",
                                 headers={"Cookie": f"{session.LOGIN_COOKIE}={nonce}"},
                                 data={"csrf": csrf.group(1), "token": token})


def _headers(cookie: str) -> dict[str, str]:
    return {"Cookie": f"{session.SESSION_COOKIE}={cookie}"}


async def _csrf(api: Api, headers: dict[str, str]) -> str:
    page = await api.client.get("/console/runs", headers=headers)
    assert page.status_code == 200, page.text
    found = _CSRF.search(page.text)
    assert found is not None
    return found.group(1)


async def test_an_operator_signs_in_with_a_link_and_may_what_their_role_allows(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    tenant, h = await api.tenant()
    run_id = await api.start(h, await api.agent(h), "hello")  # no worker: it stays queued
    ann = await _invite(api, "ann@ops.example", "read-only")
    url = await _link(api, ann)
    assert url.startswith(f"{api.base_url}/console/sign-in?token=osl_")
    r = await _use(api, url)
    assert r.status_code == 303 and r.headers["location"] == "/console/runs"
    cookie = r.cookies[session.SESSION_COOKIE]
    page = await api.client.get("/console/runs", headers=_headers(cookie))
    assert "ann@ops.example · read-only" in page.text
    assert "Sign out everywhere" not in page.text  # an admin's button
    run_page = await api.client.get(f"/console/runs/{tenant}/{run_id}",
                                    headers=_headers(cookie))
    assert run_page.status_code == 200 and "cancel-run" not in run_page.text

    csrf = await _csrf(api, _headers(cookie))
    cancel = f"/console/runs/{tenant}/{run_id}/cancel"
    r = await api.client.post(cancel, headers=_headers(cookie), data={"csrf": csrf})
    assert r.status_code == 403 and "Your role (read-only) may not do this" in r.text
    assert await admin_conn.fetchval("SELECT status FROM runs") == "queued"

    # Support, from the next page on, in the same session.
    r = await api.client.patch(f"/admin/v1/operators/{ann}", headers=api.operator,
                               json={"role": "support"})
    assert r.status_code == 200 and r.json()["role"] == "support"
    run_page = await api.client.get(f"/console/runs/{tenant}/{run_id}",
                                    headers=_headers(cookie))
    assert "cancel-run" in run_page.text
    r = await api.client.post(cancel, headers=_headers(cookie), data={"csrf": csrf})
    assert r.status_code == 303
    assert (await logged_actions(admin_conn))[-1][:2] == ("operator ann@ops.example",
                                                          "cancel_run")
    # Revoking keys and ending every session stay an admin's.
    r = await api.client.post("/console/logout/everywhere", headers=_headers(cookie),
                              data={"csrf": csrf})
    assert r.status_code == 403

    # Disabled: the session ends at its next request.
    r = await api.client.delete(f"/admin/v1/operators/{ann}", headers=api.operator)
    assert r.status_code == 200 and r.json()["disabled_at"] is not None
    r = await api.client.get("/console/runs", headers=_headers(cookie))
    assert r.status_code == 303 and r.headers["location"].startswith("/console/login")


async def test_a_link_signs_in_once_and_a_disabled_operators_link_not_at_all(
    api: Api,
) -> None:
    bob = await _invite(api, "bob@ops.example", "admin")
    url = await _link(api, bob)
    assert (await _use(api, url)).status_code == 303
    replay = await _use(api, url)
    assert replay.status_code == 410 and session.SESSION_COOKIE not in replay.cookies
    forged = await _use(api, url.replace("token=osl_", "token=osl_x"))
    assert forged.status_code == 410
    unused = await _link(api, bob)
    await api.client.delete(f"/admin/v1/operators/{bob}", headers=api.operator)
    assert (await _use(api, unused)).status_code == 410
    r = await api.client.post(f"/admin/v1/operators/{bob}/sign-in-links",
                              headers=api.operator)
    assert r.status_code == 404


async def test_the_operators_api_refuses_bad_input_and_stores_nothing(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    for body in ({"email": "not-an-address", "role": "admin"},
                 {"email": "c@ops.example", "role": "root"},
                 {"email": "c\u0000@ops.example", "role": "admin"},
                 {"email": "c@ops.example"}):
        r = await api.client.post("/admin/v1/operators", headers=api.operator, json=body)
        assert r.status_code == 400, (body, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
    assert await admin_conn.fetchval("SELECT count(*) FROM operator_users") == 0
    await _invite(api, "Dee@ops.example", "support")
    r = await api.client.post("/admin/v1/operators", headers=api.operator,
                              json={"email": "dee@OPS.example", "role": "admin"})
    assert r.status_code == 409
    for path in ("/admin/v1/operators/opr_" + "0" * 32, "/admin/v1/operators/nope"):
        assert (await api.client.get(path, headers=api.operator)).status_code == 404
    r = await api.client.get("/admin/v1/operators", headers={"Authorization": "Bearer x"})
    assert r.status_code == 401
    listed = (await api.client.get("/admin/v1/operators", headers=api.operator)).json()
    assert [o["email"] for o in listed["data"]] == ["Dee@ops.example"]


async def test_an_operator_signs_in_with_the_identity_provider(
    oidc_api: Api, oidc: Provider,
) -> None:
    api = oidc_api
    await _invite(api, "eve@ops.example", "support")
    login = await api.client.get("/console/login")
    assert 'href="/console/oidc/start">Sign in with localhost' in login.text

    async def sign_in(subject: str) -> httpx2.Response:
        api.client.cookies.clear()
        r = await api.client.get("/console/oidc/start")
        assert r.status_code == 303, r.text
        flow = flow_cookie(r.headers["set-cookie"], FLOW)
        back = urlsplit(oidc.authorize(r.headers["location"], subject))
        api.client.cookies.clear()
        return await api.client.get(f"{back.path}?{back.query}",
                                    headers={"Cookie": f"{FLOW}={flow}"})

    oidc.person("eve-1", email="eve@ops.example", email_verified=True)
    r = await sign_in("eve-1")
    assert r.status_code == 200 and 'content="0; url=/console/runs"' in r.text
    page = await api.client.get("/console/runs",
                                headers=_headers(r.cookies[session.SESSION_COOKIE]))
    assert "eve@ops.example · support" in page.text
    # Another subject with the address, and someone who is no operator, sign nobody in.
    oidc.person("eve-2", email="eve@ops.example", email_verified=True)
    oidc.person("mallory", email="mallory@ops.example", email_verified=True)
    for subject in ("eve-2", "mallory"):
        r = await sign_in(subject)
        assert r.status_code == 403 and session.SESSION_COOKIE not in r.cookies


async def test_the_operator_token_rotates_live_with_an_overlap(
    database_dsn: str, admin_conn: asyncpg.Connection,
) -> None:
    """Two API processes on one database: a rotation in one is in force in both at once;
    the old token works through the overlap and then nowhere; a process started again with
    the retired token refuses it, and one configured with a token never seen makes it the
    only one (as changing the configuration always did)."""
    async with serving_api(database_dsn) as a, serving_api(database_dsn) as b:
        old = a.operator
        r = await a.client.post("/admin/v1/operator-token/rotate", headers=old,
                                json={"overlap_seconds": 3600})
        assert r.status_code == 201, r.text
        new = {"Authorization": f"Bearer {r.json()['operator_token']}"}
        for api in (a, b):
            for headers in (old, new):  # both, during the overlap
                assert (await api.client.get("/admin/v1/operators",
                                             headers=headers)).status_code == 200
        # The overlap ends (moved to now, as an hour passing would).
        await admin_conn.execute("UPDATE operator_tokens SET expires_at = now() "
                                 "WHERE expires_at IS NOT NULL")
        for api in (a, b):
            api.platform.operator_tokens.forget()  # as CACHE_SECONDS passing would
            assert (await api.client.get("/admin/v1/operators",
                                         headers=old)).status_code == 401
            assert (await api.client.get("/admin/v1/operators",
                                         headers=new)).status_code == 200
        login = await a.client.get("/console/login")
        nonce = login.cookies[session.LOGIN_COOKIE]
        a.client.cookies.clear()
        r = await a.client.post("/console/login", headers={
            "Cookie": f"{session.LOGIN_COOKIE}={nonce}"}, data={
            "csrf": _CSRF.search(login.text).group(1),  # type: ignore[union-attr]
            "token": OPERATOR_TOKEN})
        assert r.status_code == 401
        for bad in ({"overlap_seconds": 604801}, {"overlap_seconds": -1},
                    {"overlap_seconds": "soon"}, {"overlap": 60}):
            r = await a.client.post("/admin/v1/operator-token/rotate", headers=new, json=bad)
            assert r.status_code == 400, (bad, r.text)
        assert await admin_conn.fetchval("SELECT count(*) FROM operator_tokens") == 2
    # Started again with the retired token: it stays retired.
    async with serving_api(database_dsn) as again:
        assert (await again.client.get("/admin/v1/operators",
                                       headers=again.operator)).status_code == 401
        assert (await again.client.get("/admin/v1/operators",
                                       headers=new)).status_code == 200
    # A token the database never saw, configured: the only one from now on.
    async with serving_api(database_dsn, operator_token="op_chosen_anew") as chosen:
        fresh = {"Authorization": "Bearer op_chosen_anew"}
        assert (await chosen.client.get("/admin/v1/operators",
                                        headers=fresh)).status_code == 200
        chosen.platform.operator_tokens.forget()
        assert (await chosen.client.get("/admin/v1/operators",
                                        headers=new)).status_code == 401
