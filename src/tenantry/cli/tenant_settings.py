"""A tenant's settings and jobs as the operator reads them (``/admin/v1``, the operator
token): ``tenants policy show``, ``tenants retention show``, ``tenants tombstones`` and
``tenants erase-status``.

They are subcommands of ``tenants`` and not ``--tenant`` on a tenant's group: the tenant
API has no command of its own for these to borrow (``operator_forms`` maps only the
routes a tenant's command already sends), so the operator's own group is where they fit.

Exit status: 0 done; 2 bad input, configuration, or an error answer (one line)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

import typer

from tenantry.cli.help import App
from tenantry.cli.operator import Item, all_fields, operator_call, operator_pages, text
from tenantry.cli.options import DEFAULT_URL, OperatorToken, Url
from tenantry.cli.remote import AsJson, print_fields, print_items

policy_app = App(help="A tenant's policy (operator): its limits and budgets.")
retention_app = App(help="A tenant's retention (operator): how long its runs and audit "
                         "trail are kept.")

TenantId = Annotated[str, typer.Argument(help="The tenant's id.")]


def _show(path: str, url: str, operator_token: str | None, as_json: bool) -> None:
    print_fields(Item(operator_call(url, operator_token, "GET", path)), as_json, all_fields)


@policy_app.command("show")
def policy_show(tenant: TenantId, url: Url = DEFAULT_URL,
                operator_token: OperatorToken = None, as_json: AsJson = False) -> None:
    """The tenant's policy: every field the API answers."""
    _show(f"/admin/v1/tenants/{quote(tenant, safe='')}/policy", url, operator_token, as_json)


@retention_app.command("show")
def retention_show(tenant: TenantId, url: Url = DEFAULT_URL,
                   operator_token: OperatorToken = None, as_json: AsJson = False) -> None:
    """The tenant's retention: every field the API answers."""
    _show(f"/admin/v1/tenants/{quote(tenant, safe='')}/retention", url, operator_token,
          as_json)


def erase_status(
    job: Annotated[str, typer.Argument(help="The erase job's id (tenants erase prints it).")],
    url: Url = DEFAULT_URL, operator_token: OperatorToken = None, as_json: AsJson = False,
) -> None:
    """An erase job, as `tenants erase` printed it, now: what it has deleted so far."""
    _show(f"/admin/v1/erase-jobs/{quote(job, safe='')}", url, operator_token, as_json)


def tombstones(tenant: TenantId, url: Url = DEFAULT_URL, operator_token: OperatorToken = None,
               as_json: AsJson = False) -> None:
    """The tenant's deleted runs, newest deletion first (every page): what remains of
    each, never its input, answer or events."""
    path = f"/admin/v1/tenants/{quote(tenant, safe='')}/tombstones"
    found = [Item(t) for t in operator_pages(url, operator_token, path)]
    print_items(found, as_json, ["run_id", "kind", "agent_id", "status", "reason",
                                 "deleted (UTC)"],
                lambda t: [text(t.raw[k]) for k in ("run_id", "kind", "agent_id", "status",
                                                    "reason", "deleted_at")])
