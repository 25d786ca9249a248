"""An ID token is believed only when everything about it checks out (tenants/oidc.py): its
signature against the provider's key set (public-key algorithms only, the set read again
once for a key it lacks), its issuer, audience, expiry and nonce, a verified address. Here
the provider's answers are written by the test (keys made with joserfc), so each way a
provider can be wrong is tried; tests/integration/test_oidc_sign_in.py runs a real one."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
from joserfc import jwt
from joserfc.jwk import OctKey, RSAKey

from tenantry import http1
from tenantry.config import Settings
from tenantry.errors import ConfigurationError
from tenantry.tenants.oidc import Flow, OidcProvider, SignInFailed

ISSUER = "https://id.example"
CLIENT = "console"
REDIRECT = "https://tenantry.example/app/oidc/callback"


class Scripted(OidcProvider):
    """A provider whose HTTP answers are the test's: ``answers[url]`` (a JSON value, or
    ``(status, bytes)``); what it was asked is in ``asked``."""

    def __init__(self, answers: dict[str, Any], secret: str | None = "s3cret") -> None:
        super().__init__(ISSUER, CLIENT, secret)
        self.answers = answers
        self.asked: list[tuple[str, str, dict[str, str], bytes]] = []

    async def _request(self, method: str, url: str, what: str, *,
                       headers: list[tuple[str, str]], body: bytes = b"") -> http1.Response:
        self.asked.append((method, url, dict(headers), body))
        answer = self.answers[url]
        if isinstance(answer, tuple):
            return http1.Response(answer[0], "", {}, answer[1], 0.0)
        return http1.Response(200, "OK", {}, orjson.dumps(answer), 0.0)


def _discovery(**over: Any) -> dict[str, Any]:
    return {"issuer": ISSUER, "authorization_endpoint": f"{ISSUER}/authorize",
            "token_endpoint": f"{ISSUER}/token", "jwks_uri": f"{ISSUER}/jwks",
            "id_token_signing_alg_values_supported": ["RS256"], **over}


KEY = RSAKey.generate_key(2048, parameters={"kid": "k1"})


def _token(flow: Flow, key: Any = KEY, alg: str = "RS256", **claims: Any) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": CLIENT, "sub": "ada", "iat": now, "exp": now + 300,
            "nonce": flow.nonce, "email": "ada@acme.example", "email_verified": True}
    body.update(claims)
    header = {"alg": alg, "kid": key.kid} if key.kid else {"alg": alg}
    return jwt.encode(header, {k: v for k, v in body.items() if v is not None}, key,
                      algorithms=[alg])


def _provider(flow: Flow, id_token: str | None = None, *, token: Any = None,
              keys: Any = None, **discovery: Any) -> Scripted:
    answers: dict[str, Any] = {
        f"{ISSUER}/.well-known/openid-configuration": _discovery(**discovery),
        f"{ISSUER}/jwks": keys if keys is not None else {"keys": [KEY.as_dict(private=False)]},
        f"{ISSUER}/token": token if token is not None else {
            "access_token": "at", "token_type": "Bearer", "id_token": id_token}}
    return Scripted(answers)


async def _finish(provider: Scripted, flow: Flow, state: str | None = None) -> Any:
    await provider.authorization_url(flow, REDIRECT)
    return await provider.finish(flow, state=state or flow.state, code="the-code",
                                 redirect_uri=REDIRECT)


async def test_a_good_token_signs_in_and_the_code_goes_with_its_verifier() -> None:
    flow = Flow.start()
    provider = _provider(flow, _token(flow))
    url = await provider.authorization_url(flow, REDIRECT)
    assert url.startswith(f"{ISSUER}/authorize?") and f"nonce={flow.nonce}" in url
    identity = await _finish(provider, flow)
    assert (identity.issuer, identity.subject, identity.email) == (
        ISSUER, "ada", "ada@acme.example")
    method, _, headers, body = next(a for a in provider.asked if a[0] == "POST")
    assert method == "POST" and headers["Authorization"].startswith("Basic ")
    assert f"code_verifier={flow.verifier}".encode() in body
    assert b"client_secret" not in body  # the secret went in the Basic header only


@pytest.mark.parametrize(("claims", "why"), [
    ({"nonce": "another"}, "nonce"),
    ({"aud": "someone-else"}, "aud"),
    ({"iss": "https://evil.example"}, "iss"),
    ({"exp": int(time.time()) - 600}, "exp"),
])
async def test_a_token_for_another_flow_client_issuer_or_time_is_refused(
    claims: dict[str, Any], why: str,
) -> None:
    flow = Flow.start()
    with pytest.raises(SignInFailed, match=f"not valid here: .*{why}"):
        await _finish(_provider(flow, _token(flow, **claims)), flow)


async def test_a_token_signed_by_another_key_or_by_the_client_secret_is_refused() -> None:
    flow = Flow.start()
    stranger = RSAKey.generate_key(2048, parameters={"kid": "k1"})
    with pytest.raises(SignInFailed, match="does not verify"):
        await _finish(_provider(flow, _token(flow, stranger)), flow)
    # HS256 keyed by the client secret: a secret that leaked must not mint identities.
    secret = OctKey.import_key(b"s3cret" * 6, {"kid": "k1"})
    with pytest.raises(SignInFailed, match="does not verify"):
        await _finish(_provider(flow, _token(flow, secret, "HS256"),
                                id_token_signing_alg_values_supported=["RS256", "HS256"]),
                      flow)
    with pytest.raises(SignInFailed, match="none of the public-key algorithms"):
        await _finish(_provider(flow, _token(flow),
                                id_token_signing_alg_values_supported=["HS256", "none"]), flow)


async def test_a_rotated_key_is_fetched_once_more() -> None:
    flow = Flow.start()
    rotated = RSAKey.generate_key(2048, parameters={"kid": "k2"})
    provider = _provider(flow, _token(flow, rotated))
    await provider.authorization_url(flow, REDIRECT)
    await provider._key_set(await provider._meta())  # the old set, cached
    provider.answers[f"{ISSUER}/jwks"] = {"keys": [rotated.as_dict(private=False)]}
    assert (await _finish(provider, flow)).subject == "ada"
    assert [u for _, u, _, _ in provider.asked].count(f"{ISSUER}/jwks") == 2


async def test_an_address_unverified_or_unsaid_signs_nobody_in() -> None:
    flow = Flow.start()
    with pytest.raises(SignInFailed, match="not verified"):
        await _finish(_provider(flow, _token(flow, email_verified=False)), flow)
    with pytest.raises(SignInFailed, match="email address"):
        await _finish(_provider(flow, _token(flow, email=None)), flow)


@pytest.mark.parametrize(("change", "why"), [
    ({"discovery": {"issuer": "https://other.example"}}, "names another issuer"),
    ({"discovery": {"token_endpoint": "ftp://x"}}, "no usable token_endpoint"),
    ({"discovery": {"token_endpoint_auth_methods_supported": ["private_key_jwt"]}},
     "neither client_secret_basic"),
    ({"token": (200, b"<html>hello</html>")}, "HTTP 200 without a JSON object"),
    ({"token": (400, b'{"error": "invalid_grant"}')}, "refused the sign-in: invalid_grant"),
    ({"token": {"access_token": "at"}}, "has no ID token"),
    ({"keys": {"keys": "garbage"}}, "key set cannot be read"),
])
async def test_a_provider_that_answers_garbage_is_a_clear_refusal(
    change: dict[str, Any], why: str,
) -> None:
    flow = Flow.start()
    provider = _provider(flow, _token(flow), token=change.get("token"),
                         keys=change.get("keys"), **change.get("discovery", {}))
    with pytest.raises(SignInFailed, match=why):
        await _finish(provider, flow)


async def test_a_state_of_another_flow_is_refused_before_anything_is_asked() -> None:
    flow = Flow.start()
    provider = _provider(flow, _token(flow))
    with pytest.raises(SignInFailed, match="not started in this browser"):
        await provider.finish(flow, state=Flow.start().state, code="c", redirect_uri=REDIRECT)
    assert provider.asked == []


def test_a_flow_lives_in_its_cookie_and_nothing_else() -> None:
    flow = Flow.start("tenant-acme")
    again = Flow.from_cookie(flow.cookie)
    assert again is not None and (again.state, again.nonce, again.verifier, again.tenant) == (
        flow.state, flow.nonce, flow.verifier, "tenant-acme")
    assert len(flow.verifier) == 43 and len({flow.state, flow.nonce, flow.verifier}) == 3
    assert flow.secret not in repr(flow)
    for bad in (None, "", "short.", "x" * 43, "x" * 43 + "." + "t" * 201):
        assert Flow.from_cookie(bad) is None


@pytest.mark.parametrize(("env", "message"), [
    ({"TENANTRY_OIDC_ISSUER": "https://id.example"}, "needs TENANTRY_OIDC_CLIENT_ID"),
    ({"TENANTRY_OIDC_CLIENT_ID": "c"}, "need TENANTRY_OIDC_ISSUER"),
    ({"TENANTRY_OIDC_ISSUER": "http://id.example", "TENANTRY_OIDC_CLIENT_ID": "c"},
     "https:// issuer URL"),
    ({"TENANTRY_OIDC_ISSUER": "https://id.example/?x=1", "TENANTRY_OIDC_CLIENT_ID": "c"},
     "no query or fragment"),
    ({"TENANTRY_OIDC_ISSUER": "https://id.example:99999", "TENANTRY_OIDC_CLIENT_ID": "c"},
     "https:// issuer URL"),
])
def test_a_misconfigured_provider_stops_start_up_with_one_line(
    env: dict[str, str], message: str,
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Settings.from_env(env)


def test_a_loopback_provider_may_be_plain_http() -> None:
    settings = Settings.from_env({"TENANTRY_OIDC_ISSUER": "http://localhost:9000",
                                  "TENANTRY_OIDC_CLIENT_ID": "c",
                                  "TENANTRY_OIDC_CLIENT_SECRET": "hush"})
    assert settings.oidc_issuer == "http://localhost:9000" and "hush" not in repr(settings)
