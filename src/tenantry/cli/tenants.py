"""``tenantry tenants``: the operator's tenants over the operator API (``/admin/v1``, the
operator token) — created, listed, shown, paused and resumed, their webhook secret
rotated, and erased. A tenant's keys, tool servers, secrets and model accounts are the
tenant's own groups with ``--tenant`` (``tenantry.cli.operator``).

A secret the API shows once (a new tenant's webhook secret) is printed with the rest, and
said so on standard error.

Exit status: 0 done; 2 bad input, configuration, or an error answer (one line)."""

from __future__ import annotations

from typing import Annotated

import typer

from tenantry.cli.help import App
from tenantry.cli.operator import Item, all_fields, operator_call, operator_pages, text
from tenantry.cli.options import DEFAULT_URL, OperatorToken, Url
from tenantry.cli.remote import AsJson, print_fields, print_items

tenants_app = App(help="The tenants (operator: TENANTRY_OPERATOR_TOKEN): create, list, show, "
                       "pause, resume, erase. Their keys, tool servers, secrets and model "
                       "accounts: those groups with --tenant.")

TenantId = Annotated[str, typer.Argument(help="The tenant's id.")]


def _path(tenant: str, tail: str = "") -> str:
    from urllib.parse import quote

    return f"/admin/v1/tenants/{quote(tenant, safe='')}{tail}"


@tenants_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="The tenant's name, as people read it.")],
    tenant_id: Annotated[str | None, typer.Option(
        "--id", help="Its id (a slug: a-z, 0-9, - and _); generated when left out.")] = None,
    region: Annotated[str | None, typer.Option(
        help="Where its data and model calls must stay (default: this cell's).")] = None,
    plan: Annotated[str, typer.Option(help="Its plan.")] = "standard",
    url: Url = DEFAULT_URL, operator_token: OperatorToken = None, as_json: AsJson = False,
) -> None:
    """Create a tenant; its webhook signing secret is shown this once (then issue it a key:
    tenantry api-keys create --tenant ID)."""
    body = {"name": name, "plan": plan, **({"tenant_id": tenant_id} if tenant_id else {}),
            **({"region": region} if region else {})}
    created = Item(operator_call(url, operator_token, "POST", "/admin/v1/tenants", json=body))
    print_fields(created, as_json, all_fields)
    typer.echo(f"{created.raw['tenant_id']}: its webhook_secret is shown this once", err=True)


@tenants_app.command("list")
def list_tenants(url: Url = DEFAULT_URL, operator_token: OperatorToken = None,
                 as_json: AsJson = False) -> None:
    """Every tenant, by id (every page)."""
    found = [Item(t) for t in operator_pages(url, operator_token, "/admin/v1/tenants")]
    print_items(found, as_json, ["tenant_id", "name", "region", "plan", "home cell",
                                 "created (UTC)"],
                lambda t: [text(t.raw[k]) for k in ("tenant_id", "name", "region", "plan",
                                                    "home_cell", "created_at")])


@tenants_app.command("show")
def show(tenant: TenantId, url: Url = DEFAULT_URL, operator_token: OperatorToken = None,
         as_json: AsJson = False) -> None:
    """One tenant: every field the API answers."""
    print_fields(Item(operator_call(url, operator_token, "GET", _path(tenant))), as_json,
                 all_fields)


def _admissions(tenant: str, paused: bool, url: str, operator_token: str | None,
                as_json: bool) -> None:
    answer = Item(operator_call(url, operator_token, "PUT", _path(tenant, "/admissions"),
                                json={"paused": paused}))
    print_fields(answer, as_json, all_fields)


@tenants_app.command("pause")
def pause(tenant: TenantId, url: Url = DEFAULT_URL, operator_token: OperatorToken = None,
          as_json: AsJson = False) -> None:
    """Refuse the tenant's new runs and tasks (runs already admitted go on)."""
    _admissions(tenant, True, url, operator_token, as_json)


@tenants_app.command("resume")
def resume(tenant: TenantId, url: Url = DEFAULT_URL, operator_token: OperatorToken = None,
           as_json: AsJson = False) -> None:
    """Admit the tenant's new runs and tasks again."""
    _admissions(tenant, False, url, operator_token, as_json)


@tenants_app.command("rotate-webhook-secret")
def rotate_webhook_secret(tenant: TenantId, url: Url = DEFAULT_URL,
                          operator_token: OperatorToken = None) -> None:
    """Replace the tenant's webhook signing secret (the old one stops at once); the new
    one is printed once, alone on standard output."""
    answer = operator_call(url, operator_token, "POST", _path(tenant, "/webhook-secret"))
    typer.echo(f"{tenant}: the new webhook secret is shown this once", err=True)
    typer.echo(answer["webhook_secret"])


@tenants_app.command("erase")
def erase(
    tenant: TenantId,
    yes: Annotated[bool, typer.Option(
        "--yes", help="Erase without asking (a script's confirmation).")] = False,
    url: Url = DEFAULT_URL, operator_token: OperatorToken = None, as_json: AsJson = False,
) -> None:
    """Erase a tenant: it admits nothing from then on, its keys are revoked, its secrets
    and tool servers deleted, its live runs cancelled, and its runs deleted by the
    retention cleaner. Prints the erase job (asking again answers the same job)."""
    if not yes:
        typer.confirm(f"Erase tenant {tenant} and all its data?", abort=True, err=True)
    job = Item(operator_call(url, operator_token, "POST", _path(tenant, "/erase")))
    print_fields(job, as_json, all_fields)


def _settings() -> None:
    from tenantry.cli import tenant_settings

    tenants_app.add_typer(tenant_settings.policy_app, name="policy")
    tenants_app.add_typer(tenant_settings.retention_app, name="retention")
    tenants_app.command("erase-status")(tenant_settings.erase_status)
    tenants_app.command("tombstones")(tenant_settings.tombstones)


_settings()
