"""``tenantry api-keys`` and ``tenantry audit``: the tenant's own keys (with a key holding
``keys:manage``) and its audit trail (``audit:read``), over the platform's API with the
client SDK.

A new key is printed once, alone on standard output (so ``tenantry api-keys create ... >
key.txt`` keeps it and nothing else); what it is goes to standard error.

Exit status: 0 done; 2 bad input, configuration, or an error answer (one line)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from tenantry.cli.common import fail
from tenantry.cli.help import App
from tenantry.cli.options import DEFAULT_URL, ApiKey, OnTenant, OperatorToken, Url
from tenantry.cli.remote import AsJson, fetch, print_items, print_list, sdk_client
from tenantry.cli.tables import AT
from tenantry.cli.tool_servers import when

if TYPE_CHECKING:
    from tenantry.client import AuditEntry, IssuedApiKey

api_keys_app = App(help="A tenant's API keys: create with scopes and an expiry, list, "
                        "rotate, revoke (as a tenant: TENANTRY_API_KEY, with keys:manage; "
                        "create, list and revoke for any tenant as the operator: --tenant).")

KeyId = Annotated[str, typer.Argument(help="The key's id (key_...).")]


def _issued(issued: IssuedApiKey) -> None:
    key = issued.key
    typer.echo(f"{key.key_id} {key.name or '(no name)'}: {', '.join(key.scopes)}; expires "
               f"{when(key.expires_at)} — the key is shown this once", err=True)
    typer.echo(issued.api_key)


def _expiry(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        fail(f"--expires-at: {text!r} is not an ISO 8601 time")
    if value.tzinfo is None:
        fail("--expires-at: give a time zone (e.g. 2027-01-01T00:00:00Z)")
    return value


@api_keys_app.command("create")
def create(
    name: Annotated[str, typer.Option(help="A name to tell it apart.")] = "",
    scope: Annotated[list[str] | None, typer.Option(
        help="A scope it holds (repeat for more): runs:read, runs:write, approvals:decide, "
             "agents:manage, integrations:manage, keys:manage, audit:read, data:export. "
             "Default: every scope of the key you call with.")] = None,
    expires_at: Annotated[str | None, typer.Option(
        help="When it stops working (ISO 8601 with a time zone).")] = None,
    url: Url = DEFAULT_URL, api_key: ApiKey = None, tenant: OnTenant = None,
    operator_token: OperatorToken = None,
) -> None:
    """Make a key; it is printed once."""
    expiry = _expiry(expires_at)
    with sdk_client(url, api_key, tenant=tenant, operator_token=operator_token) as client:
        _issued(client.api_keys.create(name=name, scopes=scope or None, expires_at=expiry))


@api_keys_app.command("list")
def list_keys(url: Url = DEFAULT_URL, api_key: ApiKey = None, tenant: OnTenant = None,
              operator_token: OperatorToken = None, as_json: AsJson = False) -> None:
    """Your tenant's keys, revoked and expired ones too (never the keys themselves)."""
    print_list(url, api_key, as_json, lambda client: client.api_keys.list,
               ["key_id", "prefix", "name", "scopes", "expires (UTC)", "revoked (UTC)",
                "made by"],
               lambda k: [k.key_id, k.prefix, k.name, " ".join(k.scopes), when(k.expires_at),
                          when(k.revoked_at), k.created_by or "—"],
               tenant=tenant, operator_token=operator_token)


@api_keys_app.command("rotate")
def rotate(
    key_id: KeyId,
    overlap: Annotated[int, typer.Option(
        min=0, max=7 * 24 * 3600,
        help="Seconds the old key keeps working (at most 7 days).")] = 0,
    url: Url = DEFAULT_URL, api_key: ApiKey = None,
) -> None:
    """Replace a key with a new one (same name, scopes and expiry); printed once."""
    with sdk_client(url, api_key) as client:
        _issued(client.api_keys.rotate(key_id, overlap_seconds=overlap))


@api_keys_app.command("revoke")
def revoke(key_id: KeyId, url: Url = DEFAULT_URL, api_key: ApiKey = None,
           tenant: OnTenant = None, operator_token: OperatorToken = None) -> None:
    """Revoke a key at once."""
    with sdk_client(url, api_key, tenant=tenant, operator_token=operator_token) as client:
        client.api_keys.revoke(key_id)
    typer.echo(f"revoked {key_id}")


def _audit_row(e: AuditEntry) -> list[str]:
    if e.kind == "change":
        return [when(e.at), "change", e.actor or "", f"{e.action} → {e.status}", e.target or ""]
    return [when(e.at), "tool call", e.run_id or "",
            f"{e.tool} ({e.server or 'built-in'}) → {e.outcome}", e.key or ""]


def audit(
    kind: Annotated[str | None, typer.Option(help="tool_call or change.")] = None,
    run_id: Annotated[str | None, typer.Option(help="One run's tool calls.")] = None,
    actor: Annotated[str | None, typer.Option(
        help="One actor's changes: key:<key id> or operator.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200, help="How many, newest first.")] = 50,
    url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False,
) -> None:
    """Your tenant's audit trail, newest first: tool calls and account changes (with
    audit:read)."""
    page = fetch(url, api_key, lambda client: client.audit.list(kind=kind, run_id=run_id,
                                                                actor=actor, limit=limit))
    print_items(page, as_json, [AT, "kind", "who / run", "what", "target / key"],
                _audit_row)
