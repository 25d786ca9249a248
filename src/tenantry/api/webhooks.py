"""Tenant API: webhooks the tenant manages itself (issue 41, ADR 0045) — its endpoints, the
rotation of its signing secret with an overlap, and its delivery history.

An endpoint's URL is held to the rules a run's own ``webhook`` meets at delivery (public
addresses only, unless the platform runs with ``TENANTRY_WEBHOOK_ALLOW_PRIVATE``): checked
at registration too (``422 webhook_url_refused``), so a URL that could never be delivered to
is refused before it is stored, and again at every attempt (runs/webhooks.py)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response

from tenantry.api.auth import IntegrationsManager, PlatformDep, RunsReader
from tenantry.api.links import links, to
from tenantry.api.pagination import PageRequest, keyed_by
from tenantry.api.params import parse_or_404
from tenantry.api.webhook_bodies import (
    CreateEndpoint,
    DeliveryList,
    DeliveryOut,
    EndpointList,
    EndpointOut,
    RotatedSecretOut,
    RotateSecret,
)
from tenantry.ids import AgentId, RunId, WebhookDeliveryId, WebhookEndpointId
from tenantry.runs import webhook_endpoints as endpoints
from tenantry.runs.webhook_endpoints import ENDPOINT_NOT_FOUND, DeliveryAttempt, Endpoint
from tenantry.tenants import service

router = APIRouter(prefix="/v1", tags=["webhooks"])

_EndpointPage = Annotated[PageRequest, Depends(keyed_by(WebhookEndpointId.pattern()))]
_DeliveryPage = Annotated[PageRequest, Depends(keyed_by(WebhookDeliveryId.pattern()))]
_URL_REFUSED: dict[int | str, dict[str, Any]] = {422: {
    "description": "`webhook_url_refused`: no attempt could deliver to the URL (its host "
                   "resolves to an address that is not public); `detail` is the reason"}}
_THE_ENDPOINT = {"endpoint_id": "$response.body#/endpoint_id"}


@router.post("/webhook-endpoints", status_code=201, response_model=EndpointOut,
             responses={201: links(GetEndpoint=to(
                 "GET", "/v1/webhook-endpoints/{endpoint_id}", "The endpoint just registered.",
                 parameters=_THE_ENDPOINT)),
                 409: {"description": "`conflict`: you have 10 endpoints already, or an "
                                      "agent named in `agent_ids` is not yours "
                                      "(`field`: `agent_ids`)."},
                 **_URL_REFUSED})
async def create_endpoint(
    body: CreateEndpoint, tenant: IntegrationsManager, p: PlatformDep,
) -> EndpointOut:
    """Register a URL that receives the end of every run (or of the `statuses` and
    `agent_ids` named), signed and retried as a run's own `webhook` is."""
    agents = ([AgentId.parse(a) for a in body.agent_ids]  # the body's pattern held
              if body.agent_ids is not None else None)
    await endpoints.check_url(body.url, allow_private=p.settings.webhook_allow_private)
    created = await endpoints.register(
        p.db, tenant, url=body.url,
        statuses=list(dict.fromkeys(body.statuses)) if body.statuses is not None else None,
        agent_ids=list(dict.fromkeys(agents)) if agents is not None else None,
        description=body.description)
    return _endpoint_out(created)


@router.get("/webhook-endpoints", response_model=EndpointList)
async def list_endpoints(
    page: _EndpointPage, tenant: IntegrationsManager, p: PlatformDep,
) -> EndpointList:
    """Your endpoints, oldest first."""
    found = await endpoints.list_endpoints(
        p.db, tenant, after=page.position(WebhookEndpointId.parse), limit=page.limit)
    return page.answer(EndpointList, found, _endpoint_out, key=lambda e: str(e.endpoint_id))


@router.get("/webhook-endpoints/{endpoint_id}", response_model=EndpointOut)
async def get_endpoint(
    endpoint_id: str, tenant: IntegrationsManager, p: PlatformDep,
) -> EndpointOut:
    """Get a webhook endpoint.

    Its URL, the statuses and agents it receives, and its description."""
    endpoint = parse_or_404(WebhookEndpointId, endpoint_id, ENDPOINT_NOT_FOUND)
    return _endpoint_out(await endpoints.get_endpoint(p.db, tenant, endpoint))


@router.delete("/webhook-endpoints/{endpoint_id}", status_code=204, response_class=Response)
async def delete_endpoint(
    endpoint_id: str, tenant: IntegrationsManager, p: PlatformDep,
) -> Response:
    """Remove the endpoint; deliveries to it not yet made are dropped with it, the attempts
    made stay in the delivery history."""
    endpoint = parse_or_404(WebhookEndpointId, endpoint_id, ENDPOINT_NOT_FOUND)
    await endpoints.delete_endpoint(p.db, tenant, endpoint)
    return Response(status_code=204)


@router.post("/webhook-secret/rotate", response_model=RotatedSecretOut)
async def rotate_secret(
    tenant: IntegrationsManager, p: PlatformDep, body: RotateSecret | None = None,
) -> RotatedSecretOut:
    """A new signing secret, shown only here. Until `previous_valid_until` every delivery
    is signed by both (`Tenantry-Signature: t=…,v1=<new>,v1=<previous>`); after it, by the
    new one alone. A secret an earlier rotation left signing stops now."""
    overlap = (body or RotateSecret()).overlap_seconds
    rotated = await service.rotate_own_webhook_secret(p.db, tenant, overlap)
    return RotatedSecretOut(webhook_secret=rotated.secret,
                            previous_valid_until=rotated.previous_valid_until)


@router.get("/webhook-deliveries", response_model=DeliveryList)
async def list_deliveries(
    page: _DeliveryPage, tenant: RunsReader, p: PlatformDep,
    run_id: str | None = Query(None, pattern=RunId.pattern(),
                               description="Only this run's attempts."),
    endpoint_id: str | None = Query(None, pattern=WebhookEndpointId.pattern(),
                                    description="Only the attempts to this endpoint."),
) -> DeliveryList:
    """Every attempt to deliver a run's end — to its own `webhook` URL or to an endpoint —
    newest first. Kept as long as the run is (retention, erase and `DELETE /v1/runs/{id}`
    take them with it)."""
    found = await endpoints.history(
        p.db, tenant, before=page.position(WebhookDeliveryId.parse), limit=page.limit,
        run=RunId.parse(run_id) if run_id is not None else None,
        endpoint=WebhookEndpointId.parse(endpoint_id) if endpoint_id is not None else None)
    return page.answer(DeliveryList, found, _delivery_out, key=lambda d: str(d.delivery_id))


def _endpoint_out(e: Endpoint) -> EndpointOut:
    return EndpointOut(
        endpoint_id=str(e.endpoint_id), url=e.url,
        statuses=list(e.statuses) if e.statuses is not None else None,
        agent_ids=[str(a) for a in e.agent_ids] if e.agent_ids is not None else None,
        description=e.description, created_at=e.created_at)


def _delivery_out(d: DeliveryAttempt) -> DeliveryOut:
    return DeliveryOut(
        delivery_id=str(d.delivery_id), run_id=str(d.run_id),
        endpoint_id=str(d.endpoint_id) if d.endpoint_id is not None else None, url=d.url,
        attempt=d.attempt, attempted_at=d.attempted_at,
        outcome=d.outcome,
        status_code=d.status_code, error=d.error)
