"""``tenantry tool-servers``: a tenant's own MCP tool servers — registered, listed, shown,
re-pinned, connected (OAuth) and removed with the tenant's key over the platform's API,
with the client SDK (``tenantry.client``), so they work against any deployment the caller
can reach.

Exit status: 0 done; 2 bad input, configuration, or an error answer from the platform (one
line: ``error: <status>: <detail>``, e.g. a URL the operator's rules refuse)."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tenantry.cli.help import App
from tenantry.cli.options import DEFAULT_URL, ApiKey, OnTenant, OperatorToken, Url
from tenantry.cli.remote import AsJson, fetch, print_fields, print_json, print_list, sdk_client

if TYPE_CHECKING:
    from tenantry.client import ToolServer

tool_servers_app = App(help="A tenant's own MCP tool servers: register, pin, connect, "
                            "remove (as a tenant: TENANTRY_API_KEY; any tenant's as the "
                            "operator: --tenant).")

#: The tool list's digest as a table shows it: enough to tell two pins apart by eye.
DIGEST_CHARS = 12

Name = Annotated[str, typer.Argument(help="The tool server's name (as registered).")]


class Grant(StrEnum):
    authorization_code = "authorization_code"
    client_credentials = "client_credentials"


def when(value: datetime | None) -> str:
    return "—" if value is None else value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def authorization(server: ToolServer) -> str:
    """How calls to it are authorized: a vault secret, an OAuth connection, or nothing."""
    if server.oauth is not None:
        return f"oauth {server.oauth.status}"
    if server.secret is not None:
        return f"secret {server.secret}"
    return "—"


def _rows(server: ToolServer) -> list[list[str]]:
    rows = [["name", server.name], ["server_id", server.server_id], ["url", server.url],
            ["registered by", server.registered_by],
            ["honours idempotency keys", "yes" if server.honours_idempotency_keys else "no"],
            ["secret", server.secret or "—"],
            ["call timeout", f"{server.call_timeout_seconds} s"]]
    oauth = server.oauth
    if oauth is not None:
        rows += [["oauth", oauth.status + (f": {oauth.reason}" if oauth.reason else "")],
                 ["oauth issuer", oauth.issuer], ["oauth grant", oauth.grant],
                 ["oauth scope", oauth.scope or "—"],
                 ["oauth connected", when(oauth.connected_at)],
                 ["oauth token expires", when(oauth.expires_at)]]
    rows += [["tools", ", ".join(server.tools) or "—"],
             ["tools sha256", server.tools_sha256], ["created (UTC)", when(server.created_at)]]
    return rows


def _connect_hint(server: ToolServer) -> None:
    if server.oauth is not None and not server.oauth.connected:
        typer.secho(f"{server.name} authorizes with OAuth and has no tools until it is "
                    f"connected: tenantry tool-servers connect {server.name}", err=True)


@tool_servers_app.command("register")
def register(
    name: Annotated[str, typer.Argument(help="A name for it, unique in your tenant.")],
    server_url: Annotated[str, typer.Argument(
        help="The MCP server's streamable-HTTP endpoint.")],
    honours_idempotency_keys: Annotated[bool, typer.Option(
        "--honours-idempotency-keys/--no-honours-idempotency-keys",
        help="Whether the server performs a call once per Idempotency-Key (required): a "
             "call to one that does not is never sent again after an ambiguous failure.")],
    secret: Annotated[str | None, typer.Option(
        "--secret", metavar="SECRET_NAME",
        help="A secret of your vault (tenantry secrets put) sent as its bearer token.")] = None,
    oauth_grant: Annotated[Grant | None, typer.Option(
        "--oauth-grant", help="OAuth: the grant to use (default authorization_code; "
                              "client_credentials needs --oauth-client-id).")] = None,
    oauth_client_id: Annotated[str | None, typer.Option(
        "--oauth-client-id", help="OAuth: a client the authorization server issued "
                                  "beforehand (else one is registered dynamically).")] = None,
    oauth_client_secret: Annotated[str | None, typer.Option(
        "--oauth-client-secret", metavar="SECRET_NAME",
        help="OAuth: the vault secret holding that client's secret.")] = None,
    call_timeout: Annotated[int | None, typer.Option(
        "--call-timeout", min=1, max=3600, metavar="SECONDS",
        help="How long one call may take before the model is told it timed out "
             "(the platform's default: 30).")] = None,
    url: Url = DEFAULT_URL, api_key: ApiKey = None, tenant: OnTenant = None,
    operator_token: OperatorToken = None, as_json: AsJson = False,
) -> None:
    """Register an MCP server: its tool list is read now and pinned (what models are
    offered). A server that answers with an OAuth challenge is registered waiting to be
    connected (tenantry tool-servers connect). The operator's rules decide where it may be:
    https, on a host they allow, never at a loopback, private, link-local or metadata
    address unless the operator allows those."""
    oauth: dict[str, Any] | None = None
    if oauth_grant or oauth_client_id or oauth_client_secret:
        oauth = {k: v for k, v in {"grant": oauth_grant.value if oauth_grant else None,
                                   "client_id": oauth_client_id,
                                   "client_secret": oauth_client_secret}.items()
                 if v is not None}
    with sdk_client(url, api_key, tenant=tenant, operator_token=operator_token) as client:
        server = client.tool_servers.register(
            name, server_url, honours_idempotency_keys=honours_idempotency_keys,
            secret=secret, oauth=oauth, call_timeout_seconds=call_timeout)
    print_fields(server, as_json, _rows)
    _connect_hint(server)


@tool_servers_app.command("list")
def list_servers(url: Url = DEFAULT_URL, api_key: ApiKey = None, tenant: OnTenant = None,
                 operator_token: OperatorToken = None, as_json: AsJson = False) -> None:
    """Your tenant's tool servers, by name (the operator's for it too): every page."""
    print_list(url, api_key, as_json, lambda client: client.tool_servers.list,
               ["name", "url", "tools", "authorization", "keys", "timeout s", "by",
                "created (UTC)"],
               lambda s: [s.name, s.url, str(len(s.tools)), authorization(s),
                          "yes" if s.honours_idempotency_keys else "no",
                          str(s.call_timeout_seconds), s.registered_by, when(s.created_at)],
               tenant=tenant, operator_token=operator_token)


@tool_servers_app.command("show")
def show(name: Name, url: Url = DEFAULT_URL, api_key: ApiKey = None, tenant: OnTenant = None,
         operator_token: OperatorToken = None, as_json: AsJson = False) -> None:
    """One tool server: where it is, how calls are authorized, its pinned tools."""
    print_fields(fetch(url, api_key, lambda client: client.tool_servers.get(name),
                       tenant=tenant, operator_token=operator_token), as_json, _rows)


@tool_servers_app.command("pin")
def pin(name: Name, url: Url = DEFAULT_URL, api_key: ApiKey = None, tenant: OnTenant = None,
        operator_token: OperatorToken = None, as_json: AsJson = False) -> None:
    """Accept the server's current tool list as reviewed (after it changed). Agent versions
    published before keep refusing calls to it: publish a new version to use the list."""
    with sdk_client(url, api_key, tenant=tenant, operator_token=operator_token) as client:
        server = client.tool_servers.pin(name)
    if as_json:
        print_json(server.raw)
        return
    typer.echo(f"pinned {server.name}: {len(server.tools)} tool(s), sha256 "
               f"{server.tools_sha256[:DIGEST_CHARS]}…")
    typer.echo(", ".join(server.tools) or "(no tools)")


@tool_servers_app.command("connect")
def connect(
    name: Name,
    open_browser: Annotated[bool, typer.Option(
        "--open", help="Open the authorization URL in this machine's browser too.")] = False,
    url: Url = DEFAULT_URL, api_key: ApiKey = None, tenant: OnTenant = None,
    operator_token: OperatorToken = None, as_json: AsJson = False,
) -> None:
    """Connect (or reconnect) a server that authorizes with OAuth: prints the URL to open in
    the browser of whoever may grant access; once they have, the server is connected, its
    tool list pinned, and runs waiting for it go on. A client credentials server is
    connected at once (no URL)."""
    with sdk_client(url, api_key, tenant=tenant, operator_token=operator_token) as client:
        connection = client.tool_servers.connect(name)
    target = connection.authorization_url
    if as_json:
        print_json(connection.raw)
    elif target is None:
        typer.echo(f"{connection.server.name} is connected: "
                   f"{len(connection.server.tools)} tool(s)")
    else:
        typer.secho("Open this URL in the browser of whoever may grant access (then "
                    f"tenantry tool-servers show {connection.server.name}):", err=True)
        typer.echo(target)
    if target is not None and open_browser:
        import webbrowser

        if not webbrowser.open(target):
            typer.secho("no browser could be opened here: open the URL yourself", err=True)


@tool_servers_app.command("remove")
def remove(name: Name, url: Url = DEFAULT_URL, api_key: ApiKey = None,
           tenant: OnTenant = None, operator_token: OperatorToken = None) -> None:
    """Remove a tool server: its tools are offered to no run from then on."""
    with sdk_client(url, api_key, tenant=tenant, operator_token=operator_token) as client:
        client.tool_servers.remove(name)
    typer.echo(f"removed tool server {name}")
