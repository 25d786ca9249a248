"""Signing in to the tenant console by OpenID Connect, against a real provider
(oidc-provider-mock, built on Authlib) on a loopback port: a tenant's invited person signs
in with their verified address, once bound to the provider's subject; someone else with the
same address, an unverified address, an unknown one, a replayed callback and a provider
that answers garbage sign nobody in and store nothing."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import asyncpg
import httpx2

from tests.support.api import Api, serving_api
from tests.support.oidc import CLIENT_ID, FLOW_COOKIE, Provider, flow_cookie
from tests.support.tenant_console import SESSION_COOKIE, invite
from tests.support.worker import Fakes


async def _start(api: Api, query: str = "") -> tuple[str, str]:
    """Press "Sign in with …": the provider's authorization URL and the flow's cookie."""
    api.client.cookies.clear()
    r = await api.client.get(f"/app/oidc/start{query}")
    assert r.status_code == 303, r.text
    return r.headers["location"], flow_cookie(r.headers["set-cookie"])


async def _back(api: Api, callback: str, flow: str | None) -> httpx2.Response:
    """The browser comes back from the provider (with the flow's cookie, if it has it)."""
    parts = urlsplit(callback)
    api.client.cookies.clear()
    headers = {"Cookie": f"{FLOW_COOKIE}={flow}"} if flow else {}
    return await api.client.get(f"{parts.path}?{parts.query}", headers=headers)


async def _sign_in(api: Api, oidc: Provider, subject: str,
                   query: str = "") -> httpx2.Response:
    url, flow = await _start(api, query)
    return await _back(api, oidc.authorize(url, subject), flow)


async def _sessions(admin: asyncpg.Connection) -> int:
    count: int = await admin.fetchval("SELECT count(*) FROM app_sessions")
    return count


async def test_an_invited_person_signs_in_and_is_bound_to_their_subject(
    oidc_api: Api, oidc: Provider, admin_conn: asyncpg.Connection,
) -> None:
    tenant, admin = await oidc_api.tenant()
    user_id = await invite(oidc_api, admin, "Ada@Acme.example", "approver")
    # The signed-out page offers the oidc, by its host.
    page = await oidc_api.client.get("/app")
    assert page.status_code == 401 and 'href="/app/oidc/start">Sign in with localhost' in page.text

    url, flow = await _start(oidc_api)
    query = parse_qs(urlsplit(url).query)
    assert (query["client_id"], query["code_challenge_method"], query["scope"]) == (
        [CLIENT_ID], ["S256"], ["openid email"])
    assert query["redirect_uri"] == [f"{oidc_api.base_url}/app/oidc/callback"]
    oidc.person("ada-1", email="ada@acme.example", email_verified=True)
    r = await _back(oidc_api, oidc.authorize(url, "ada-1"), flow)
    assert r.status_code == 200, r.text
    # A page that moves on to /app itself (a strict cookie would not follow a redirect that
    # started on the provider's site), the flow's cookie gone.
    assert '<meta http-equiv="refresh" content="0; url=/app">' in r.text
    session = r.cookies[SESSION_COOKIE]
    assert any(c.startswith(f'{FLOW_COOKIE}=""') for c in r.headers.get_list("set-cookie"))
    home = await oidc_api.client.get("/app", headers={"Cookie": f"{SESSION_COOKIE}={session}"})
    assert home.status_code == 200 and "Ada@Acme.example · approver" in home.text
    row = await admin_conn.fetchrow(
        "SELECT tenant_id, oidc_issuer, oidc_subject FROM tenant_users WHERE user_id = $1",
        user_id.removeprefix("usr_"))
    assert row is not None and tuple(row) == (tenant, oidc.issuer, "ada-1")

    # Another subject the provider gives the same address later signs nobody in.
    oidc.person("ada-2", email="ada@acme.example", email_verified=True)
    before = await _sessions(admin_conn)
    r = await _sign_in(oidc_api, oidc, "ada-2")
    assert r.status_code == 403 and "another identity" in r.text
    assert SESSION_COOKIE not in r.cookies and await _sessions(admin_conn) == before
    # The bound subject signs in again.
    assert (await _sign_in(oidc_api, oidc, "ada-1")).status_code == 200


async def test_a_callback_replayed_or_from_another_browser_signs_nobody_in(
    oidc_api: Api, oidc: Provider, admin_conn: asyncpg.Connection,
) -> None:
    _, admin = await oidc_api.tenant()
    await invite(oidc_api, admin, "bob@acme.example", "viewer")
    oidc.person("bob", email="bob@acme.example", email_verified=True)
    url, flow = await _start(oidc_api)
    callback = oidc.authorize(url, "bob")
    # Without the flow's cookie (another browser, or the cookie already spent).
    r = await _back(oidc_api, callback, None)
    assert r.status_code == 400 and "not started in this browser" in r.text
    # With another flow's cookie: its state is not this one.
    _, other = await _start(oidc_api)
    r = await _back(oidc_api, callback, other)
    assert r.status_code == 400 and "not started in this browser" in r.text
    assert await _sessions(admin_conn) == 0
    # The real one signs in, once: the code is spent at the oidc.
    assert (await _back(oidc_api, callback, flow)).status_code == 200
    r = await _back(oidc_api, callback, flow)
    assert r.status_code == 400 and "refused the sign-in: invalid_grant" in r.text
    assert await _sessions(admin_conn) == 1
    # The provider's own refusal comes back as an error, not a code.
    r = await _back(oidc_api, "/app/oidc/callback?error=access_denied&state=x", flow)
    assert r.status_code == 400 and "did not sign you in (access_denied)" in r.text


async def test_unknown_unverified_and_disabled_addresses_sign_nobody_in(
    oidc_api: Api, oidc: Provider, admin_conn: asyncpg.Connection,
) -> None:
    _, admin = await oidc_api.tenant()
    carl = await invite(oidc_api, admin, "carl@acme.example", "viewer")
    await invite(oidc_api, admin, "dora@acme.example", "viewer")
    oidc.person("eve", email="eve@elsewhere.example", email_verified=True)
    r = await _sign_in(oidc_api, oidc, "eve")
    assert r.status_code == 403 and "No tenant has a user eve@elsewhere.example" in r.text
    oidc.person("dora", email="dora@acme.example", email_verified=False)
    r = await _sign_in(oidc_api, oidc, "dora")
    assert r.status_code == 400 and "not verified" in r.text
    oidc.person("nomail")  # a provider that does not say the address
    r = await _sign_in(oidc_api, oidc, "nomail")
    assert r.status_code == 400 and "email address" in r.text
    r = await oidc_api.client.delete(f"/v1/users/{carl}", headers=admin)
    assert r.status_code == 200, r.text
    oidc.person("carl", email="carl@acme.example", email_verified=True)
    assert (await _sign_in(oidc_api, oidc, "carl")).status_code == 403
    assert await _sessions(admin_conn) == 0
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM tenant_users WHERE oidc_subject IS NOT NULL") == 0


async def test_a_person_of_two_tenants_chooses_one(
    oidc_api: Api, oidc: Provider,
) -> None:
    acme, acme_admin = await oidc_api.tenant("Acme")
    globex, globex_admin = await oidc_api.tenant("Globex")
    await invite(oidc_api, acme_admin, "fay@consult.example", "viewer")
    await invite(oidc_api, globex_admin, "fay@consult.example", "admin")
    oidc.person("fay", email="fay@consult.example", email_verified=True)
    r = await _sign_in(oidc_api, oidc, "fay")
    assert r.status_code == 200 and SESSION_COOKIE not in r.cookies
    assert f'href="/app/oidc/start?tenant={globex}"' in r.text
    assert f'href="/app/oidc/start?tenant={acme}"' in r.text
    r = await _sign_in(oidc_api, oidc, "fay", f"?tenant={globex}")
    home = await oidc_api.client.get(
        "/app", headers={"Cookie": f"{SESSION_COOKIE}={r.cookies[SESSION_COOKIE]}"})
    assert "fay@consult.example · admin" in home.text
    r = await oidc_api.client.get("/app/oidc/start?tenant=not%20a%20tenant")
    assert r.status_code == 400


async def test_a_provider_that_answers_garbage_is_a_clear_refusal(
    database_dsn: str, fakes: Fakes,
) -> None:
    """The fake model server is no identity provider: its discovery document is a 404."""
    issuer = fakes.model.base_url.rstrip("/")
    async with serving_api(database_dsn, oidc_issuer=issuer,
                           oidc_client_id="x") as served:
        r = await served.client.get("/app/oidc/start")
        assert r.status_code == 400
        assert "discovery document" in r.text and "answered HTTP 404" in r.text


async def test_without_a_provider_there_is_no_oidc_sign_in(api: Api) -> None:
    page = await api.client.get("/app")
    assert page.status_code == 401 and "/app/oidc/start" not in page.text
    assert (await api.client.get("/app/oidc/start")).status_code == 404
    assert (await api.client.get("/app/oidc/callback?code=x&state=y")).status_code == 404
