"""The authorization server's endpoints as a client uses them: dynamic client registration
(RFC 7591), the authorization request with PKCE S256 and the resource it is for (RFC 7636,
RFC 8707), and the token endpoint (authorization code, refresh, client credentials), with
the client authentication the server accepts (``client_secret_basic``,
``client_secret_post``, ``none``). A token endpoint's error is :class:`TokenRefused`; its
description is kept, never a token."""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

import orjson

from tenantry import http1
from tenantry.tools.oauth.discovery import AuthorizationFailed, AuthorizationServer

#: What this platform calls itself when it registers as a client.
CLIENT_NAME = "Tenantry"
TOKEN_TIMEOUT_S = 15.0
_METHODS = ("client_secret_basic", "client_secret_post", "none")


class TokenRefused(AuthorizationFailed):
    """The token endpoint said no (``error``: its OAuth error code, e.g. ``invalid_grant``
    for a refresh token revoked or expired)."""

    def __init__(self, detail: str, *, error: str) -> None:
        super().__init__(detail, oauth_error=error)
        self.error = error


@dataclass(frozen=True, slots=True, repr=False)
class OAuthClient:
    """This platform as the authorization server's client, for one tenant's server."""

    client_id: str
    client_secret: str | None
    auth_method: str  # client_secret_basic | client_secret_post | none

    def __repr__(self) -> str:
        return f"OAuthClient({self.client_id!r}, {self.auth_method!r})"


@dataclass(frozen=True, slots=True, repr=False)
class Tokens:
    access_token: str
    expires_in: float | None
    refresh_token: str | None
    scope: str | None

    def __repr__(self) -> str:  # never a token in a log line or a traceback
        return f"Tokens(expires_in={self.expires_in}, scope={self.scope!r})"


def pkce() -> tuple[str, str]:
    """A code verifier (43 characters of base64url) and its S256 challenge."""
    verifier = secrets.token_urlsafe(32)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def auth_method(server: AuthorizationServer, secret: str | None,
                registered: str | None = None) -> str:
    """How to authenticate at the token endpoint: what registration said, else the first
    the server supports of those a client with (or without) a secret can use."""
    if registered in _METHODS:
        return registered
    # With a secret, a server that takes only public clients gets none (the secret unsent).
    usable = ("client_secret_basic", "client_secret_post", "none") if secret else ("none",)
    for method in usable:
        if method in server.token_auth_methods:
            return method
    if secret is None:
        return "none"
    raise AuthorizationFailed(f"the authorization server accepts none of the client "
                              f"authentications the platform can use (it lists "
                              f"{list(server.token_auth_methods)[:8]})")


def authorization_url(server: AuthorizationServer, client: OAuthClient, *, redirect_uri: str,
                      state: str, challenge: str, scope: str | None, resource: str) -> str:
    if server.authorization_endpoint is None:
        raise AuthorizationFailed("the authorization server has no authorization endpoint")
    if server.code_challenge_methods and "S256" not in server.code_challenge_methods:
        raise AuthorizationFailed("the authorization server does not support PKCE with S256")
    query = {"response_type": "code", "client_id": client.client_id,
             "redirect_uri": redirect_uri, "state": state, "code_challenge": challenge,
             "code_challenge_method": "S256", "resource": resource}
    if scope:
        query["scope"] = scope
    parts = urlsplit(server.authorization_endpoint)
    joined = f"{parts.query}&{urlencode(query)}" if parts.query else urlencode(query)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, joined, ""))


async def register_client(http: http1.HttpClient, server: AuthorizationServer,
                          redirect_uri: str, *, grant: str) -> OAuthClient:
    """Dynamic client registration (RFC 7591)."""
    if server.registration_endpoint is None:
        raise AuthorizationFailed("the authorization server offers no dynamic client "
                                  "registration: register the tool server with a client id "
                                  "(and secret) issued by it")
    method = auth_method(server, "x") if server.token_auth_methods != ("none",) else "none"
    body = {"client_name": CLIENT_NAME, "redirect_uris": [redirect_uri],
            "grant_types": [grant, "refresh_token"] if grant == "authorization_code"
            else [grant],
            "response_types": ["code"] if grant == "authorization_code" else [],
            "token_endpoint_auth_method": method}
    answer = await _post(http, server.registration_endpoint, orjson.dumps(body),
                         (("Content-Type", "application/json"),), "client registration")
    client_id = answer.get("client_id")
    if not isinstance(client_id, str) or not client_id:
        raise AuthorizationFailed("the client registration answer has no client_id")
    secret = answer.get("client_secret")
    secret = secret if isinstance(secret, str) and secret else None
    registered = answer.get("token_endpoint_auth_method")
    return OAuthClient(client_id, secret, auth_method(
        server, secret, registered if isinstance(registered, str) else None))


async def token_request(http: http1.HttpClient, server: AuthorizationServer,
                        client: OAuthClient, form: dict[str, str]) -> Tokens:
    """POST ``form`` to the token endpoint with the client's authentication; the tokens."""
    # client_id goes in the body with HTTP Basic too (RFC 6749 §3.2.1 allows it): the MCP
    # Python SDK's authorization server refuses a token request without it.
    form = {**form, "client_id": client.client_id}
    headers: list[tuple[str, str]] = [("Content-Type", "application/x-www-form-urlencoded")]
    if client.auth_method == "client_secret_basic" and client.client_secret is not None:
        pair = f"{quote(client.client_id, safe='')}:{quote(client.client_secret, safe='')}"
        headers.append(("Authorization", "Basic " + base64.b64encode(pair.encode()).decode()))
    elif client.auth_method == "client_secret_post" and client.client_secret is not None:
        form["client_secret"] = client.client_secret
    answer = await _post(http, server.token_endpoint, urlencode(form).encode(),
                         tuple(headers), "token request")
    token = answer.get("access_token")
    if not isinstance(token, str) or not token:
        raise AuthorizationFailed("the token endpoint's answer has no access_token")
    if str(answer.get("token_type", "")).lower() != "bearer":
        raise AuthorizationFailed("the token endpoint gave a token that is not a Bearer token")
    expires = answer.get("expires_in")
    refresh = answer.get("refresh_token")
    scope = answer.get("scope")
    return Tokens(token, float(expires) if isinstance(expires, int | float) else None,
                  refresh if isinstance(refresh, str) and refresh else None,
                  scope if isinstance(scope, str) else None)


async def _post(http: http1.HttpClient, url: str, body: bytes,
                headers: tuple[tuple[str, str], ...], what: str) -> dict[str, Any]:
    try:
        response = await http.request("POST", url, headers=(*headers,
                                                             ("Accept", "application/json")),
                                      body=body, timeout=TOKEN_TIMEOUT_S)
    except http1.HttpError as exc:
        raise AuthorizationFailed(f"the {what} failed: {exc}") from None
    try:
        answer = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        answer = None
    if response.status >= 500 or not isinstance(answer, dict):
        # The server failed, not refused: nothing to conclude about the grant.
        raise AuthorizationFailed(f"the {what} got HTTP {response.status}"
                                  + ("" if isinstance(answer, dict) else " and no JSON object"))
    if response.status >= 300 or "error" in answer:
        error = str(answer.get("error", f"http_{response.status}"))[:100]
        description = str(answer.get("error_description", ""))[:300]
        raise TokenRefused(f"the {what} was refused: {error}"
                           + (f" ({description})" if description else ""), error=error)
    return answer
