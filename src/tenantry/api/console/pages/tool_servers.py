"""A tenant's tool servers: each one's URL, pinned tools and, for an OAuth server, its
connection (connected, or waiting for an authorization and why; when its token expires)
and how many of the tenant's runs wait for it. *Connect* starts an OAuth server's
authorization as the operator API's ``…/connect`` does (api/tool_server_actions.py) and sends
the operator's browser to the authorization server, which sends it back to the platform's
``/oauth/callback``; the runs waiting for the server then go on by themselves."""

from __future__ import annotations

import re
from urllib.parse import urlencode

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from tenantry.api import tool_server_actions
from tenantry.api.console import action_log as actions
from tenantry.api.console import reads
from tenantry.api.console.action_log import Action
from tenantry.api.console.view import (
    HEADERS,
    PREFIX,
    SignedInPage,
    SupportForm,
)
from tenantry.api.fields import LABEL_RE
from tenantry.errors import NotFound, TenantryError
from tenantry.ids import TenantId
from tenantry.tenants import service as tenants
from tenantry.tools import servers

router = APIRouter()
_TENANT_NOT_FOUND = "No tenant with this id."
_NAME = re.compile(LABEL_RE)


@router.get("/tenants/{tenant_id}/tool-servers")
async def tool_servers(tenant_id: str, v: SignedInPage) -> Response:
    q = v.request.query_params
    after = q.get("after") if _NAME.fullmatch(q.get("after", "")) else None
    try:
        tenant = TenantId.parse(tenant_id)
        found = await tenants.get_tenant(v.db, tenant)
    except (ValueError, NotFound):
        return v.not_found(_TENANT_NOT_FOUND)
    rows = await reads.tool_servers_of(v.db, tenant, after=after)
    base = f"{PREFIX}/tenants/{tenant}/tool-servers"
    more = f"{base}?{urlencode({'after': rows[-1].name})}" if len(rows) == reads.PAGE else None
    # Each Connect form's answer redirects to its server's authorization endpoint, which
    # then sends the browser back to the callback: the page's forms may lead to both.
    leads_to = [r.authorization_endpoint for r in rows if r.authorization_endpoint]
    if leads_to:
        leads_to.append(tool_server_actions.callback_url(v.platform, v.request))
    return v.render("tool_servers.html", title=f"Tenant {found.name}: tool servers",
                    tenant=found, rows=rows, more=more, base=base,
                    connected=q.get("connected") if _NAME.fullmatch(q.get("connected", ""))
                    else None, form_origins=leads_to)


@router.post("/tenants/{tenant_id}/tool-servers/{name}/connect")
async def connect(tenant_id: str, name: str, v: SupportForm) -> Response:
    """Start (or renew) the server's authorization: a redirect to its authorization server,
    or, for a client credentials server, connected at once and back to the page."""
    try:
        tenant = TenantId.parse(tenant_id)
    except ValueError:
        return v.not_found(servers.SERVER_NOT_FOUND)
    actor = v.actor
    try:
        started = await tool_server_actions.connect(v.platform, tenant, name, v.request)
    except NotFound:
        return v.not_found(servers.SERVER_NOT_FOUND)
    except TenantryError as exc:  # not OAuth, a scope refused too often, discovery failed
        await actions.record(v.console_db, actor=actor, action=Action.CONNECT_TOOL_SERVER,
                             tenant=tenant, target=name, outcome=f"refused: {exc.detail}")
        return v.render("error.html", status=exc.status, title="Not connected",
                        message=exc.detail)
    page = f"{PREFIX}/tenants/{tenant}/tool-servers"
    if started.authorization_url is None:  # client credentials: no browser needed
        oauth = started.server.oauth
        connected = oauth is not None and oauth.status == "connected"
        # Its token may still be refused by the server itself: its row then says why.
        await actions.record(v.console_db, actor=actor, action=Action.CONNECT_TOOL_SERVER,
                             tenant=tenant, target=name,
                             detail="connected with its client" if connected else
                             f"its client's token was refused: {oauth.reason if oauth else ''}")
        return RedirectResponse(f"{page}?{urlencode({'connected': name})}" if connected
                                else page, status_code=303, headers=HEADERS)
    await actions.record(v.console_db, actor=actor, action=Action.CONNECT_TOOL_SERVER,
                         tenant=tenant, target=name,
                         detail="sent to its authorization server")
    return RedirectResponse(started.authorization_url, status_code=303, headers=HEADERS)
