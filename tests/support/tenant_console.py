"""A tenant's people in the tenant console, for tests that drive it over HTTP: invite one,
make their sign-in link, use it as the browser's form does, and post the console's forms
with their session cookie and CSRF token."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

import httpx2

from tests.support.api import Api

SESSION_COOKIE = "tenantry_app"
SIGN_IN_COOKIE = "tenantry_app_sign_in"
_CSRF = re.compile(r'name="csrf" value="([^"]*)"')


@dataclass(frozen=True, slots=True)
class Person:
    user_id: str
    session: str  # the cookie's value
    csrf: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Cookie": f"{SESSION_COOKIE}={self.session}"}

    def form(self, **fields: str) -> dict[str, str]:
        """A form as the console's page posts it: the fields and this session's token."""
        return {"csrf": self.csrf, **fields}


def csrf_in(html: str) -> str:
    found = _CSRF.search(html)
    assert found is not None, "no CSRF token on the page"
    return found.group(1)


async def invite(api: Api, headers: dict[str, str], email: str, role: str) -> str:
    r = await api.client.post("/v1/users", headers=headers, json={"email": email, "role": role})
    assert r.status_code == 201, r.text
    user_id: str = r.json()["user_id"]
    return user_id


async def link(api: Api, headers: dict[str, str], user_id: str) -> str:
    r = await api.client.post(f"/v1/users/{user_id}/sign-in-links", headers=headers)
    assert r.status_code == 201, r.text
    url: str = r.json()["url"]
    return url


def token_of(url: str) -> str:
    return parse_qs(urlsplit(url).query)["token"][0]


async def use_link(client: httpx2.AsyncClient, url: str) -> httpx2.Response:
    """Open the link (the confirm page), then press its button: the POST's answer."""
    parts = urlsplit(url)
    page = await client.get(f"{parts.path}?{parts.query}")
    assert page.status_code == 200, page.text
    nonce = page.cookies[SIGN_IN_COOKIE]
    client.cookies.clear()  # every cookie is sent by hand: one client, several people
    return await client.post("/app/sign-in", headers={"Cookie": f"{SIGN_IN_COOKIE}={nonce}"},
                             data={"csrf": csrf_in(page.text), "token": token_of(url)})


async def signed_in(api: Api, user_id: str, url: str) -> Person:
    r = await use_link(api.client, url)
    assert r.status_code == 303 and r.headers["location"] == "/app", r.text
    session = r.cookies[SESSION_COOKIE]
    api.client.cookies.clear()
    home = await api.client.get("/app", headers={"Cookie": f"{SESSION_COOKIE}={session}"})
    assert home.status_code == 200, home.text
    return Person(user_id, session, csrf_in(home.text))


async def person(api: Api, headers: dict[str, str], email: str, role: str) -> Person:
    """A new user of the tenant whose key ``headers`` carry, signed in by their link."""
    user_id = await invite(api, headers, email, role)
    return await signed_in(api, user_id, await link(api, headers, user_id))
