"""The tenant's tool servers: each one's URL and pinned tools and, for an OAuth server,
its connection (connected, or waiting for an authorization and why) and how many runs wait
for it. *Connect*, for a role holding ``integrations:manage``, starts an OAuth server's
authorization as ``POST /v1/tool-servers/{name}/connect`` does (the same
``tool_server_actions.connect``) and sends the person's browser to the authorization
server, which sends it back to the platform's ``/oauth/callback``; the runs waiting for
the server then go on by themselves. The start is recorded in the audit trail."""

from __future__ import annotations

import re
from urllib.parse import urlencode

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from tenantry.api import tool_server_actions
from tenantry.api.console import reads
from tenantry.api.console.view import HEADERS, form_action
from tenantry.api.fields import LABEL_RE
from tenantry.api.tenant_console import changes
from tenantry.api.tenant_console.view import PREFIX, IntegrationsForm, RunsPage
from tenantry.errors import NotFound, TenantryError
from tenantry.tenants.scopes import Scope
from tenantry.tools import servers

router = APIRouter()
ROUTE = f"POST {PREFIX}/tool-servers/{{name}}/connect"  # the audit trail's action
_NAME = re.compile(LABEL_RE)


@router.get("/tool-servers")
async def tool_servers(v: RunsPage) -> Response:
    q = v.request.query_params
    after = q.get("after") if _NAME.fullmatch(q.get("after", "")) else None
    rows = await reads.tool_servers_of(v.db, v.member.tenant, after=after)
    more = (f"{PREFIX}/tool-servers?{urlencode({'after': rows[-1].name})}"
            if len(rows) == reads.PAGE else None)
    connect = v.may(Scope.INTEGRATIONS_MANAGE)
    response = v.render("tool_servers.html", title="Tool servers", rows=rows, more=more,
                        connect=connect, connected=q.get("connected")
                        if _NAME.fullmatch(q.get("connected", "")) else None)
    # A Connect form's answer redirects to the server's authorization endpoint, which then
    # sends the browser back to the callback: browsers hold the redirects after a form's
    # post to form-action too, so the page's policy names both.
    leads_to = [r.authorization_endpoint for r in rows if r.authorization_endpoint]
    if connect and leads_to:
        leads_to.append(tool_server_actions.callback_url(v.platform, v.request))
        response.headers.update(form_action(leads_to))
    return response


@router.post("/tool-servers/{name}/connect")
async def connect(name: str, v: IntegrationsForm) -> Response:
    """Start (or renew) the server's authorization: a redirect to its authorization server,
    or, for a client credentials server, connected at once and back to the page."""
    try:
        started = await tool_server_actions.connect(v.platform, v.member.tenant, name,
                                                    v.request)
    except NotFound:
        return v.not_found(servers.SERVER_NOT_FOUND)
    except TenantryError as exc:  # not OAuth, a scope refused too often, discovery failed
        return v.error(exc.status, "Not connected", exc.detail)
    await changes.record(v, ROUTE)
    if started.authorization_url is None:  # client credentials: no browser needed
        oauth = started.server.oauth
        done = oauth is not None and oauth.status == "connected"
        page = f"{PREFIX}/tool-servers"
        return RedirectResponse(f"{page}?{urlencode({'connected': name})}" if done else page,
                                status_code=303, headers=HEADERS)
    return RedirectResponse(started.authorization_url, status_code=303, headers=HEADERS)
