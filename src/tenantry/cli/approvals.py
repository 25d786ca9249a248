"""``tenantry approvals``: tool calls waiting for a person — listed, shown whole, approved
or denied with a comment. As a tenant (TENANTRY_API_KEY) its own; with ``--tenant`` the
operator acts on that tenant's (``tenantry.cli.operator``), and the run's log records the
operator as who decided. ``approvals inbox`` is the operator's inbox across tenants,
grouped by tenant so one tenant's volume hides no other's.

``show`` prints every field the API answers, in its order, so a field the API adds to
approvals shows up here without a change to this command.

Exit status: 0 done; 1 a decision the platform refused (already decided, the run ended);
2 bad input, configuration, or another error answer (one line)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

import typer

from tenantry.cli.common import fail
from tenantry.cli.help import App
from tenantry.cli.operator import Item, all_fields, operator_call, text
from tenantry.cli.options import DEFAULT_URL, ApiKey, OnTenant, OperatorToken, Url
from tenantry.cli.remote import (
    AsJson,
    every_page,
    fetch,
    print_fields,
    print_items,
    print_json,
    sdk_client,
)
from tenantry.cli.tool_servers import when

if TYPE_CHECKING:
    from tenantry.client import Approval

approvals_app = App(help="Tool calls waiting for a person: list, show, approve, deny (as a "
                         "tenant: TENANTRY_API_KEY; as the operator: --tenant, or inbox "
                         "across tenants).")

ApprovalId = Annotated[str, typer.Argument(help="The approval's id (apr_…).")]
Comment = Annotated[str | None, typer.Option(
    help="Why: kept with the decision, and shown to the model when the call is denied.")]
STATUSES = ("pending", "approved", "denied", "expired", "cancelled")


def _row(a: Approval) -> list[str]:
    return [a.approval_id, a.run_id, a.tool, a.status, text(a.arguments),
            when(a.requested_at), when(a.expires_at)]


@approvals_app.command("list")
def list_approvals(
    status: Annotated[str | None, typer.Option(
        help="Only these: " + ", ".join(STATUSES) + ".")] = "pending",
    url: Url = DEFAULT_URL, api_key: ApiKey = None, tenant: OnTenant = None,
    operator_token: OperatorToken = None, as_json: AsJson = False,
) -> None:
    """The approvals, newest first (default: the pending ones; every page)."""
    if status is not None and status not in STATUSES:
        fail(f"--status {status}: one of {', '.join(STATUSES)}")
    with sdk_client(url, api_key, tenant=tenant, operator_token=operator_token) as client:
        found = every_page(lambda cursor: client.approvals.list(status=status, limit=200,
                                                                cursor=cursor))
    print_items(found, as_json, ["approval_id", "run_id", "tool", "status", "arguments",
                                 "requested (UTC)", "expires (UTC)"], _row)


@approvals_app.command("show")
def show(approval_id: ApprovalId, url: Url = DEFAULT_URL, api_key: ApiKey = None,
         tenant: OnTenant = None, operator_token: OperatorToken = None,
         as_json: AsJson = False) -> None:
    """One approval: every field the API answers (the exact arguments that would be sent,
    and who decided, when, and why, once decided)."""
    approval = fetch(url, api_key, lambda client: client.approvals.get(approval_id),
                     tenant=tenant, operator_token=operator_token)
    print_fields(Item(approval.raw), as_json, all_fields)


def _decide(decision: Literal["approve", "deny"], approval_id: str, comment: str | None,
            url: str, api_key: str | None, tenant: str | None, operator_token: str | None,
            as_json: bool) -> None:
    from tenantry.client import Conflict

    with sdk_client(url, api_key, tenant=tenant, operator_token=operator_token) as client:
        try:
            done = client.approvals.decide(approval_id, decision, comment=comment)
        except Conflict as exc:
            typer.secho(f"refused: {exc.detail}", fg="red", err=True)
            raise typer.Exit(1) from None
    if as_json:
        print_json(done.raw)
        return
    typer.echo(f"{done.approval_id} {done.status}: the run {done.run_id} goes on")


@approvals_app.command("approve")
def approve(approval_id: ApprovalId, comment: Comment = None, url: Url = DEFAULT_URL,
            api_key: ApiKey = None, tenant: OnTenant = None,
            operator_token: OperatorToken = None, as_json: AsJson = False) -> None:
    """Let the call be made, exactly with the arguments shown."""
    _decide("approve", approval_id, comment, url, api_key, tenant, operator_token, as_json)


@approvals_app.command("deny")
def deny(approval_id: ApprovalId, comment: Comment = None, url: Url = DEFAULT_URL,
         api_key: ApiKey = None, tenant: OnTenant = None,
         operator_token: OperatorToken = None, as_json: AsJson = False) -> None:
    """Refuse the call; the model is told so (with the comment) and the run goes on."""
    _decide("deny", approval_id, comment, url, api_key, tenant, operator_token, as_json)


@approvals_app.command("inbox")
def inbox(
    each: Annotated[int, typer.Option(min=1, max=50,
                                      help="How many of each tenant's to show.")] = 10,
    url: Url = DEFAULT_URL, operator_token: OperatorToken = None, as_json: AsJson = False,
) -> None:
    """The operator's inbox: every tenant with pending approvals, the longest waiting
    first, and each one's oldest (``approvals list --tenant T`` for all of a tenant's)."""
    answer = operator_call(url, operator_token, "GET", "/admin/v1/approvals/pending",
                           params={"each": each})
    if as_json:
        print_json(answer)
        return
    rows = [Item({**a, "pending": group["pending"]}) for group in answer["tenants"]
            for a in group["first"]]
    print_items(rows, False, ["tenant", "approval_id", "run_id", "tool", "arguments",
                              "requested (UTC)", "tenant's pending"],
                lambda a: [a.raw["tenant_id"], a.raw["approval_id"], a.raw["run_id"],
                           a.raw["tool"], text(a.raw["arguments"]),
                           text(a.raw["requested_at"]), str(a.raw["pending"])])
