"""What can be done with a tenant's tool servers, whoever asks: the operator's routes
(``api/tool_servers.py``), the tenant's own (``api/own_tool_servers.py``) and the operator
console (``console/pages/tool_servers.py``). They differ in who calls and for which
tenant, and in that a tenant's own registration is held to the operator's rules for where
its server may be; the console cannot reach the operator's routes' module (it imports the
admin module, which imports the console), so the actions live here, below all three."""

from __future__ import annotations

import re

from fastapi import Request

from tenantry.api.fields import LABEL_RE
from tenantry.api.pagination import PageRequest, matching
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
from tenantry.tools import servers
from tenantry.tools.oauth.connections import PreRegistered, ToolServerAuth
from tenantry.tools.oauth.discovery import parse_challenge

#: Where authorization servers send the browser back (``api/tool_servers.py`` serves it).
CALLBACK_PATH = "/oauth/callback"
_LABEL = re.compile(LABEL_RE)
_SERVER_CURSOR = matching(LABEL_RE)


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
        registered_by=s.registered_by, created_at=s.created_at,
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
        server = await pin_first(p, tenant, server)
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


async def pin_first(p: Platform, tenant: TenantId,
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
