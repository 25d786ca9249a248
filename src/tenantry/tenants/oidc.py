"""Signing people in by OpenID Connect (ADR 0043 §5): the authorization code flow with PKCE
(S256), ``state`` and ``nonce``, against the one provider the operator configures
(``TENANTRY_OIDC_ISSUER``, ``_CLIENT_ID``, ``_CLIENT_SECRET``).

Nothing of a flow is kept on the server: the browser holds a random secret in a cookie for
the flow's few minutes, and the state, the nonce and the PKCE verifier are each derived from
it, so a callback is accepted only in the browser that started it, once (the cookie is
deleted by the answer), and an authorization code stolen on the way is worth nothing
without the verifier.

The provider's discovery document is read once an hour and must name the configured issuer
(OpenID Connect Discovery §4.3). An ID token's signature is checked by joserfc against the
provider's JWKS — asymmetric algorithms only, fetched again once when the token names a
key the set lacks (the provider rotated) — and its claims by Authlib's rules for a code
flow's ID token: issuer, audience, expiry, issued-at, nonce, ``azp``, ``at_hash``. A person
is their verified address: an ID token without ``email``, or with ``email_verified: false``,
signs nobody in. Anything else a provider answers is :class:`SignInFailed`, one line that
says what, and nothing is stored."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import orjson
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from authlib.oidc.core import CodeIDToken
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet

from tenantry import http1
from tenantry.errors import TenantryError

#: A discovery document, a JWKS or a token answer larger than this is no honest provider's.
MAX_DOCUMENT_BYTES = 256 * 1024
FETCH_TIMEOUT_S = 10.0
METADATA_TTL_S = 3600.0
#: Seconds of clock difference allowed between the provider and this host.
LEEWAY_S = 120
#: How long a started sign-in may take at the provider (the flow cookie's life).
FLOW_SECONDS = 10 * 60
#: Signatures an ID token may carry: public-key ones. ``none`` never; HMAC ones (keyed by
#: the client secret) are not offered, so a leaked secret cannot mint identities.
ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
              "ES512", "EdDSA")
_AUTH_METHODS = ("client_secret_basic", "client_secret_post")
_MAX_PARAM = 2048  # a callback's code or state longer than this is no provider's


class SignInFailed(TenantryError):
    """The identity provider's answer could not sign anyone in: it refused, it answered
    something unreadable, or its ID token did not check out. Nothing was stored."""

    type = "sign_in_failed"
    status = 400
    title = "Sign-in failed"

    @property
    def sentence(self) -> str:
        """The reason as a page shows it: a capital, a full stop."""
        text = str(self)
        return f"{text[:1].upper()}{text[1:]}."


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the provider says signed in: the issuer's subject, and their verified address."""

    issuer: str
    subject: str
    email: str


@dataclass(frozen=True, slots=True, repr=False)
class Flow:
    """One sign-in under way, carried by its cookie: a random secret, and the tenant the
    person asked for (``None``: whichever of their tenants the address finds)."""

    secret: str
    tenant: str | None = None

    def __repr__(self) -> str:  # never the secret in a log line
        return f"Flow(tenant={self.tenant!r})"

    @classmethod
    def start(cls, tenant: str | None = None) -> Flow:
        return cls(secrets.token_urlsafe(32), tenant)

    @property
    def cookie(self) -> str:
        return f"{self.secret}.{self.tenant or ''}"

    @classmethod
    def from_cookie(cls, value: str | None) -> Flow | None:
        secret, dot, tenant = (value or "").partition(".")
        if not dot or len(secret) != 43 or len(tenant) > 200:
            return None
        return cls(secret, tenant or None)

    def _derived(self, label: str) -> str:
        digest = hmac.new(self.secret.encode(), label.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    @property
    def state(self) -> str:
        return self._derived("state")

    @property
    def nonce(self) -> str:
        return self._derived("nonce")

    @property
    def verifier(self) -> str:  # 43 characters of base64url, as RFC 7636 asks
        return self._derived("pkce")


@dataclass(frozen=True, slots=True)
class _Metadata:
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    algorithms: tuple[str, ...]
    auth_method: str


class OidcProvider:
    """The operator's provider: its metadata and keys, cached; a sign-in's two legs."""

    def __init__(self, issuer: str, client_id: str, client_secret: str | None) -> None:
        self.issuer = issuer.rstrip("/")
        self.client_id = client_id
        self._secret = client_secret
        self._metadata: _Metadata | None = None
        self._read_at = 0.0
        self._keys: KeySet | None = None

    def __repr__(self) -> str:
        return f"OidcProvider({self.issuer!r}, {self.client_id!r})"

    @property
    def name(self) -> str:
        """How the sign-in page names it: its host."""
        return urlsplit(self.issuer).hostname or self.issuer

    async def authorization_url(self, flow: Flow, redirect_uri: str) -> str:
        meta = await self._meta()
        query = urlencode({
            "response_type": "code", "client_id": self.client_id, "scope": "openid email",
            "redirect_uri": redirect_uri, "state": flow.state, "nonce": flow.nonce,
            "code_challenge": create_s256_code_challenge(flow.verifier),
            "code_challenge_method": "S256"})
        base = meta.authorization_endpoint
        return f"{base}{'&' if urlsplit(base).query else '?'}{query}"

    async def finish(self, flow: Flow, *, state: str, code: str,
                     redirect_uri: str) -> Identity:
        """The callback's leg: ``state`` must be this flow's; the code is exchanged (with
        the PKCE verifier) and the ID token checked. The person it names, or
        :class:`SignInFailed`."""
        if not hmac.compare_digest(state.encode(), flow.state.encode()):
            raise SignInFailed("this sign-in was not started in this browser, or was "
                               "finished already: start it again")
        meta = await self._meta()
        tokens = await self._exchange(meta, code, flow.verifier, redirect_uri)
        id_token = tokens.get("id_token")
        if not isinstance(id_token, str) or len(id_token) > MAX_DOCUMENT_BYTES:
            raise SignInFailed("the identity provider's token answer has no ID token")
        claims, header = await self._verified(meta, id_token)
        access = tokens.get("access_token")
        checked = CodeIDToken(
            claims, header,
            {"iss": {"essential": True, "value": self.issuer},
             "aud": {"essential": True, "value": self.client_id}},
            {"nonce": flow.nonce, "client_id": self.client_id,
             "access_token": access if isinstance(access, str) else None})
        try:
            checked.validate(now=int(time.time()), leeway=LEEWAY_S)
        except JoseError as exc:
            raise SignInFailed(f"the identity provider's ID token is not valid here: "
                               f"{exc.error} ({str(exc.description or '')[:200]})") from None
        return _identity(self.issuer, claims)

    # ------------------------------------------------------------------ the provider

    async def _meta(self) -> _Metadata:
        if self._metadata is None or time.monotonic() - self._read_at > METADATA_TTL_S:
            document = await self._get(f"{self.issuer}/.well-known/openid-configuration",
                                       "discovery document")
            self._metadata = _metadata(self.issuer, document, has_secret=bool(self._secret))
            self._read_at = time.monotonic()
            self._keys = None
        return self._metadata

    async def _key_set(self, meta: _Metadata, *, again: bool = False) -> KeySet:
        if self._keys is None or again:
            document = await self._get(meta.jwks_uri, "key set (JWKS)")
            try:
                self._keys = KeySet.import_key_set(document)  # type: ignore[arg-type]
            except (JoseError, ValueError, TypeError, KeyError) as exc:
                raise SignInFailed(f"the identity provider's key set cannot be read: "
                                   f"{str(exc)[:200]}") from None
        return self._keys

    async def _verified(self, meta: _Metadata,
                        id_token: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The ID token's claims and header, once its signature checks out."""
        for again in (False, True):
            keys = await self._key_set(meta, again=again)
            try:
                token = jwt.decode(id_token, keys, algorithms=list(meta.algorithms))
            except InvalidKeyIdError:
                if again:
                    break
                continue  # the provider rotated its keys: read them once more
            except (JoseError, ValueError) as exc:
                raise SignInFailed(f"the identity provider's ID token does not verify: "
                                   f"{str(exc)[:200] or type(exc).__name__}") from None
            return dict(token.claims), dict(token.header)
        raise SignInFailed("the identity provider's ID token is signed with a key its key "
                           "set does not have")

    async def _exchange(self, meta: _Metadata, code: str, verifier: str,
                        redirect_uri: str) -> dict[str, Any]:
        form = {"grant_type": "authorization_code", "code": code,
                "redirect_uri": redirect_uri, "code_verifier": verifier}
        headers = [("Content-Type", "application/x-www-form-urlencoded"),
                   ("Accept", "application/json")]
        if self._secret and meta.auth_method == "client_secret_basic":
            pair = f"{_form(self.client_id)}:{_form(self._secret)}".encode()
            headers.append(("Authorization", "Basic " + base64.b64encode(pair).decode()))
        else:
            form["client_id"] = self.client_id
            if self._secret:
                form["client_secret"] = self._secret
        answer = await self._request("POST", meta.token_endpoint, "token endpoint",
                                     headers=headers, body=urlencode(form).encode())
        body = _json_object(answer.content)
        if answer.status != 200 or body is None:
            error = body.get("error") if body else None
            if isinstance(error, str):
                raise SignInFailed(f"the identity provider refused the sign-in: "
                                   f"{error[:100]}")
            raise SignInFailed(f"the identity provider's token endpoint answered HTTP "
                               f"{answer.status} without a JSON object")
        return body

    async def _get(self, url: str, what: str) -> dict[str, Any]:
        answer = await self._request("GET", url, what, headers=[("Accept", "application/json")])
        body = _json_object(answer.content)
        if answer.status != 200:
            raise SignInFailed(f"the identity provider's {what} at {url[:200]} answered HTTP "
                               f"{answer.status}")
        if body is None:
            raise SignInFailed(f"the identity provider's {what} at {url[:200]} is not a "
                               "JSON object")
        return body

    async def _request(self, method: str, url: str, what: str, *,
                       headers: list[tuple[str, str]], body: bytes = b"") -> http1.Response:
        http = http1.HttpClient(max_per_origin=1, connect_timeout=FETCH_TIMEOUT_S,
                                max_body=MAX_DOCUMENT_BYTES)
        try:
            return await http.request(method, url, headers=headers, body=body,
                                      timeout=FETCH_TIMEOUT_S)
        except http1.ResponseTooLarge:
            raise SignInFailed(f"the identity provider's {what} answered more than "
                               f"{MAX_DOCUMENT_BYTES} bytes") from None
        except (http1.HttpError, ValueError) as exc:
            raise SignInFailed(f"cannot reach the identity provider's {what}: "
                               f"{str(exc)[:200]}") from None
        finally:
            await http.aclose()


async def callback_identity(provider: OidcProvider, flow: Flow | None,
                            params: Mapping[str, str], redirect_uri: str) -> Identity:
    """What a callback request proves (the flow its cookie carried, if any, and its query's
    ``code``, ``state`` or ``error``): the person, or :class:`SignInFailed` saying why, in
    words for them."""
    if flow is None:
        raise SignInFailed("this sign-in was not started in this browser, took longer than "
                           "10 minutes, or was finished already: start it again")
    error = params.get("error")
    if error is not None:
        raise SignInFailed(f"the identity provider did not sign you in ({error[:100]})")
    code, state = params.get("code", ""), params.get("state", "")
    if not code or not state or len(code) > _MAX_PARAM or len(state) > _MAX_PARAM:
        raise SignInFailed("the identity provider's answer has no code or state")
    return await provider.finish(flow, state=state, code=code, redirect_uri=redirect_uri)


def _form(value: str) -> str:
    """RFC 6749 §2.3.1: the id and secret are form-encoded before Basic encoding."""
    return urlencode({"": value})[1:]


def _json_object(content: bytes) -> dict[str, Any] | None:
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
    return body if isinstance(body, dict) else None


def _url(document: Mapping[str, Any], name: str) -> str:
    value = document.get(name)
    if not isinstance(value, str) or urlsplit(value).scheme not in ("https", "http"):
        raise SignInFailed(f"the identity provider's discovery document has no usable "
                           f"{name}")
    return value


def _metadata(issuer: str, document: Mapping[str, Any], *, has_secret: bool) -> _Metadata:
    named = document.get("issuer")
    if not isinstance(named, str) or named.rstrip("/") != issuer:
        raise SignInFailed(f"the identity provider's discovery document names another "
                           f"issuer ({str(named)[:200]!r}, not {issuer!r})")
    offered = document.get("id_token_signing_alg_values_supported") or ["RS256"]
    algorithms = tuple(a for a in offered if a in ASYMMETRIC) if isinstance(
        offered, list) else ()
    if not algorithms:
        raise SignInFailed("the identity provider signs ID tokens with none of the "
                           f"public-key algorithms this platform accepts ({', '.join(ASYMMETRIC)})")
    methods = document.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
    usable = [m for m in _AUTH_METHODS if isinstance(methods, list) and m in methods]
    if has_secret and not usable:
        raise SignInFailed("the identity provider accepts neither client_secret_basic nor "
                           "client_secret_post at its token endpoint")
    return _Metadata(_url(document, "authorization_endpoint"), _url(document, "token_endpoint"),
                     _url(document, "jwks_uri"), algorithms,
                     usable[0] if usable else "none")


def _identity(issuer: str, claims: Mapping[str, Any]) -> Identity:
    subject, email = claims.get("sub"), claims.get("email")
    if not isinstance(subject, str) or not 1 <= len(subject) <= 255:
        raise SignInFailed("the identity provider's ID token has no usable subject")
    if not isinstance(email, str) or not email:
        raise SignInFailed("the identity provider did not say the person's email address "
                           "(the client must be allowed the `email` scope)")
    if claims.get("email_verified") is False:
        raise SignInFailed("the identity provider says this email address is not verified")
    return Identity(issuer, subject, email)
