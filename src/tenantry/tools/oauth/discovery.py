"""Where a tool server's tokens come from, found as the MCP authorization spec (2025-11-25)
says: the server's 401 names its protected resource metadata (RFC 9728) in
``WWW-Authenticate``, or it is at the well-known path for the server's URL, then at the
root; that names the authorization server, whose own metadata (RFC 8414, or OpenID
discovery) is read at the well-known URLs for its issuer, path-aware, in the spec's order.

Every document is fetched once, without following redirects, bounded in size and time; what
it must hold is checked where it is read. Anything else is :class:`AuthorizationFailed`,
a clear reason and a 4xx, and nothing is stored."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from tenantry import http1
from tenantry.errors import TenantryError

#: A metadata document larger than this is no honest server's.
MAX_DOCUMENT_BYTES = 256 * 1024
FETCH_TIMEOUT_S = 10.0


class AuthorizationFailed(TenantryError):
    """A tool server's OAuth could not be set up or used: its metadata, its authorization
    server or a token request said no, or said something unreadable. Nothing was stored."""

    type = "tool_server_authorization_failed"
    status = 422
    title = "Tool server authorization failed"


@dataclass(frozen=True, slots=True)
class Challenge:
    """What a 401 or 403's ``WWW-Authenticate: Bearer …`` said."""

    resource_metadata: str | None = None
    scope: str | None = None
    error: str | None = None


_PARAM = re.compile(r'([A-Za-z0-9_.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')


def parse_challenge(header: str) -> Challenge:
    """The Bearer challenge's parameters (RFC 6750 §3); other schemes' are ignored."""
    scheme, _, rest = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return Challenge()
    params: dict[str, str] = {}
    for match in _PARAM.finditer(rest):
        value = match[2] if match[2] is not None else match[3]
        params.setdefault(match[1].lower(), re.sub(r"\\(.)", r"\1", value))
    return Challenge(params.get("resource_metadata"), params.get("scope") or None,
                     params.get("error"))


@dataclass(frozen=True, slots=True)
class AuthorizationServer:
    """An authorization server's metadata: what the platform uses of it."""

    issuer: str
    authorization_endpoint: str | None
    token_endpoint: str
    registration_endpoint: str | None
    token_auth_methods: tuple[str, ...]
    code_challenge_methods: tuple[str, ...]
    client_id_metadata_documents: bool

    def to_json(self) -> dict[str, Any]:
        return {"issuer": self.issuer, "authorization_endpoint": self.authorization_endpoint,
                "token_endpoint": self.token_endpoint,
                "registration_endpoint": self.registration_endpoint,
                "token_auth_methods": list(self.token_auth_methods),
                "code_challenge_methods": list(self.code_challenge_methods),
                "client_id_metadata_documents": self.client_id_metadata_documents}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AuthorizationServer:
        return cls(data["issuer"], data["authorization_endpoint"], data["token_endpoint"],
                   data["registration_endpoint"], tuple(data["token_auth_methods"]),
                   tuple(data["code_challenge_methods"]), data["client_id_metadata_documents"])


@dataclass(frozen=True, slots=True)
class Discovered:
    """A tool server's OAuth: the resource its tokens are for (RFC 8707), the scopes its
    metadata lists (None: it lists none), and its authorization server."""

    resource: str
    scopes_supported: tuple[str, ...] | None
    server: AuthorizationServer


async def discover(http: http1.HttpClient, server_url: str, challenge: Challenge) -> Discovered:
    metadata_urls = ([challenge.resource_metadata] if challenge.resource_metadata
                     else _resource_metadata_urls(server_url))
    resource = await _first_document(http, metadata_urls, "protected resource metadata")
    servers = resource.get("authorization_servers")
    if not isinstance(servers, list) or not servers or not isinstance(servers[0], str):
        raise AuthorizationFailed("the tool server's protected resource metadata names no "
                                  "authorization server")
    resource_id = resource.get("resource")
    if resource_id is None:
        resource_id = canonical(server_url)
    if not isinstance(resource_id, str) or not _covers(resource_id, server_url):
        raise AuthorizationFailed(f"the tool server's metadata is for another resource "
                                  f"({str(resource_id)[:200]!r}), not {server_url[:200]!r}")
    scopes = resource.get("scopes_supported")
    issuer = _url(servers[0], "the authorization server")
    metadata = await _first_document(http, authorization_server_metadata_urls(issuer),
                                     "authorization server metadata")
    return Discovered(resource_id, _strings(scopes) if isinstance(scopes, list) else None,
                      _authorization_server(metadata, issuer))


def canonical(url: str) -> str:
    """A URL as a resource indicator: lower-case scheme and host, no fragment (RFC 8707)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path, parts.query, ""))


def _covers(resource: str, server_url: str) -> bool:
    """Whether tokens for ``resource`` may go to ``server_url``: the same origin, and the
    resource's path a prefix of the server's (a server's metadata may name its origin)."""
    a, b = urlsplit(canonical(resource)), urlsplit(canonical(server_url))
    if (a.scheme, a.netloc) != (b.scheme, b.netloc) or a.fragment:
        return False
    prefix = a.path.rstrip("/")
    return b.path == prefix or b.path.startswith(prefix + "/") or not prefix


def _resource_metadata_urls(server_url: str) -> list[str]:
    """RFC 9728 §3.1: the path-aware well-known URL first, then the root one."""
    parts = urlsplit(server_url)
    root = urlunsplit((parts.scheme, parts.netloc, "/.well-known/oauth-protected-resource",
                       "", ""))
    path = parts.path.rstrip("/")
    return [root + path, root] if path else [root]


def authorization_server_metadata_urls(issuer: str) -> list[str]:
    """The MCP spec's order: OAuth metadata with the path inserted, OpenID discovery with
    it inserted, then OpenID discovery with it appended (RFC 8414 §3, OIDC Discovery)."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")

    def at(p: str) -> str:
        return urlunsplit((parts.scheme, parts.netloc, p, "", ""))

    if not path:
        return [at("/.well-known/oauth-authorization-server"),
                at("/.well-known/openid-configuration")]
    return [at(f"/.well-known/oauth-authorization-server{path}"),
            at(f"/.well-known/openid-configuration{path}"),
            at(f"{path}/.well-known/openid-configuration")]


async def _first_document(http: http1.HttpClient, urls: Sequence[str],
                          what: str) -> dict[str, Any]:
    tried: list[str] = []
    for url in urls:
        try:
            response = await http.request("GET", _url(url, what),
                                          headers=(("Accept", "application/json"),),
                                          timeout=FETCH_TIMEOUT_S)
        except http1.ResponseTooLarge:
            raise AuthorizationFailed(f"the {what} at {url[:200]} is larger than "
                                      f"{MAX_DOCUMENT_BYTES} bytes") from None
        except (http1.HttpError, ValueError) as exc:
            raise AuthorizationFailed(f"cannot read the {what} at {url[:200]}: {exc}") from None
        if response.status == 200:
            try:
                document = orjson.loads(response.content)
            except orjson.JSONDecodeError:
                raise AuthorizationFailed(f"the {what} at {url[:200]} is not JSON") from None
            if not isinstance(document, dict):
                raise AuthorizationFailed(f"the {what} at {url[:200]} is not a JSON object")
            return document
        tried.append(f"{url[:200]} (HTTP {response.status})")
    raise AuthorizationFailed(f"no {what} found: tried {', '.join(tried)}")


def _authorization_server(metadata: dict[str, Any], issuer: str) -> AuthorizationServer:
    if str(metadata.get("issuer", "")).rstrip("/") != issuer.rstrip("/"):
        raise AuthorizationFailed(f"the authorization server's metadata names another issuer "
                                  f"({str(metadata.get('issuer'))[:200]!r}, not {issuer!r})")
    token = metadata.get("token_endpoint")
    if not isinstance(token, str):
        raise AuthorizationFailed("the authorization server's metadata has no token endpoint")
    authorize = metadata.get("authorization_endpoint")
    register = metadata.get("registration_endpoint")
    methods = metadata.get("token_endpoint_auth_methods_supported")
    challenges = metadata.get("code_challenge_methods_supported")
    return AuthorizationServer(
        issuer, _url(authorize, "authorization endpoint") if authorize is not None else None,
        _url(token, "token endpoint"),
        _url(register, "registration endpoint") if register is not None else None,
        # RFC 8414 §2: absent, the default is client_secret_basic.
        _strings(methods) if isinstance(methods, list) else ("client_secret_basic",),
        _strings(challenges) if isinstance(challenges, list) else (),
        metadata.get("client_id_metadata_document_supported") is True)


def _url(value: object, what: str) -> str:
    if not isinstance(value, str) or len(value) > 2000:
        raise AuthorizationFailed(f"the {what} is not a URL")
    try:
        http1.target(value)
    except ValueError as exc:
        raise AuthorizationFailed(f"the {what} is not a usable URL: {exc}") from None
    return value


def _strings(values: list[Any]) -> tuple[str, ...]:
    return tuple(v for v in values if isinstance(v, str))[:64]
