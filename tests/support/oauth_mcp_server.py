"""An MCP server that is its own OAuth 2.1 authorization server, built on the official SDK
(``mcp``) exactly as a tool-server author would build one: ``MCPServer(auth_server_provider=…,
auth=AuthSettings(…))`` served over streamable HTTP on 127.0.0.1.

What the SDK serves (and the platform's discovery must find, tools/oauth/discovery.py):

- ``/mcp``: the MCP endpoint; without a valid token it answers 401 with
  ``WWW-Authenticate: Bearer error="invalid_token", …, resource_metadata="<PRM URL>"``;
- ``/.well-known/oauth-protected-resource/mcp``: the protected resource metadata (RFC 9728,
  path-aware), ``resource`` = ``…/mcp``, ``authorization_servers`` = [the origin];
- ``/.well-known/oauth-authorization-server``: the authorization server metadata (RFC 8414),
  issuer = the origin; ``/authorize``, ``/token``, ``/register`` (DCR), ``/revoke``.

The provider is in memory. ``/authorize`` redirects back at once (nobody to ask). Access
tokens live ``access_seconds`` (as ``expires_in``, and enforced here); tokens are bound to
the ``resource`` asked for (RFC 8707: the SDK refuses a token for another resource). Refresh
tokens are **rotated on use**: a refresh gives a new access *and* refresh token, and the
refresh token used (with the access token it was issued with) stops working.
``revoke_refresh_tokens()`` makes every refresh token issued so far fail (``invalid_grant``),
as when the person revokes the grant; tokens from a later authorization work.
``hold_token_requests()`` makes ``/token`` hang until ``release_token_requests()``.
``machine_client(id, secret)`` issues a client beforehand for the client credentials grant,
which the SDK's token endpoint does not serve: this server answers it itself (an access
token bound to the ``resource`` asked for, no refresh token), with the client's secret in
the body or in HTTP Basic.

Everything that happened is counted (``authorizations``, ``code_exchanges``, ``refreshes``,
``access_tokens``/``refresh_tokens`` issued, ``whoami_tokens``: the token of each tool call,
``token_uses``: requests authenticated with each token) for tests to assert on."""

from __future__ import annotations

import asyncio
import base64
import math
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Self
from urllib.parse import unquote

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    OAuthAuthorizationServerProvider,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tenantry.models.loopback import LoopbackServer

WHOAMI_TEXT = "you are authorized"
REFRESH_SECONDS = 30 * 24 * 3600


@dataclass(frozen=True, slots=True)
class Issued:
    """One access token issued: by which grant (``authorization_code``, ``refresh_token`` or
    ``client_credentials``, which issues no refresh token)."""

    access_token: str
    refresh_token: str | None
    grant: str


@dataclass
class _Provider(OAuthAuthorizationServerProvider[AuthorizationCode, RefreshToken, AccessToken]):
    """The SDK's provider protocol, in memory (no identity assertions: its default refuses)."""

    owner: OAuthMcpServer
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    access: dict[str, AccessToken] = field(default_factory=dict)
    refresh: dict[str, RefreshToken] = field(default_factory=dict)
    # Which access token each refresh token was issued with (both end when it is used).
    pairs: dict[str, str] = field(default_factory=dict)
    # When each access token expires, to the fraction of a second (AccessToken's is whole).
    expiry: dict[str, float] = field(default_factory=dict)

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info
        self.owner.registrations += 1

    async def authorize(self, client: OAuthClientInformationFull,
                        params: AuthorizationParams) -> str:
        self.owner.authorizations += 1
        assert client.client_id is not None
        code = secrets.token_urlsafe(32)
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [], expires_at=time.time() + 300,
            client_id=client.client_id, code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource)
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client: OAuthClientInformationFull,
                                      authorization_code: str) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(self, client: OAuthClientInformationFull,
                                          authorization_code: AuthorizationCode) -> OAuthToken:
        if self.codes.pop(authorization_code.code, None) is None:
            raise TokenError("invalid_grant", "authorization code already used")
        self.owner.code_exchanges += 1
        return self._issue(authorization_code.client_id, authorization_code.scopes,
                           authorization_code.resource, "authorization_code")

    async def load_refresh_token(self, client: OAuthClientInformationFull,
                                 refresh_token: str) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(self, client: OAuthClientInformationFull,
                                     refresh_token: RefreshToken,
                                     scopes: list[str]) -> OAuthToken:
        if self.refresh.pop(refresh_token.token, None) is None:
            raise TokenError("invalid_grant", "refresh token already used")
        self.access.pop(self.pairs.pop(refresh_token.token, ""), None)  # rotated away
        self.owner.refreshes += 1
        return self._issue(refresh_token.client_id, scopes, refresh_token.resource,
                           "refresh_token")

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or self.expiry[token] <= time.time():
            return None
        self.owner.token_uses[token] += 1
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None,
               grant: str) -> OAuthToken:
        lifetime = self.owner.access_seconds
        access = self._access(client_id, scopes, resource)
        refresh = f"rt_{secrets.token_urlsafe(24)}"
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes,
                                             expires_at=int(time.time()) + REFRESH_SECONDS,
                                             resource=resource)
        self.pairs[refresh] = access
        self.owner.issued.append(Issued(access, refresh, grant))
        return OAuthToken(access_token=access, expires_in=lifetime,
                          scope=" ".join(scopes) or None, refresh_token=refresh)

    def issue_machine(self, client_id: str, resource: str | None) -> OAuthToken:
        """The client credentials grant: an access token only."""
        access = self._access(client_id, [], resource)
        self.owner.issued.append(Issued(access, None, "client_credentials"))
        return OAuthToken(access_token=access, expires_in=self.owner.access_seconds)

    def _access(self, client_id: str, scopes: list[str], resource: str | None) -> str:
        access = f"at_{secrets.token_urlsafe(24)}"
        self.expiry[access] = time.time() + self.owner.access_seconds
        self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes,
                                          expires_at=math.ceil(self.expiry[access]),
                                          resource=resource)
        return access


class OAuthMcpServer:
    """``async with OAuthMcpServer() as server:`` register ``server.url`` as a tool server."""

    def __init__(self, *, access_seconds: int = 3600) -> None:
        self.access_seconds = access_seconds
        self.registrations = 0
        self.authorizations = 0
        self.code_exchanges = 0
        self.refreshes = 0
        self.issued: list[Issued] = []
        self.whoami_tokens: list[str | None] = []  # each tool call's bearer token
        self.token_uses: Counter[str] = Counter()  # requests authenticated, per token
        self.token_requests = 0  # POSTs that reached /token (held ones too)
        self._provider = _Provider(self)
        self._machines: dict[str, str] = {}  # client id -> secret (client credentials)
        self._held: asyncio.Event | None = None
        self._http: LoopbackServer | None = None
        self._app: ASGIApp | None = None

    # -- what tests read and arrange -----------------------------------------------------

    @property
    def url(self) -> str:
        return f"{self.origin}/mcp"

    @property
    def origin(self) -> str:
        assert self._http is not None, "not started"
        return f"http://127.0.0.1:{self._http.port}"

    @property
    def access_tokens(self) -> list[str]:
        return [i.access_token for i in self.issued]

    @property
    def refresh_tokens(self) -> list[str]:
        return [i.refresh_token for i in self.issued if i.refresh_token is not None]

    def machine_client(self, client_id: str, secret: str) -> None:
        """A client issued beforehand, for the client credentials grant."""
        self._machines[client_id] = secret

    def revoke_refresh_tokens(self) -> None:
        """Every refresh token issued so far is refused from now on (``invalid_grant``)."""
        self._provider.refresh.clear()
        self._provider.pairs.clear()

    def hold_token_requests(self) -> None:
        """``/token`` hangs (answers nothing) until :meth:`release_token_requests`."""
        self._held = asyncio.Event()

    def release_token_requests(self) -> None:
        if self._held is not None:
            self._held.set()
            self._held = None

    # -- serving -------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        # The socket first: the SDK's metadata names the server's own URL, port included.
        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            await self._dispatch(scope, receive, send)

        self._http = LoopbackServer(app)
        self._app = self._build().streamable_http_app(host="127.0.0.1")
        await self._http.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self.release_token_requests()
        if self._http is not None:
            await self._http.stop()

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self._app is not None
        if scope["type"] == "http" and scope["path"] == "/token":
            self.token_requests += 1
            if self._held is not None:
                await self._held.wait()
            request = Request(scope, receive)
            body = await request.body()  # kept: the form is read from it, and so is the SDK's
            form = await request.form()
            if form.get("grant_type") == "client_credentials":
                await self._machine_token(request, form)(scope, receive, send)
                return

            async def replay() -> Message:
                return {"type": "http.request", "body": body, "more_body": False}

            await self._app(scope, replay, send)
            return
        await self._app(scope, receive, send)

    def _machine_token(self, request: Request, form: FormData) -> Response:
        client_id, secret = str(form.get("client_id", "")), form.get("client_secret")
        basic = request.headers.get("authorization", "")
        if basic.startswith("Basic "):
            pair = base64.b64decode(basic.removeprefix("Basic ")).decode()
            named, _, given = pair.partition(":")
            client_id, secret = unquote(named), unquote(given)
        if not client_id or self._machines.get(client_id) != secret:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        resource = form.get("resource")
        token = self._provider.issue_machine(
            client_id, resource if isinstance(resource, str) else None)
        return JSONResponse(token.model_dump(exclude_none=True),
                            headers={"Cache-Control": "no-store"})

    def _build(self) -> MCPServer:
        server: MCPServer = MCPServer(
            "oauth-whoami", log_level="WARNING", auth_server_provider=self._provider,
            auth=AuthSettings(
                issuer_url=self.origin, resource_server_url=self.url,
                validate_token_resource=True,  # a token must be for this server (RFC 8707)
                client_registration_options=ClientRegistrationOptions(enabled=True),
                revocation_options=RevocationOptions(enabled=True)))

        async def whoami(ctx: Context) -> str:
            """Say whether the caller is authorized."""
            header = (ctx.headers or {}).get("authorization")
            self.whoami_tokens.append(header.removeprefix("Bearer ") if header else None)
            return WHOAMI_TEXT

        server.add_tool(whoami)
        return server
