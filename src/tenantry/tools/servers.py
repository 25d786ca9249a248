"""A tenant's MCP tool servers. Registering one reads its tool list; the list is stored and
pinned by its hash, so the tools a model may see are the ones an operator reviewed. A server
that later serves a different list is refused until an operator re-pins it.

A server that answers the registration with a Bearer challenge (401) uses OAuth
(tools/oauth/): it is registered with no tools, waiting for its first connection, whose
token reads the list that is then pinned."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import asyncpg

from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound, ToolUnavailable
from tenantry.ids import TenantId
from tenantry.jsonutil import digest
from tenantry.tools.builtin import NAMES as BUILTIN_TOOLS
from tenantry.tools.destinations import Destinations
from tenantry.tools.mcp_client import McpToolClient
from tenantry.tools.oauth.connections import PreRegistered, ToolServerAuth
from tenantry.tools.oauth.discovery import parse_challenge

Q = load(__package__)

SERVER_NOT_FOUND = "No tool server with this name."
#: Who registered a server (migration 0045): a tenant's own is held to the operator's rules.
RegisteredBy = Literal["operator", "tenant"]
#: A call's deadline unless its server's registration says otherwise (migration 0043).
DEFAULT_CALL_TIMEOUT_SECONDS = 30
#: The longest a registration may ask for: a run's step is not held longer than an hour.
MAX_CALL_TIMEOUT_SECONDS = 3600


@dataclass(frozen=True, slots=True)
class ToolServer:
    server_id: uuid.UUID
    name: str
    url: str
    honours_idempotency_keys: bool
    tools: tuple[dict[str, Any], ...]  # [{name, description, input_schema}]
    tools_sha256: bytes
    secret_ref: str | None
    created_at: datetime
    oauth: bool = False  # its calls carry a token of its OAuth connection
    #: The deadline of one whole call to it (pin check, retries, the answer).
    call_timeout_seconds: int = DEFAULT_CALL_TIMEOUT_SECONDS
    #: ``tenant``: registered by the tenant itself, reached only at addresses the
    #: operator's rules allow (tools/destinations.py); ``operator``: the operator's choice.
    registered_by: RegisteredBy = "operator"
    #: The MCP protocol generation it spoke when last listed (None: not known).
    speaks_modern: bool | None = None

    @classmethod
    def from_row(cls, r: asyncpg.Record) -> ToolServer:
        return cls(r["server_id"], r["name"], r["url"], r["honours_idempotency_keys"],
                   tuple(r["tools"]), bytes(r["tools_sha256"]), r["secret_ref"],
                   r["created_at"], r["oauth"], r["call_timeout_seconds"],
                   r["registered_by"], r["speaks_modern"])

    @property
    def guarded(self) -> bool:
        """Reached only at vetted addresses: a server the tenant registered itself."""
        return self.registered_by == "tenant"

    def tool_names(self) -> set[str]:
        return {t["name"] for t in self.tools}


def tools_digest(tools: list[dict[str, Any]]) -> bytes:
    """The pin: names, descriptions and schemas, in the order the server lists them."""
    return digest(tools)


@dataclass(frozen=True, slots=True)
class OAuthRegistration:
    """How the platform authorizes with an OAuth server: the grant, and a client issued
    beforehand (else one is registered dynamically when connecting)."""

    grant: str = "authorization_code"
    client: PreRegistered | None = None


async def register(
    db: Database, mcp: McpToolClient, tenant: TenantId, *, name: str, url: str,
    honours_idempotency_keys: bool, secret_ref: str | None = None,
    headers: dict[str, str] | None = None, auth: ToolServerAuth | None = None,
    oauth: OAuthRegistration | None = None,
    call_timeout_seconds: int = DEFAULT_CALL_TIMEOUT_SECONDS,
    destinations: Destinations | None = None,
) -> ToolServer:
    """Read the server's tool list (with its credential, if any) and store it. The server
    must answer now: registering a tool list nobody has seen would defeat pinning. One that
    wants an OAuth token (and has no static secret) is stored waiting for its connection.
    ``destinations``: the tenant registers it itself, under the operator's rules for where
    such a server may be (checked first: nothing is sent to a URL they refuse)."""
    registered_by: RegisteredBy = "operator" if destinations is None else "tenant"
    if destinations is not None:
        await destinations.vet_url(url)
    challenge = None
    try:
        tools = await mcp.list_tools(url, headers, tenant=tenant,
                                     guarded=destinations is not None)
    except ToolUnavailable as exc:
        if exc.extra.get("reason") != "unauthorized" or secret_ref is not None or auth is None:
            raise
        challenge = parse_challenge(str(exc.extra.get("www_authenticate", "")))
        tools = []
    _refuse_builtin_names(tools)
    sha = tools_digest(tools)
    modern = mcp.speaks_modern(url)
    server_id = uuid.uuid4()
    async with db.tenant_tx(tenant) as conn:
        if await conn.fetchval(Q.tenant_exists, tenant.value) is None:
            raise NotFound("No tenant with this id.")
        existing = [ToolServer.from_row(r) for r in await conn.fetch(Q.list_servers, tenant.value)]
        clash = {t["name"] for t in tools} & {n for s in existing for n in s.tool_names()}
        if clash:
            raise Conflict(f"Tool names already served by another server: {sorted(clash)}.",
                           tools=sorted(clash))
        row = await conn.fetchrow(Q.insert_server, tenant.value, server_id, name, url,
                                  honours_idempotency_keys, tools, sha, secret_ref,
                                  call_timeout_seconds, registered_by, modern)
        if row is None:
            raise Conflict("A tool server with this name already exists.", field="name")
        if challenge is not None:
            assert auth is not None
            oauth = oauth or OAuthRegistration()
            await auth.prepare(conn, tenant, server_id, url, challenge, grant=oauth.grant,
                               client=oauth.client, guarded=destinations is not None)
    return ToolServer(server_id, name, url, honours_idempotency_keys, tuple(tools), sha,
                      secret_ref, row["created_at"], challenge is not None, call_timeout_seconds,
                      registered_by, modern)


async def pin_first_list(db: Database, mcp: McpToolClient, tenant: TenantId,
                         server: ToolServer, headers: dict[str, str]) -> ToolServer:
    """An OAuth server's first connection: the list its token reads is pinned, as a
    registration's is. A server pinned before keeps its pin (re-pinning is a decision)."""
    if server.tools:
        return server
    return await repin(db, mcp, tenant, server.name, headers)


def _refuse_builtin_names(tools: list[dict[str, Any]]) -> None:
    """The built-in tools (code, files) are always reached by their names: a server tool
    of the same name would be unreachable, so it is refused where an operator sees it."""
    reserved = sorted({t["name"] for t in tools} & BUILTIN_TOOLS)
    if reserved:
        raise Conflict(f"Tool names reserved for the built-in sandbox tools: {reserved}; "
                       "rename them on the server.", tools=reserved)


async def get_server(db: Database, tenant: TenantId, name: str) -> ToolServer:
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.get_server, tenant.value, name)
    if row is None:
        raise NotFound(SERVER_NOT_FOUND)
    return ToolServer.from_row(row)


async def repin(
    db: Database, mcp: McpToolClient, tenant: TenantId, name: str,
    headers: dict[str, str] | None = None,
) -> ToolServer:
    """Accept the server's current tool list as the reviewed one."""
    server = await get_server(db, tenant, name)
    tools = await mcp.list_tools(server.url, headers, tenant=tenant, guarded=server.guarded,
                                 modern=server.speaks_modern)
    _refuse_builtin_names(tools)
    sha = tools_digest(tools)
    async with db.tenant_tx(tenant) as conn:
        await conn.execute(Q.repin_server, tenant.value, name, tools, sha,
                           mcp.speaks_modern(server.url))
    return await get_server(db, tenant, name)


async def remove(db: Database, tenant: TenantId, name: str) -> None:
    """Remove the server and its OAuth connection (its sealed tokens go with the row).
    Published agent versions keep their pins: their calls to its tools are refused, the
    model told, until a server serving them is registered again."""
    async with db.tenant_tx(tenant) as conn:
        if await conn.fetchval(Q.remove_server, tenant.value, name) is None:
            raise NotFound(SERVER_NOT_FOUND)


async def sending_secret(conn: Connection, tenant: TenantId, secret: str) -> list[str]:
    """The names of the tenant's servers that send ``secret`` as their credential."""
    return [r["name"] for r in await conn.fetch(Q.servers_sending_secret, tenant.value, secret)]


async def list_servers(db: Database, tenant: TenantId) -> list[ToolServer]:
    async with db.tenant_tx(tenant) as conn:
        return [ToolServer.from_row(r) for r in await conn.fetch(Q.list_servers, tenant.value)]


async def servers_page(
    db: Database, tenant: TenantId, *, after: str | None, limit: int
) -> list[ToolServer]:
    """The tenant's servers by name, a page after ``after`` (404 for no such tenant)."""
    async with db.tenant_tx(tenant) as conn:
        if await conn.fetchval(Q.tenant_exists, tenant.value) is None:
            raise NotFound("No tenant with this id.")
        rows = await conn.fetch(Q.servers_page, tenant.value, after, limit)
    return [ToolServer.from_row(r) for r in rows]
