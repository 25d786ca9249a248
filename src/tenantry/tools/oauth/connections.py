"""A tenant's OAuth-protected tool server, connected and kept connected.

- ``prepare``: at registration, the server answered 401 with a Bearer challenge: discover
  its authorization server and store what a connection needs (and a pre-registered client,
  if the registration named one). The server then waits for an authorization.
- ``connect``: an authorization URL for the tenant's browser (authorization code with PKCE
  S256 and ``resource``; a client registered dynamically first when none is), or, for a
  machine-to-machine server, tokens at once (client credentials).
- ``callback``: the authorization server sent the browser back with a code: its state
  names the tenant and the authorization asked for (taken once); the code becomes tokens.
- ``headers``: the ``Authorization`` header of one call, the access token refreshed first
  when it expires within a minute. A refused refresh, or a server asking for a scope it
  was not given, makes the server wait for the tenant to connect it again
  (:class:`AuthorizationRequired`); asking for the same scope more than
  ``MAX_STEP_UPS`` times in a row is refused.

Every secret here is sealed in the row (client secret, tokens, PKCE verifier), opened for
the one request that sends it; none goes into an error, a log line or an event."""

from __future__ import annotations

import contextlib
import secrets
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from tenantry import http1
from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound, TenantryError, ValidationFailed
from tenantry.ids import TenantId
from tenantry.tools.destinations import Destinations
from tenantry.tools.oauth.discovery import (
    MAX_DOCUMENT_BYTES,
    AuthorizationServer,
    Challenge,
    discover,
)
from tenantry.tools.oauth.endpoints import (
    OAuthClient,
    TokenRefused,
    Tokens,
    auth_method,
    authorization_url,
    pkce,
    register_client,
    token_request,
)
from tenantry.vault import Vault

Q = load(__package__)

#: Authorizations asked for in a row for the same scope after the server refused it (403):
#: past this the platform stops asking (a server that will never grant it).
MAX_STEP_UPS = 3
#: How long an authorization URL may take to come back through the callback.
FLOW_SECONDS = 600
#: An access token expiring within this is refreshed before a call.
REFRESH_MARGIN_S = 60.0
GRANTS = ("authorization_code", "client_credentials")


NO_FLOW = "No authorization is waiting under this state (unknown, or already used)."


class AuthorizationDenied(TenantryError):
    """The authorization server sent the browser back without a code: declined."""

    type = "authorization_denied"
    status = 403
    title = "Authorization not given"


class AuthorizationRequired(TenantryError):
    """The tool server needs the tenant to connect it (again) before it can be called."""

    type = "authorization_required"
    status = 409
    title = "Tool server authorization required"


@dataclass(frozen=True, slots=True)
class PreRegistered:
    """A client the authorization server issued to the tenant (or operator) beforehand:
    its id, and the name of the tenant's vault secret holding its secret (none: public)."""

    client_id: str
    secret_name: str | None = None


@dataclass(frozen=True, slots=True)
class OAuthState:
    """What the API shows of a server's OAuth (never a token)."""

    status: str
    reason: str | None
    grant: str
    scope: str | None
    issuer: str
    expires_at: datetime | None
    connected_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "grant": self.grant,
                "scope": self.scope, "issuer": self.issuer,
                "expires_at": self.expires_at.isoformat() if self.expires_at else None,
                "connected_at": self.connected_at.isoformat() if self.connected_at else None}


class ToolServerAuth:
    """``destinations``: where the OAuth documents and endpoints of servers tenants
    registered themselves may be (each request to one goes to a vetted address); the
    default refuses every address that is not public."""

    def __init__(self, db: Database, vault: Vault | None,
                 destinations: Destinations | None = None) -> None:
        self._db = db
        self._vault = vault
        self._destinations = destinations or Destinations()

    @property
    def vault(self) -> Vault:
        if self._vault is None:
            raise ValidationFailed("OAuth tool servers need the vault (TENANTRY_MASTER_KEY)")
        return self._vault

    # -- registration and connecting ----------------------------------------------------

    async def prepare(self, conn: Connection, tenant: TenantId, server_id: uuid.UUID,
                      server_url: str, challenge: Challenge, *, grant: str,
                      client: PreRegistered | None, guarded: bool = False) -> None:
        """In the registration's transaction: discover, and store what connecting needs.
        ``guarded``: the tenant registers the server itself."""
        if grant not in GRANTS:
            raise ValidationFailed(f"grant must be one of {list(GRANTS)}")
        if grant == "client_credentials" and client is None:
            raise ValidationFailed("the client_credentials grant needs a pre-registered client")
        async with self._http(guarded) as http:
            found = await discover(http, server_url, challenge)
        scope = challenge.scope or (" ".join(found.scopes_supported)
                                    if found.scopes_supported else None)
        client_id = method = None
        sealed: tuple[bytes | None, bytes | None] = (None, None)
        if client is not None:
            secret = (await self.vault.get(tenant, client.secret_name)
                      if client.secret_name else None)
            client_id, method = client.client_id, auth_method(found.server, secret)
            if secret is not None:
                sealed = await self.vault.seal(conn, tenant, _label(server_id, "client"), secret)
        await conn.execute(Q.upsert_pending, tenant.value, server_id,
                           "not connected yet", grant, found.resource,
                           found.server.to_json(), scope, client_id, method, *sealed)

    async def connect(self, tenant: TenantId, server_id: uuid.UUID,
                      redirect_uri: str) -> str | None:
        """The URL to send the tenant's browser to; None when connected already (client
        credentials need no browser)."""
        async with self._row(tenant, server_id) as (conn, row):
            if row["step_ups"] >= MAX_STEP_UPS:
                raise Conflict(f"the tool server refused scope {row['scope']!r} after "
                               f"{MAX_STEP_UPS} authorizations in a row: not asking again "
                               "(ask its owner for that scope, then register it again)")
            server = AuthorizationServer.from_json(row["authorization_server"])
            async with self._http(row["guarded"]) as http:
                client = await self._client(conn, tenant, server_id, row, server, http,
                                            redirect_uri)
                if row["grant_type"] == "client_credentials":
                    form = {"grant_type": "client_credentials", "resource": row["resource"]}
                    if row["scope"]:
                        form["scope"] = row["scope"]
                    await self._save(conn, tenant, server_id,
                                     await token_request(http, server, client, form))
                    return None
            verifier, challenge = pkce()
            state = f"{tenant.value}.{secrets.token_urlsafe(24)}"
            sealed = await self.vault.seal(conn, tenant, _label(server_id, "verifier"), verifier)
            await conn.execute(Q.start_flow, tenant.value, server_id, state, *sealed,
                               redirect_uri, float(FLOW_SECONDS))
            return authorization_url(server, client, redirect_uri=redirect_uri, state=state,
                                     challenge=challenge, scope=row["scope"],
                                     resource=row["resource"])

    async def callback(self, state: str, code: str | None,
                       error: str | None) -> tuple[TenantId, uuid.UUID]:
        """The code the authorization server sent the browser back with, as tokens; or its
        ``error`` (the person declined). Either way the authorization asked for is over."""
        tenant = _tenant_of(state)
        async with self._db.tenant_tx(tenant) as conn:
            row = await conn.fetchrow(Q.take_flow, tenant.value, state)
        if row is None:
            raise NotFound(NO_FLOW)
        if error is not None or not code:
            raise AuthorizationDenied(f"the authorization was not given: {error or 'no code'}")
        if not row["fresh"]:
            raise Conflict("the authorization took too long: connect again")
        async with self._db.tenant_tx(tenant) as conn:
            server_id = row["server_id"]
            verifier = await self.vault.unseal(conn, tenant, _label(server_id, "verifier"),
                                               (row["verifier"], row["verifier_nonce"]))
            server = AuthorizationServer.from_json(row["authorization_server"])
            client = await self._stored_client(conn, tenant, server_id, row)
            async with self._http(row["guarded"]) as http:
                tokens = await token_request(http, server, client, {
                    "grant_type": "authorization_code", "code": code,
                    "redirect_uri": row["redirect_uri"], "code_verifier": verifier,
                    "resource": row["resource"]})
            await self._save(conn, tenant, server_id, tokens)
        return tenant, server_id

    # -- calls ---------------------------------------------------------------------------

    async def headers(self, tenant: TenantId, server_id: uuid.UUID, *,
                      refresh: bool = False) -> dict[str, str]:
        """The one call's ``Authorization`` header. ``refresh``: the server refused the
        token the last call sent (401): refresh it whatever its expiry says."""
        async with self._row(tenant, server_id) as (conn, row):
            if row["status"] != "connected":
                raise AuthorizationRequired(f"the tool server is not connected: "
                                            f"{row['reason'] or 'connect it'}")
            expires = row["access_expires_at"]
            lapsed = None
            if refresh or (expires is not None
                           and (expires - row["now"]).total_seconds() < REFRESH_MARGIN_S):
                lapsed = await self._refresh(conn, tenant, server_id, row)
                if lapsed is not None:  # recorded now; said after the commit
                    await conn.fetchval(Q.require, tenant.value, server_id, lapsed, None, False)
                else:
                    fresh = await conn.fetchrow(Q.get, tenant.value, server_id)
                    assert fresh is not None  # locked by this transaction
                    row = fresh
            if lapsed is None:
                token = await self.vault.unseal(conn, tenant, _label(server_id, "access"),
                                                (row["access_token"], row["access_token_nonce"]))
        if lapsed is not None:
            raise AuthorizationRequired(lapsed)
        return {"Authorization": f"Bearer {token}"}

    async def step_up(self, tenant: TenantId, server_id: uuid.UUID, challenge: Challenge) -> None:
        """The server refused a call for want of scope (403 ``insufficient_scope``)."""
        scope = challenge.scope
        async with self._db.tenant_tx(tenant) as conn:
            await conn.fetchval(Q.require, tenant.value, server_id,
                                f"the tool server asks for scope {scope!r}" if scope
                                else "the tool server asks for a broader authorization",
                                scope, True)

    async def lapse(self, tenant: TenantId, server_id: uuid.UUID, reason: str) -> None:
        """The server refuses even a refreshed token: it waits for the tenant."""
        async with self._db.tenant_tx(tenant) as conn:
            await conn.fetchval(Q.require, tenant.value, server_id, reason, None, False)

    async def state(self, tenant: TenantId, server_id: uuid.UUID) -> OAuthState | None:
        async with self._db.tenant_tx(tenant) as conn:
            row = await conn.fetchrow(Q.get, tenant.value, server_id)
        if row is None:
            return None
        return OAuthState(row["status"], row["reason"], row["grant_type"], row["scope"],
                          row["authorization_server"]["issuer"], row["access_expires_at"],
                          row["connected_at"])

    # -- internals -----------------------------------------------------------------------

    def _http(self, guarded: bool) -> contextlib.AbstractAsyncContextManager[http1.HttpClient]:
        """A client for a server's OAuth requests: for one the tenant registered, each
        connection to an address the operator's rules allow (tools/destinations.py)."""
        return _client_for(self._destinations.connect_to if guarded else None)

    @asynccontextmanager
    async def _row(self, tenant: TenantId, server_id: uuid.UUID
                   ) -> AsyncIterator[tuple[Connection, asyncpg.Record]]:
        """The server's row, locked: one worker refreshes a token, the others wait and use
        the new one (a refresh token may be good for one use only)."""
        async with self._db.tenant_tx(tenant) as conn:
            row = await conn.fetchrow(Q.get_for_update, tenant.value, server_id)
            if row is None:
                raise AuthorizationRequired("the tool server has no OAuth connection")
            yield conn, row

    async def _refresh(self, conn: Connection, tenant: TenantId, server_id: uuid.UUID,
                       row: asyncpg.Record) -> str | None:
        """New tokens saved; or, when there is no way to get them without the tenant, why
        (the caller records it)."""
        server = AuthorizationServer.from_json(row["authorization_server"])
        if row["refresh_token"] is None:
            if row["grant_type"] == "client_credentials":  # a new token is one request away
                async with self._http(row["guarded"]) as http:
                    client = await self._stored_client(conn, tenant, server_id, row)
                    form = {"grant_type": "client_credentials", "resource": row["resource"]}
                    await self._save(conn, tenant, server_id,
                                     await token_request(http, server, client, form))
                return None
            return ("the access token expired and the authorization server gave no refresh "
                    "token: connect again")
        refresh = await self.vault.unseal(conn, tenant, _label(server_id, "refresh"),
                                          (row["refresh_token"], row["refresh_token_nonce"]))
        client = await self._stored_client(conn, tenant, server_id, row)
        try:
            async with self._http(row["guarded"]) as http:
                tokens = await token_request(http, server, client, {
                    "grant_type": "refresh_token", "refresh_token": refresh,
                    "resource": row["resource"]})
        except TokenRefused as exc:
            return (f"the authorization server refused to refresh the token ({exc.error}): "
                    "connect again")
        await self._save(conn, tenant, server_id, tokens)
        return None

    async def _client(self, conn: Connection, tenant: TenantId, server_id: uuid.UUID,
                      row: asyncpg.Record, server: AuthorizationServer,
                      http: http1.HttpClient, redirect_uri: str) -> OAuthClient:
        if row["client_id"] is not None:
            return await self._stored_client(conn, tenant, server_id, row)
        client = await register_client(http, server, redirect_uri, grant=row["grant_type"])
        sealed: tuple[bytes | None, bytes | None] = (None, None)
        if client.client_secret is not None:
            sealed = await self.vault.seal(conn, tenant, _label(server_id, "client"),
                                           client.client_secret)
        await conn.execute(Q.set_client, tenant.value, server_id, client.client_id,
                           client.auth_method, *sealed)
        return client

    async def _stored_client(self, conn: Connection, tenant: TenantId, server_id: uuid.UUID,
                             row: asyncpg.Record) -> OAuthClient:
        secret = None
        if row["client_secret"] is not None:
            secret = await self.vault.unseal(conn, tenant, _label(server_id, "client"),
                                             (row["client_secret"], row["client_secret_nonce"]))
        return OAuthClient(row["client_id"], secret, row["client_auth_method"])

    async def _save(self, conn: Connection, tenant: TenantId, server_id: uuid.UUID,
                    tokens: Tokens) -> None:
        access = await self.vault.seal(conn, tenant, _label(server_id, "access"),
                                       tokens.access_token)
        refresh: tuple[bytes | None, bytes | None] = (None, None)
        if tokens.refresh_token is not None:
            refresh = await self.vault.seal(conn, tenant, _label(server_id, "refresh"),
                                            tokens.refresh_token)
        await conn.execute(Q.save_tokens, tenant.value, server_id, *access, tokens.expires_in,
                           *refresh)


async def connected_now(conn: Connection, tenant: TenantId, server_id: uuid.UUID) -> bool:
    """Whether the server's connection is connected, its row share-locked for the rest of
    ``conn``'s transaction: a run that is about to wait for it (runs/waiting.py) reads this
    before it locks its own row, as the connecting transaction does."""
    return bool(await conn.fetchval(Q.connected_for_share, tenant.value, server_id))


def _label(server_id: uuid.UUID, what: str) -> str:
    return f"oauth/{server_id}/{what}"


def _tenant_of(state: str) -> TenantId:
    prefix, dot, _ = state.partition(".")
    try:
        if not dot:
            raise ValueError
        return TenantId.parse(prefix)
    except ValueError:
        raise NotFound(NO_FLOW) from None


@asynccontextmanager
async def _client_for(connect_to: http1.ConnectTo | None) -> AsyncIterator[http1.HttpClient]:
    """A client for one connection's few requests (OAuth requests are rare: registration,
    connecting, a refresh an hour); no redirect is followed."""
    http = http1.HttpClient(max_per_origin=2, connect_timeout=10.0, max_body=MAX_DOCUMENT_BYTES,
                            connect_to=connect_to)
    try:
        yield http
    finally:
        await http.aclose()
