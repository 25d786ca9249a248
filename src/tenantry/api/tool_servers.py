"""A tenant's MCP tool servers, as the operator manages them (``/admin/v1``): register (its
tool list read and pinned), list, read, re-pin, remove; and an OAuth server's connection
(tools/oauth/): ``connect`` gives the URL for the browser of whoever authorizes it, and the
authorization server sends that browser back to ``/oauth/callback``, which takes no key
(the ``state`` it carries names the tenant and the authorization asked for, once).

The actions themselves are here too, for the tenant's own routes (``api/own_tool_servers.py``)
to share: the routes differ in who calls and which tenant, and in that a tenant's own
registration is held to the operator's rules for where its server may be."""

from __future__ import annotations

import html
import re
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import HTMLResponse

from tenantry.api.admin import TENANT_NOT_FOUND, VAULT_ERROR
from tenantry.api.auth import operator, platform
from tenantry.api.fields import LABEL_RE, Text
from tenantry.api.links import links, to
from tenantry.api.pagination import PageRequest, keyed_by, matching
from tenantry.api.params import parse_or_404
from tenantry.api.platform import Platform
from tenantry.api.tool_server_bodies import (
    ConnectOut,
    OAuthOut,
    RegisterToolServer,
    ToolServerList,
    ToolServerOut,
)
from tenantry.errors import Conflict, NotFound, ToolUnavailable, ValidationFailed
from tenantry.ids import TenantId
from tenantry.tenants import service
from tenantry.tools import servers
from tenantry.tools.oauth.connections import PreRegistered, ToolServerAuth
from tenantry.tools.oauth.discovery import parse_challenge

router = APIRouter(prefix="/admin/v1", tags=["operator"], dependencies=[Depends(operator)])
#: Where authorization servers send the browser back: no key (browsers carry none).
callback_router = APIRouter(tags=["oauth"])

CALLBACK_PATH = "/oauth/callback"
_LABEL = re.compile(LABEL_RE)
_SERVER_CURSOR = matching(LABEL_RE)
UNREACHABLE: dict[int | str, dict[str, Any]] = {502: {
    "description": "`tool_unavailable`: the server did not answer tools/list"}}
OAUTH_FAILED: dict[int | str, dict[str, Any]] = {422: {
    "description": "`tool_server_authorization_failed`: the server's OAuth metadata, its "
                   "authorization server or a token request said no, or nothing readable"}}
CONNECT_CONFLICT: dict[int | str, dict[str, Any]] = {409: {
    "description": "`conflict`: not an OAuth server, or it refused the same scope too often"}}


# -- the actions, for both the operator's routes and the tenant's -----------------------


def auth_of(p: Platform) -> ToolServerAuth:
    """OAuth connections, under the operator's rules for tenants' own servers."""
    return ToolServerAuth(p.db, p.vault, p.mcp.destinations)


async def server_out(p: Platform, tenant: TenantId, s: servers.ToolServer) -> ToolServerOut:
    oauth = None
    if s.oauth:
        state = await auth_of(p).state(tenant, s.server_id)
        oauth = OAuthOut(**state.to_json()) if state is not None else None
    return ToolServerOut(
        server_id=str(s.server_id), name=s.name, url=s.url,
        honours_idempotency_keys=s.honours_idempotency_keys, secret=s.secret_ref,
        tools=sorted(s.tool_names()), tools_sha256=s.tools_sha256.hex(),
        call_timeout_seconds=s.call_timeout_seconds,
        registered_by="tenant" if s.guarded else "operator", created_at=s.created_at,
        oauth=oauth)


async def register(p: Platform, tenant: TenantId, body: RegisterToolServer, *,
                   by_tenant: bool) -> ToolServerOut:
    """Register ``body``'s server: its tool list read now and pinned, or, for a server that
    asks for an OAuth token, waiting to be connected. ``by_tenant``: the tenant's own, held
    to the operator's rules for where it may be (nothing is sent to a URL they refuse)."""
    headers = await _credential(p, tenant, body.secret)
    oauth = None
    if body.oauth is not None:
        client = (PreRegistered(body.oauth.client_id, body.oauth.client_secret)
                  if body.oauth.client_id else None)
        oauth = servers.OAuthRegistration(body.oauth.grant, client)
    server = await servers.register(
        p.db, p.mcp, tenant, name=body.name, url=body.url,
        honours_idempotency_keys=body.honours_idempotency_keys, secret_ref=body.secret,
        headers=headers, auth=auth_of(p), oauth=oauth,
        call_timeout_seconds=body.call_timeout_seconds,
        destinations=p.mcp.destinations if by_tenant else None)
    return await server_out(p, tenant, server)


async def repin(p: Platform, tenant: TenantId, name: str) -> ToolServerOut:
    server = await _server(p, tenant, name)
    headers = await _headers(p, tenant, server)
    return await server_out(p, tenant, await servers.repin(p.db, p.mcp, tenant, name, headers))


async def connect(p: Platform, tenant: TenantId, name: str, request: Request) -> ConnectOut:
    server = await _server(p, tenant, name)
    if not server.oauth:
        raise Conflict("This tool server does not authorize with OAuth.")
    url = await auth_of(p).connect(tenant, server.server_id, callback_url(p, request))
    if url is None:
        server = await _pin_first(p, tenant, server)
    return ConnectOut(authorization_url=url, server=await server_out(p, tenant, server))


async def page_of(p: Platform, tenant: TenantId, page: PageRequest) -> ToolServerList:
    found = await servers.servers_page(p.db, tenant, after=page.position(_SERVER_CURSOR),
                                       limit=page.limit)
    return ToolServerList(data=[await server_out(p, tenant, s) for s in found],
                          next_cursor=page.next_cursor(found, lambda s: s.name))


async def one(p: Platform, tenant: TenantId, name: str) -> ToolServerOut:
    return await server_out(p, tenant, await _server(p, tenant, name))


async def remove(p: Platform, tenant: TenantId, name: str) -> None:
    if not _LABEL.fullmatch(name):
        raise NotFound(servers.SERVER_NOT_FOUND)
    await servers.remove(p.db, tenant, name)


def callback_url(p: Platform, request: Request) -> str:
    """This platform's callback as the browser reaches it: the public URL, if the operator
    set one, else the address this request came to."""
    base = p.settings.public_url or str(request.base_url)
    return base.rstrip("/") + CALLBACK_PATH


# -- the operator's routes ----------------------------------------------------------------

_THE_SERVER = {"tenant_id": "$request.path.tenant_id", "name": "$response.body#/name"}


@router.post("/tenants/{tenant_id}/tool-servers", status_code=201, response_model=ToolServerOut,
             responses={201: links(
                 GetToolServer=to("GET", "/admin/v1/tenants/{tenant_id}/tool-servers/{name}",
                                  "The server just registered.", parameters=_THE_SERVER),
                 Repin=to("POST", "/admin/v1/tenants/{tenant_id}/tool-servers/{name}/pin",
                          "Accept its tool list again.", parameters=_THE_SERVER)),
                 **UNREACHABLE, **OAUTH_FAILED, **VAULT_ERROR})
async def register_tool_server(
    tenant_id: str, body: RegisterToolServer, p: Platform = Depends(platform)
) -> ToolServerOut:
    """Register an MCP server for a tenant. Its tool list is read now and pinned; a server
    that asks for an OAuth token is registered waiting to be connected (``oauth``)."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    await service.get_tenant(p.db, tenant)  # 404 before calling anything
    return await register(p, tenant, body, by_tenant=False)


@router.post("/tenants/{tenant_id}/tool-servers/{name}/pin", response_model=ToolServerOut,
             responses={**UNREACHABLE, **VAULT_ERROR})
async def repin_tool_server(
    tenant_id: str, name: str, p: Platform = Depends(platform)
) -> ToolServerOut:
    """Accept the server's current tool list as reviewed (after it changed)."""
    return await repin(p, parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND), name)


@router.post("/tenants/{tenant_id}/tool-servers/{name}/connect", response_model=ConnectOut,
             responses={**CONNECT_CONFLICT, **UNREACHABLE, **OAUTH_FAILED, **VAULT_ERROR})
async def connect_tool_server(
    tenant_id: str, name: str, request: Request, p: Platform = Depends(platform)
) -> ConnectOut:
    """Start (or renew) an OAuth server's authorization: the URL to open in a browser, which
    comes back to this platform's ``/oauth/callback``. A client credentials server is
    connected at once. Its first connection reads and pins its tool list; runs waiting for
    it go on once it is connected."""
    return await connect(p, parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND), name, request)


@router.get("/tenants/{tenant_id}/tool-servers", response_model=ToolServerList)
async def list_tool_servers(
    tenant_id: str, page: PageRequest = Depends(keyed_by(LABEL_RE)),
    p: Platform = Depends(platform)
) -> ToolServerList:
    """The tenant's tool servers, ordered by name."""
    return await page_of(p, parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND), page)


@router.get("/tenants/{tenant_id}/tool-servers/{name}", response_model=ToolServerOut)
async def get_tool_server(
    tenant_id: str, name: str, p: Platform = Depends(platform)
) -> ToolServerOut:
    return await one(p, parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND), name)


@router.delete("/tenants/{tenant_id}/tool-servers/{name}", status_code=204,
               response_class=Response)
async def remove_tool_server(
    tenant_id: str, name: str, p: Platform = Depends(platform)
) -> Response:
    """Remove the server and its OAuth connection. Agent versions published with its tools
    keep their pins: their calls are refused (the model is told) until a server serving
    those tools is registered again; runs waiting for its connection go on that way."""
    await remove(p, parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND), name)
    return Response(status_code=204)


# -- the authorization server's callback ----------------------------------------------------


@callback_router.get(CALLBACK_PATH, response_class=HTMLResponse,
                     responses={403: {"description": "`authorization_denied`: the "
                                                     "authorization server sent no code"},
                                404: {"description": "`not_found`: no authorization waits "
                                                     "under this state (or it was used)"},
                                409: {"description": "`conflict`: it took too long"},
                                **OAUTH_FAILED, **UNREACHABLE})
async def oauth_callback(
    state: Text = Query(default="", max_length=200),
    code: Text | None = Query(default=None, max_length=4096),
    error: Text | None = Query(default=None, max_length=200),
    p: Platform = Depends(platform),
) -> HTMLResponse:
    """Where an authorization server sends the browser back: the code becomes the server's
    tokens, sealed in the tenant's vault (its ``state`` is taken once)."""
    auth = auth_of(p)
    tenant, server_id = await auth.callback(state, code, error)
    found = next((s for s in await servers.list_servers(p.db, tenant)
                  if s.server_id == server_id), None)
    if found is None:  # removed meanwhile
        raise NotFound(servers.SERVER_NOT_FOUND)
    await _pin_first(p, tenant, found)
    now = await auth.state(tenant, server_id)
    said = ("is connected. You can close this window." if now and now.status == "connected"
            else f"needs another authorization: {now.reason if now else 'connect again'}.")
    return HTMLResponse(f"<!doctype html><title>{html.escape(found.name)}</title>"
                        f"<p>{html.escape(found.name)} {html.escape(said)}</p>")


# -- internals ------------------------------------------------------------------------------


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
        auth = auth_of(p)
        if exc.extra.get("http_status") == 403 or challenge.error == "insufficient_scope":
            await auth.step_up(tenant, server.server_id, challenge)
        else:
            await auth.lapse(tenant, server.server_id,
                             "the tool server refused the new token: connect again")
        return server


async def _server(p: Platform, tenant: TenantId, name: str) -> servers.ToolServer:
    if not _LABEL.fullmatch(name):  # not a name a server can have (and never a NUL)
        raise NotFound(servers.SERVER_NOT_FOUND)
    return await servers.get_server(p.db, tenant, name)


async def _headers(p: Platform, tenant: TenantId, server: servers.ToolServer) -> dict[str, str]:
    if server.oauth:
        return await auth_of(p).headers(tenant, server.server_id)
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
