"""A real OpenID Connect provider for the sign-in tests: ``oidc-provider-mock`` (built on
Authlib and Flask), served on a loopback port in a thread. Its authorization page is a form
that asks which subject signs in; the claims of each subject are set beforehand through its
``PUT /users/{sub}``. It signs ID tokens with RS256 and requires the nonce."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

import httpx2

CLIENT_ID = "tenantry-console"
CLIENT_SECRET = "s3cret-of-the-console"
FLOW_COOKIE = "tenantry_app_oidc"


@dataclass(frozen=True, slots=True)
class Provider:
    issuer: str

    def person(self, subject: str, **claims: object) -> None:
        """The claims the provider puts in ``subject``'s ID token."""
        r = httpx2.put(f"{self.issuer}/users/{subject}", json=claims, timeout=10)
        assert r.status_code == 204, r.text

    def settings(self) -> dict[str, str]:
        """What the platform under test is configured with (serving_api's overrides)."""
        return {"oidc_issuer": self.issuer, "oidc_client_id": CLIENT_ID,
                "oidc_client_secret": CLIENT_SECRET}

    def authorize(self, authorization_url: str, subject: str) -> str:
        """Sign ``subject`` in on the provider's form, as the person would: the callback
        URL (with code and state) the provider sends the browser back to."""
        r = httpx2.post(authorization_url, data={"sub": subject}, timeout=10)
        assert r.status_code == 302, r.text
        location: str = r.headers["location"]
        assert "code" in parse_qs(urlsplit(location).query), location
        return location


@contextmanager
def oidc_provider() -> Iterator[Provider]:
    # Imported here, inside a test: its 0.3 uses Authlib APIs that 1.9 deprecates, and
    # pyproject.toml's filterwarnings lets those two pass only while tests run (the
    # platform itself uses joserfc).
    from oidc_provider_mock import run_server_in_thread

    with run_server_in_thread(require_nonce=True) as server:
        yield Provider(f"http://localhost:{server.server_port}")


def flow_cookie(set_cookie: str, name: str = FLOW_COOKIE) -> str:
    """The flow cookie's value in a Set-Cookie header (the tenant console's by default)."""
    found = re.search(rf"{name}=([^;]*)", set_cookie)
    assert found is not None, set_cookie
    return found.group(1)


def claims(email: str, **more: object) -> Mapping[str, object]:
    return {"email": email, "email_verified": True, **more}
