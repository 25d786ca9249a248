"""``tenantry webhooks``: the webhooks a tenant manages itself (ADR 0045) — its endpoints
and signing secret (with a key holding ``integrations:manage``) and the history of every
delivery attempt (``runs:read``), over the platform's API with the client SDK.

A rotated secret is printed once, alone on standard output (so ``tenantry webhooks
rotate-secret > secret.txt`` keeps it and nothing else); until when the old one signs too
goes to standard error.

Exit status: 0 done; 2 bad input, configuration, or an error answer (one line, e.g.
``error: 422: …`` for a URL that is not public)."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from tenantry.cli.help import App
from tenantry.cli.options import DEFAULT_URL, ApiKey, Url
from tenantry.cli.remote import (
    AsJson,
    fetch,
    print_fields,
    print_items,
    print_list,
    sdk_client,
)
from tenantry.cli.tables import AT
from tenantry.cli.tool_servers import when

if TYPE_CHECKING:
    from tenantry.client import WebhookEndpoint

webhooks_app = App(help="Your tenant's webhooks: endpoints that hear every run's end, the "
                        "signing secret, the delivery history (as a tenant: "
                        "TENANTRY_API_KEY).")
endpoints_app = App(help="URLs that hear the end of your runs (integrations:manage).")
webhooks_app.add_typer(endpoints_app, name="endpoints")

EndpointId = Annotated[str, typer.Argument(help="The endpoint's id (whe_...).")]


class RunEnd(StrEnum):
    finished = "finished"
    failed = "failed"
    cancelled = "cancelled"


def _filter(values: tuple[str, ...] | None) -> str:
    return "every" if values is None else " ".join(values)


def _rows(endpoint: WebhookEndpoint) -> list[list[str]]:
    return [["endpoint_id", endpoint.endpoint_id], ["url", endpoint.url],
            ["statuses", _filter(endpoint.statuses)], ["agents", _filter(endpoint.agent_ids)],
            ["description", endpoint.description or "—"],
            ["created (UTC)", when(endpoint.created_at)]]


@endpoints_app.command("create")
def create(
    endpoint_url: Annotated[str, typer.Argument(
        help="Where each run's end is POSTed: an http(s) URL on public addresses.")],
    status: Annotated[list[RunEnd] | None, typer.Option(
        "--status", help="Only runs that end so (repeat for more). Default: every end.")]
        = None,
    agent: Annotated[list[str] | None, typer.Option(
        "--agent", metavar="AGENT_ID",
        help="Only this agent's runs (repeat for more). Default: every agent's.")] = None,
    description: Annotated[str | None, typer.Option(
        help="A note to tell it apart.")] = None,
    url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False,
) -> None:
    """Register an endpoint: it hears the end of every run (or of those --status and
    --agent name), signed and retried as a run's own webhook is. At most 10."""
    with sdk_client(url, api_key) as client:
        endpoint = client.webhook_endpoints.create(
            endpoint_url, statuses=[s.value for s in status] if status else None,
            agent_ids=agent or None, description=description)
    print_fields(endpoint, as_json, _rows)


@endpoints_app.command("list")
def list_endpoints(url: Url = DEFAULT_URL, api_key: ApiKey = None,
                   as_json: AsJson = False) -> None:
    """Your endpoints, oldest first."""
    print_list(url, api_key, as_json, lambda client: client.webhook_endpoints.list,
               ["endpoint_id", "url", "statuses", "agents", "description", "created (UTC)"],
               lambda e: [e.endpoint_id, e.url, _filter(e.statuses), _filter(e.agent_ids),
                          e.description or "—", when(e.created_at)])


@endpoints_app.command("show")
def show(endpoint_id: EndpointId, url: Url = DEFAULT_URL, api_key: ApiKey = None,
         as_json: AsJson = False) -> None:
    """One endpoint: its URL and which runs' ends it hears."""
    print_fields(fetch(url, api_key, lambda client: client.webhook_endpoints.get(endpoint_id)),
                 as_json, _rows)


@endpoints_app.command("remove")
def remove(endpoint_id: EndpointId, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Remove an endpoint: deliveries to it not yet made are dropped; the attempts made stay
    in the history."""
    with sdk_client(url, api_key) as client:
        client.webhook_endpoints.delete(endpoint_id)
    typer.echo(f"removed endpoint {endpoint_id}")


@webhooks_app.command("rotate-secret")
def rotate_secret(
    overlap: Annotated[int | None, typer.Option(
        min=0, max=7 * 24 * 3600, metavar="SECONDS",
        help="Seconds the current secret keeps signing beside the new one (at most 7 "
             "days; 0: it stops now). Default: the platform's, 24 hours.")] = None,
    url: Url = DEFAULT_URL, api_key: ApiKey = None,
) -> None:
    """A new signing secret, printed once. Until the overlap ends every delivery carries
    both signatures, so receivers can move to the new secret one at a time."""
    with sdk_client(url, api_key) as client:
        rotated = client.webhook_secret.rotate(overlap_seconds=overlap)
    until = rotated.previous_valid_until
    typer.echo("the new secret is shown this once; the previous one "
               + (f"signs too until {when(until)} UTC" if until else "stopped signing now"),
               err=True)
    typer.echo(rotated.webhook_secret)


def deliveries(
    run_id: Annotated[str | None, typer.Option(help="Only this run's attempts.")] = None,
    endpoint_id: Annotated[str | None, typer.Option(
        help="Only the attempts to this endpoint.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200, help="How many, newest first.")] = 50,
    url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False,
) -> None:
    """Every attempt to deliver a run's end — to its own webhook URL or to an endpoint —
    newest first, with its outcome and why it failed (runs:read)."""
    page = fetch(url, api_key, lambda client: client.webhook_deliveries.list(
        run_id=run_id, endpoint_id=endpoint_id, limit=limit))
    print_items(page, as_json,
                [AT, "run", "endpoint", "url", "attempt", "outcome", "status", "error"],
                lambda d: [when(d.attempted_at), d.run_id, d.endpoint_id or "(the run's own)",
                           d.url, str(d.attempt), d.outcome,
                           "—" if d.status_code is None else str(d.status_code),
                           d.error or "—"])


webhooks_app.command("deliveries")(deliveries)
