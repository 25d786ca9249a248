"""A tenant's MCP tool servers, as the operator registers them (``/admin/v1``): register
(its tool list read and pinned), list, read, re-pin; and an OAuth server's connection
(tools/oauth/): ``connect`` gives the URL for the browser of whoever authorizes it, and the
authorization server sends that browser back to ``/oauth/callback``, which takes no key
(the ``state`` it carries names the tenant and the authorization asked for, once)."""

from __future__ import annotations

import html
import re
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field

from tenantry.api.admin import TENANT_NOT_FOUND, VAULT_ERROR
from tenantry.api.auth import operator, platform
from tenantry.api.fields import LABEL_RE, Body, HttpUrl, Label, SecretName, Text
from tenantry.api.links import links, to
from tenantry.api.pagination import PageRequest, keyed_by, matching
from tenantry.api.params import parse_or_404
from tenantry.api.platform import Platform
from tenantry.errors import Conflict, NotFound, ToolUnavailable, ValidationFailed
from tenantry.ids import TenantId
from tenantry.tenants import service
from tenantry.tools import servers
from tenantry.tools.oauth.connections import PreRegistered, ToolServerAuth
from tenantry.tools.oauth.discovery import parse_challenge

router = APIRouter(prefix="/admin/v1", tags=["operator"], dependencies=[Depends(operator)])
#: Where authorization servers send the browser back: no key (browsers carry none).
callback_router = APIRouter(tags=["oauth"])

SERVER_NOT_FOUND = "No tool server with this name."
CALLBACK_PATH = "/oauth/callback"
_LABEL = re.compile(LABEL_RE)
_SERVER_CURSOR = matching(LABEL_RE)
_UNREACHABLE: dict[int | str, dict[str, Any]] = {502: {
    "description": "`tool_unavailable`: the server did not answer tools/list"}}
_OAUTH_FAILED: dict[int | str, dict[str, Any]] = {422: {
    "description": "`tool_server_authorization_failed`: the server's OAuth metadata, its "
                   "authorization server or a token request said no, or nothing readable"}}


class OAuthIn(Body):
    """How the platform authorizes with a server that answers 401 with a Bearer challenge
    (the MCP authorization spec). Without it: the authorization code grant, with a client
    registered dynamically when connecting."""

    grant: Literal["authorization_code", "client_credentials"] = "authorization_code"
    client_id: Text | None = Field(default=None, min_length=1, max_length=512,
                                   description="A client the authorization server issued "
                                               "beforehand (needed for client_credentials).")
    client_secret: SecretName | None = Field(
        default=None, description="Name of the vault secret holding that client's secret.")


class RegisterToolServer(Body):
    name: Label
    url: HttpUrl = Field(description="The MCP server's streamable-HTTP endpoint.")
    honours_idempotency_keys: bool = Field(
        description="Whether the server performs a call once per Idempotency-Key. Calls to "
                    "servers that do not are never retried after an ambiguous crash.")
    secret: SecretName | None = Field(
        default=None,
        description="Name of a vault secret (PUT .../secrets/{name}) sent as "
                    "`Authorization: Bearer <value>` on each call to this server only.")
    oauth: OAuthIn | None = None
    call_timeout_seconds: int = Field(
        default=servers.DEFAULT_CALL_TIMEOUT_SECONDS, ge=1, le=servers.MAX_CALL_TIMEOUT_SECONDS,
        description="How long one call to this server may take, retries included, before the "
                    "model is told it timed out. Raise it for tools that take minutes.")


class OAuthOut(BaseModel):
    """An OAuth server's connection: never a token."""

    status: Literal["authorization_required", "connected"]
    reason: str | None
    grant: str
    scope: str | None
    issuer: str
    expires_at: datetime | None = Field(description="When the access token expires.")
    connected_at: datetime | None


class ToolServerOut(BaseModel):
    server_id: str
    name: str
    url: str
    honours_idempotency_keys: bool
    secret: str | None
    tools: list[str]
    tools_sha256: str
    call_timeout_seconds: int
    created_at: datetime
    oauth: OAuthOut | None = Field(
        default=None, description="Set for a server that authorizes with OAuth: until it is "
                                  "connected (POST …/connect) it has no tools.")


class ToolServerList(BaseModel):
    data: list[ToolServerOut]
    next_cursor: str | None


class ConnectOut(BaseModel):
    authorization_url: str | None = Field(
        description="Where to send the browser of whoever authorizes the platform; null "
                    "when it is connected already (the client credentials grant).")
    server: ToolServerOut


async def _server_out(p: Platform, tenant: TenantId, s: servers.ToolServer) -> ToolServerOut:
    oauth = None
    if s.oauth:
        state = await ToolServerAuth(p.db, p.vault).state(tenant, s.server_id)
        oauth = OAuthOut(**state.to_json()) if state is not None else None
    return ToolServerOut(
        server_id=str(s.server_id), name=s.name, url=s.url,
        honours_idempotency_keys=s.honours_idempotency_keys, secret=s.secret_ref,
        tools=sorted(s.tool_names()), tools_sha256=s.tools_sha256.hex(),
        call_timeout_seconds=s.call_timeout_seconds, created_at=s.created_at, oauth=oauth)


_THE_SERVER = {"tenant_id": "$request.path.tenant_id", "name": "$response.body#/name"}


@router.post("/tenants/{tenant_id}/tool-servers", status_code=201, response_model=ToolServerOut,
             responses={201: links(
                 GetToolServer=to("GET", "/admin/v1/tenants/{tenant_id}/tool-servers/{name}",
                                  "The server just registered.", parameters=_THE_SERVER),
                 Repin=to("POST", "/admin/v1/tenants/{tenant_id}/tool-servers/{name}/pin",
                          "Accept its tool list again.", parameters=_THE_SERVER)),
                 **_UNREACHABLE, **_OAUTH_FAILED, **VAULT_ERROR})
async def register_tool_server(
    tenant_id: str, body: RegisterToolServer, p: Platform = Depends(platform)
) -> ToolServerOut:
    """Register an MCP server for a tenant. Its tool list is read now and pinned; a server
    that asks for an OAuth token is registered waiting to be connected (``oauth``)."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    await service.get_tenant(p.db, tenant)  # 404 before calling anything
    headers = await _credential(p, tenant, body.secret)
    oauth = None
    if body.oauth is not None:
        client = (PreRegistered(body.oauth.client_id, body.oauth.client_secret)
                  if body.oauth.client_id else None)
        oauth = servers.OAuthRegistration(body.oauth.grant, client)
    server = await servers.register(p.db, p.mcp, tenant, name=body.name, url=body.url,
                                    honours_idempotency_keys=body.honours_idempotency_keys,
                                    secret_ref=body.secret, headers=headers,
                                    auth=ToolServerAuth(p.db, p.vault), oauth=oauth,
                                    call_timeout_seconds=body.call_timeout_seconds)
    return await _server_out(p, tenant, server)


@router.post("/tenants/{tenant_id}/tool-servers/{name}/pin", response_model=ToolServerOut,
             responses={**_UNREACHABLE, **VAULT_ERROR})
async def repin_tool_server(
    tenant_id: str, name: str, p: Platform = Depends(platform)
) -> ToolServerOut:
    """Accept the server's current tool list as reviewed (after it changed)."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    server = await _server(p, tenant, name)
    headers = await _headers(p, tenant, server)
    return await _server_out(p, tenant, await servers.repin(p.db, p.mcp, tenant, name, headers))


@router.post("/tenants/{tenant_id}/tool-servers/{name}/connect", response_model=ConnectOut,
             responses={409: {"description": "`conflict`: not an OAuth server, or it refused "
                                             "the same scope too often"},
                        **_UNREACHABLE, **_OAUTH_FAILED, **VAULT_ERROR})
async def connect_tool_server(
    tenant_id: str, name: str, request: Request, p: Platform = Depends(platform)
) -> ConnectOut:
    """Start (or renew) an OAuth server's authorization: the URL to open in a browser, which
    comes back to this platform's ``/oauth/callback``. A client credentials server is
    connected at once. Its first connection reads and pins its tool list."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    server = await _server(p, tenant, name)
    if not server.oauth:
        raise Conflict("This tool server does not authorize with OAuth.")
    auth = ToolServerAuth(p.db, p.vault)
    url = await auth.connect(tenant, server.server_id, _callback_url(p, request))
    if url is None:
        server = await _pin_first(p, tenant, server)
    return ConnectOut(authorization_url=url, server=await _server_out(p, tenant, server))


@router.get("/tenants/{tenant_id}/tool-servers", response_model=ToolServerList)
async def list_tool_servers(
    tenant_id: str, page: PageRequest = Depends(keyed_by(LABEL_RE)),
    p: Platform = Depends(platform)
) -> ToolServerList:
    """The tenant's tool servers, ordered by name."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    found = await servers.servers_page(p.db, tenant, after=page.position(_SERVER_CURSOR),
                                       limit=page.limit)
    return ToolServerList(data=[await _server_out(p, tenant, s) for s in found],
                          next_cursor=page.next_cursor(found, lambda s: s.name))


@router.get("/tenants/{tenant_id}/tool-servers/{name}", response_model=ToolServerOut)
async def get_tool_server(
    tenant_id: str, name: str, p: Platform = Depends(platform)
) -> ToolServerOut:
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    return await _server_out(p, tenant, await _server(p, tenant, name))


@callback_router.get(CALLBACK_PATH, response_class=HTMLResponse,
                     responses={403: {"description": "`authorization_denied`: the "
                                                     "authorization server sent no code"},
                                404: {"description": "`not_found`: no authorization waits "
                                                     "under this state (or it was used)"},
                                409: {"description": "`conflict`: it took too long"},
                                **_OAUTH_FAILED, **_UNREACHABLE})
async def oauth_callback(
    state: Text = Query(default="", max_length=200),
    code: Text | None = Query(default=None, max_length=4096),
    error: Text | None = Query(default=None, max_length=200),
    p: Platform = Depends(platform),
) -> HTMLResponse:
    """Where an authorization server sends the browser back: the code becomes the server's
    tokens, sealed in the tenant's vault (its ``state`` is taken once)."""
    tenant, server_id = await ToolServerAuth(p.db, p.vault).callback(state, code, error)
    found = next((s for s in await servers.list_servers(p.db, tenant)
                  if s.server_id == server_id), None)
    if found is None:  # removed meanwhile
        raise NotFound(SERVER_NOT_FOUND)
    await _pin_first(p, tenant, found)
    now = await ToolServerAuth(p.db, p.vault).state(tenant, server_id)
    said = ("is connected. You can close this window." if now and now.status == "connected"
            else f"needs another authorization: {now.reason if now else 'connect again'}.")
    return HTMLResponse(f"<!doctype html><title>{html.escape(found.name)}</title>"
                        f"<p>{html.escape(found.name)} {html.escape(said)}</p>")


async def _pin_first(p: Platform, tenant: TenantId,
                     server: servers.ToolServer) -> servers.ToolServer:
    """The first list a new connection's token reads, pinned. A server that refuses even
    that token for want of scope waits for a broader authorization (``oauth.reason``)."""
    headers = await _headers(p, tenant, server)
    try:
        return await servers.pin_first_list(p.db, p.mcp, tenant, server, headers)
    except ToolUnavailable as exc:
        if exc.extra.get("reason") != "unauthorized":
            raise
        challenge = parse_challenge(str(exc.extra.get("www_authenticate", "")))
        auth = ToolServerAuth(p.db, p.vault)
        if exc.extra.get("http_status") == 403 or challenge.error == "insufficient_scope":
            await auth.step_up(tenant, server.server_id, challenge)
        else:
            await auth.lapse(tenant, server.server_id,
                             "the tool server refused the new token: connect again")
        return server


def _callback_url(p: Platform, request: Request) -> str:
    """This platform's callback as the browser reaches it: the public URL, if the operator
    set one, else the address this request came to."""
    base = p.settings.public_url or str(request.base_url)
    return base.rstrip("/") + CALLBACK_PATH


async def _server(p: Platform, tenant: TenantId, name: str) -> servers.ToolServer:
    if not _LABEL.fullmatch(name):  # not a name a server can have (and never a NUL)
        raise NotFound(SERVER_NOT_FOUND)
    return await servers.get_server(p.db, tenant, name)


async def _headers(p: Platform, tenant: TenantId, server: servers.ToolServer) -> dict[str, str]:
    if server.oauth:
        return await ToolServerAuth(p.db, p.vault).headers(tenant, server.server_id)
    return await _credential(p, tenant, server.secret_ref)


async def _credential(p: Platform, tenant: TenantId, secret: str | None) -> dict[str, str]:
    if secret is None:
        return {}
    if p.vault is None:
        raise ValidationFailed("secret: the vault is not configured (TENANTRY_MASTER_KEY)")
    try:
        value = await p.vault.get(tenant, secret)
    except NotFound:
        raise Conflict(f"secret: no secret named {secret!r} for this tenant",
                       field="secret") from None
    return {"Authorization": f"Bearer {value}"}
