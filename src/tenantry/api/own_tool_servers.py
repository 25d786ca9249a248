"""Tenant API: the tenant's own tool servers and secrets, with its own key (``/v1``).

The same actions as the operator's routes (``api/tool_servers.py``; the actions themselves
are in ``api/tool_server_actions.py``), on the key's tenant: register, list, read, re-pin,
connect (OAuth) and remove its tool servers; store, list and remove its secrets, which are
write-only (no route returns a value; storing one again under its name rotates it, and the
next call to a server sending it uses the new value). A server the tenant registers is
held to the operator's rules for where it may be (tools/destinations.py): https, a host
the operator allows, never a loopback, private, link-local or metadata address, at
registration and at every connection."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request, Response

from tenantry.api.admin import (
    SECRET_CURSOR,
    VAULT_ERROR,
    NewSecretName,
    PutSecret,
    SecretList,
    SecretOut,
    SecretPage,
    put_secret_responses,
    secret_out,
    store_secret,
)
from tenantry.api.auth import IntegrationsManager, PlatformDep, RunsReader
from tenantry.api.fields import LABEL_RE, SECRET_NAME_RE
from tenantry.api.links import links, to
from tenantry.api.pagination import PageRequest, keyed_by
from tenantry.api.tool_server_actions import connect, one, page_of, register, remove, repin
from tenantry.api.tool_server_bodies import (
    ConnectOut,
    RegisterToolServer,
    ToolServerList,
    ToolServerOut,
)
from tenantry.api.tool_servers import CONNECT_CONFLICT, OAUTH_FAILED, UNREACHABLE
from tenantry.errors import Conflict, NotFound
from tenantry.models import own_accounts
from tenantry.tools import servers
from tenantry.vault import store as vault_store

router = APIRouter(prefix="/v1", tags=["tool servers"])

_SECRET_NAME = re.compile(SECRET_NAME_RE)
_URL_REFUSED: dict[int | str, dict[str, Any]] = {422: {
    "description": "`tool_server_url_refused`: the operator's rules refuse the URL (not "
                   "https, a host not allowed, or a name that resolves to a loopback, "
                   "private, link-local or metadata address); or "
                   "`tool_server_authorization_failed` (OAuth metadata unreadable)"}}
_THE_SERVER = {"name": "$response.body#/name"}


@router.post("/tool-servers", status_code=201, response_model=ToolServerOut,
             responses={201: links(
                 GetToolServer=to("GET", "/v1/tool-servers/{name}",
                                  "The server just registered.", parameters=_THE_SERVER),
                 Connect=to("POST", "/v1/tool-servers/{name}/connect",
                            "Authorize the platform with its OAuth server.",
                            parameters=_THE_SERVER)),
                 **UNREACHABLE, **_URL_REFUSED, **VAULT_ERROR})
async def register_own_tool_server(
    body: RegisterToolServer, tenant: IntegrationsManager, p: PlatformDep,
) -> ToolServerOut:
    """Register one of your MCP servers. Its tool list is read now and pinned; a server that
    asks for an OAuth token is registered waiting to be connected (``oauth``)."""
    return await register(p, tenant, body, by_tenant=True)


_ToolServerPage = Annotated[PageRequest, Depends(keyed_by(LABEL_RE))]


@router.get("/tool-servers", response_model=ToolServerList)
async def list_own_tool_servers(
    page: _ToolServerPage, tenant: RunsReader, p: PlatformDep,
) -> ToolServerList:
    """Your tool servers (the operator's registrations for you too), ordered by name."""
    return await page_of(p, tenant, page)


@router.get("/tool-servers/{name}", response_model=ToolServerOut)
async def get_own_tool_server(name: str, tenant: RunsReader, p: PlatformDep) -> ToolServerOut:
    """Get one of your tool servers.

    Its URL, how it authenticates, who registered it, and the tool list pinned at
    registration."""
    return await one(p, tenant, name)


@router.post("/tool-servers/{name}/pin", response_model=ToolServerOut,
             responses={**UNREACHABLE, **VAULT_ERROR})
async def repin_own_tool_server(
    name: str, tenant: IntegrationsManager, p: PlatformDep,
) -> ToolServerOut:
    """Accept the server's current tool list as reviewed (after it changed). Agent versions
    published before keep the list they were published with."""
    return await repin(p, tenant, name)


@router.post("/tool-servers/{name}/connect", response_model=ConnectOut,
             responses={**CONNECT_CONFLICT, **UNREACHABLE, **OAUTH_FAILED, **VAULT_ERROR})
async def connect_own_tool_server(
    name: str, request: Request, tenant: IntegrationsManager, p: PlatformDep,
) -> ConnectOut:
    """Start or renew an OAuth server's authorization: open ``authorization_url`` in a
    browser; the authorization server sends it back to this platform. Runs waiting for the
    server go on once it is connected."""
    return await connect(p, tenant, name, request)


@router.delete("/tool-servers/{name}", status_code=204, response_class=Response)
async def remove_own_tool_server(
    name: str, tenant: IntegrationsManager, p: PlatformDep,
) -> Response:
    """Remove the server and its OAuth connection (its tokens go with it)."""
    await remove(p, tenant, name)
    return Response(status_code=204)


_STORED = links(GetSecret=to("GET", "/v1/secrets/{name}", "The secret's name and dates.",
                             parameters={"name": "$request.path.name"}))


@router.put("/secrets/{name}", response_model=SecretOut,
            responses=put_secret_responses(_STORED))
async def put_own_secret(
    name: NewSecretName, body: PutSecret, response: Response, tenant: IntegrationsManager,
    p: PlatformDep,
) -> SecretOut:
    """Store a secret (or rotate it: store it again under its name), encrypted with your
    data key. Write-only: no API returns it."""
    return await store_secret(p, tenant, name, body.value, response)


@router.get("/secrets", response_model=SecretList)
async def list_own_secrets(
    page: SecretPage, tenant: IntegrationsManager, p: PlatformDep,
) -> SecretList:
    """Names and dates only, ordered by name."""
    found = await vault_store.secrets_page(p.db, tenant, after=page.position(SECRET_CURSOR),
                                           limit=page.limit)
    return page.answer(SecretList, found, secret_out, key=lambda s: s.name)


@router.get("/secrets/{name}", response_model=SecretOut)
async def get_own_secret(
    tenant: IntegrationsManager, p: PlatformDep, name: str = Path(max_length=128),
) -> SecretOut:
    """A secret's name and dates (to check it is there); its value is never returned."""
    return secret_out(await vault_store.secret_info(p.db, tenant, _secret_name(name)))


@router.delete("/secrets/{name}", status_code=204, response_class=Response,
               responses={409: {"description": "`conflict`: a tool server still sends it "
                                               "(`tool_servers` names them), or a model "
                                               "account calls with it (`model_accounts`)"}})
async def remove_own_secret(
    tenant: IntegrationsManager, p: PlatformDep, name: str = Path(max_length=128),
) -> Response:
    """Remove a secret no tool server sends and no model account calls with any more."""
    name = _secret_name(name)
    async with p.db.tenant_tx(tenant) as conn:
        users = await servers.sending_secret(conn, tenant, name)
        if users:
            raise Conflict(f"Tool servers still send this secret: {users}; remove them or "
                           "register them with another first.", tool_servers=users)
        accounts = await own_accounts.reading_secret(conn, tenant, name)
        if accounts:
            raise Conflict(f"Model accounts still call their provider with this secret: "
                           f"{accounts}; disable them first.", model_accounts=accounts)
        await vault_store.delete_secret(conn, tenant, name)
    return Response(status_code=204)


def _secret_name(name: str) -> str:
    if not _SECRET_NAME.fullmatch(name):  # not a name a secret can have (and never a NUL)
        raise NotFound(f"No secret named {name[:128]!r}.")
    return name
