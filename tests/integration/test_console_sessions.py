"""Operator console sessions can be revoked, and the cookie's Secure flag can be forced.

A console cookie copied out of a browser (a shared machine, a proxy log, a backup) used to
stay good until it expired, eight hours, unless the operator token itself was rotated. Now
revoking sessions (the admin API, or the console's "sign out everywhere") moves the session
epoch on and every cookie issued before is refused, with the operator token unchanged.
Behind a TLS-terminating proxy that uvicorn does not trust, every request looks like plain
http and the cookie went out without Secure; TENANTRY_CONSOLE_SECURE_COOKIE=true forces it."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx2
import pytest

from tenantry.api.console import session
from tests.support.api import OPERATOR_TOKEN, Api, serving_api


async def _log_in(api: Api) -> str:
    """The console's login as a browser does it: the form, its double-submit cookie, the
    operator token. The session cookie it sets."""
    async with httpx2.AsyncClient(base_url=api.base_url, timeout=10) as browser:
        form = await browser.get("/console/login")
        found = re.search(r'name="csrf" value="([0-9a-f]+)"', form.text)
        assert found, form.text
        r = await browser.post("/console/login", data={"csrf": found[1],
                                                        "token": OPERATOR_TOKEN})
        assert r.status_code == 303, r.text
        cookie = r.cookies.get(session.SESSION_COOKIE)
        assert cookie
        return cookie


async def _runs_page(api: Api, cookie: str) -> httpx2.Response:
    return await api.client.get("/console/runs",
                                headers={"Cookie": f"{session.SESSION_COOKIE}={cookie}"})


async def _csrf(api: Api, cookie: str) -> str:
    page = await _runs_page(api, cookie)
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert found, page.text
    return found[1]


async def _is_refused(api: Api, cookie: str) -> bool:
    page = await _runs_page(api, cookie)
    return page.status_code == 303 and page.headers["location"].startswith("/console/login")


async def test_a_cookie_issued_before_revocation_is_refused_after_it(api: Api) -> None:
    cookie = await _log_in(api)
    assert (await _runs_page(api, cookie)).status_code == 200
    tenant, h = await api.tenant()
    run = await api.start(h, await api.agent(h), "x")

    r = await api.client.post("/admin/v1/sessions/revoke", headers=api.operator)
    assert r.status_code == 200, r.text
    assert r.json()["epoch"] >= 2

    # The same cookie, the same operator token: every page and the event stream refuse it.
    assert await _is_refused(api, cookie)
    stream = await api.client.get(f"/console/runs/{tenant}/{run}/events",
                                  headers={"Cookie": f"{session.SESSION_COOKIE}={cookie}"})
    assert stream.status_code == 401
    # Logging in again starts a session in the new epoch.
    again = await _log_in(api)
    assert (await _runs_page(api, again)).status_code == 200
    assert await _is_refused(api, cookie)


async def test_revoking_needs_the_operator_token(api: Api) -> None:
    cookie = await _log_in(api)
    _, h = await api.tenant()
    for headers in ({}, h, {"Cookie": f"{session.SESSION_COOKIE}={cookie}"}):
        r = await api.client.post("/admin/v1/sessions/revoke", headers=headers)
        assert r.status_code == 401, headers
    assert (await _runs_page(api, cookie)).status_code == 200


async def test_sign_out_everywhere_ends_every_browsers_session(api: Api) -> None:
    mine, other_browser = await _log_in(api), await _log_in(api)
    refused = await api.client.post(
        "/console/logout/everywhere", data={"csrf": "forged"},
        headers={"Cookie": f"{session.SESSION_COOKIE}={mine}"})
    assert refused.status_code == 403  # a cross-site form cannot sign everyone out
    assert (await _runs_page(api, other_browser)).status_code == 200

    r = await api.client.post(
        "/console/logout/everywhere", data={"csrf": await _csrf(api, mine)},
        headers={"Cookie": f"{session.SESSION_COOKIE}={mine}"})
    assert r.status_code == 303 and r.headers["location"] == "/console/login"
    assert await _is_refused(api, mine)
    assert await _is_refused(api, other_browser)


async def test_a_plain_logout_still_leaves_other_sessions(api: Api) -> None:
    mine, other_browser = await _log_in(api), await _log_in(api)
    r = await api.client.post("/console/logout", data={"csrf": await _csrf(api, mine)},
                              headers={"Cookie": f"{session.SESSION_COOKIE}={mine}"})
    assert r.status_code == 303
    assert (await _runs_page(api, other_browser)).status_code == 200


@pytest.fixture(params=["true", "false", "auto"])
async def secure_setting(request: pytest.FixtureRequest,
                         database_dsn: str) -> AsyncIterator[tuple[str, Api]]:
    async with serving_api(database_dsn, console_secure_cookie=request.param) as api:
        yield request.param, api


def _secure(set_cookie: list[str], name: str) -> bool:
    (line,) = [c for c in set_cookie if c.startswith(f"{name}=")]
    return "secure" in [part.strip().lower() for part in line.split(";")]


async def test_the_secure_flag_can_be_forced_on_plain_http(
        secure_setting: tuple[str, Api]) -> None:
    setting, api = secure_setting
    # Plain http on loopback, as a TLS-terminating proxy uvicorn does not trust forwards it.
    async with httpx2.AsyncClient(base_url=api.base_url, timeout=10) as browser:
        form = await browser.get("/console/login")
        expected = setting == "true"  # auto: only over https, and this is http
        assert _secure(form.headers.get_list("set-cookie"), session.LOGIN_COOKIE) is expected
        found = re.search(r'name="csrf" value="([0-9a-f]+)"', form.text)
        assert found
        # Sent by hand: a cookie jar rightly keeps a Secure cookie off plain http.
        login_cookie = form.cookies.get(session.LOGIN_COOKIE)
        r = await browser.post("/console/login", data={"csrf": found[1],
                                                        "token": OPERATOR_TOKEN},
                               headers={"Cookie": f"{session.LOGIN_COOKIE}={login_cookie}"})
        assert r.status_code == 303, r.text
        assert _secure(r.headers.get_list("set-cookie"), session.SESSION_COOKIE) is expected
