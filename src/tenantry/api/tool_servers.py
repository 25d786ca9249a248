"""A tenant's MCP tool servers, as the operator manages them (``/admin/v1``): register (its
tool list read and pinned), list, read, re-pin, remove; and an OAuth server's connection
(tools/oauth/): ``connect`` gives the URL for the browser of whoever authorizes it, and the
authorization server sends that browser back to ``/oauth/callback``, which takes no key
(the ``state`` it carries names the tenant and the authorization asked for, once).

The actions themselves, which the tenant's own routes (``api/own_tool_servers.py``) and
the console share, are in ``api/tool_server_actions.py``."""

from __future__ import annotations

import html
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import HTMLResponse

from tenantry.api.admin import TENANT_NOT_FOUND, VAULT_ERROR
from tenantry.api.auth import PlatformDep, operator
from tenantry.api.fields import LABEL_RE, Text
from tenantry.api.links import links, to
from tenantry.api.pagination import PageRequest, keyed_by
from tenantry.api.params import parse_or_404
from tenantry.api.tool_server_actions import (
    CALLBACK_PATH,
    auth_of,
    connect,
    one,
    page_of,
    pin_first,
    register,
    remove,
    repin,
)
from tenantry.api.tool_server_bodies import (
    ConnectOut,
    RegisterToolServer,
    ToolServerList,
    ToolServerOut,
)
from tenantry.errors import NotFound
from tenantry.ids import TenantId
from tenantry.tenants import service
from tenantry.tools import servers

router = APIRouter(prefix="/admin/v1", tags=["operator"], dependencies=[Depends(operator)])
#: Where authorization servers send the browser back: no key (browsers carry none).
callback_router = APIRouter(tags=["oauth"])

UNREACHABLE: dict[int | str, dict[str, Any]] = {502: {
    "description": "`tool_unavailable`: the server did not answer tools/list"}}
OAUTH_FAILED: dict[int | str, dict[str, Any]] = {422: {
    "description": "`tool_server_authorization_failed`: the server's OAuth metadata, its "
                   "authorization server or a token request said no, or nothing readable"}}
CONNECT_CONFLICT: dict[int | str, dict[str, Any]] = {409: {
    "description": "`conflict`: not an OAuth server, or it refused the same scope too often"}}


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
    tenant_id: str, body: RegisterToolServer, p: PlatformDep,
) -> ToolServerOut:
    """Register an MCP server for a tenant. Its tool list is read now and pinned; a server
    that asks for an OAuth token is registered waiting to be connected (``oauth``)."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    await service.get_tenant(p.db, tenant)  # 404 before calling anything
    return await register(p, tenant, body, by_tenant=False)


@router.post("/tenants/{tenant_id}/tool-servers/{name}/pin", response_model=ToolServerOut,
             responses={**UNREACHABLE, **VAULT_ERROR})
async def repin_tool_server(tenant_id: str, name: str, p: PlatformDep) -> ToolServerOut:
    """Accept the server's current tool list as reviewed (after it changed)."""
    return await repin(p, parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND), name)


@router.post("/tenants/{tenant_id}/tool-servers/{name}/connect", response_model=ConnectOut,
             responses={**CONNECT_CONFLICT, **UNREACHABLE, **OAUTH_FAILED, **VAULT_ERROR})
async def connect_tool_server(
    tenant_id: str, name: str, request: Request, p: PlatformDep,
) -> ConnectOut:
    """Start or renew an OAuth server's authorization: the URL to open in a browser, which
    comes back to this platform's ``/oauth/callback``. A client credentials server is
    connected at once. Its first connection reads and pins its tool list; runs waiting for
    it go on once it is connected."""
    return await connect(p, parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND), name, request)


_ToolServerPage = Annotated[PageRequest, Depends(keyed_by(LABEL_RE))]


@router.get("/tenants/{tenant_id}/tool-servers", response_model=ToolServerList)
async def list_tool_servers(
    tenant_id: str, page: _ToolServerPage, p: PlatformDep,
) -> ToolServerList:
    """The tenant's tool servers, ordered by name."""
    return await page_of(p, parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND), page)


@router.get("/tenants/{tenant_id}/tool-servers/{name}", response_model=ToolServerOut)
async def get_tool_server(tenant_id: str, name: str, p: PlatformDep) -> ToolServerOut:
    """Get a tenant's tool server.

    Its URL, how it authenticates (the secret's name, or its OAuth connection), whether it
    honours idempotency keys, and the tool list pinned at registration."""
    return await one(p, parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND), name)


@router.delete("/tenants/{tenant_id}/tool-servers/{name}", status_code=204,
               response_class=Response)
async def remove_tool_server(tenant_id: str, name: str, p: PlatformDep) -> Response:
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
    p: PlatformDep, state: Text = Query(default="", max_length=200),
    code: Text | None = Query(default=None, max_length=4096),
    error: Text | None = Query(default=None, max_length=200),
) -> HTMLResponse:
    """Where an authorization server sends the browser back: the code becomes the server's
    tokens, sealed in the tenant's vault (its ``state`` is taken once)."""
    auth = auth_of(p)
    tenant, server_id = await auth.callback(state, code, error)
    found = next((s for s in await servers.list_servers(p.db, tenant)
                  if s.server_id == server_id), None)
    if found is None:  # removed meanwhile
        raise NotFound(servers.SERVER_NOT_FOUND)
    await pin_first(p, tenant, found)
    now = await auth.state(tenant, server_id)
    said = ("is connected. You can close this window." if now and now.status == "connected"
            else f"needs another authorization: {now.reason if now else 'connect again'}.")
    return HTMLResponse(f"<!doctype html><title>{html.escape(found.name)}</title>"
                        f"<p>{html.escape(found.name)} {html.escape(said)}</p>")
