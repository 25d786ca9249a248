"""A tenant's webhook endpoints and its delivery history (ADR 0045).

An endpoint is a URL that hears the end of every run of its tenant (or of the statuses and
agents it names), besides a run's own ``webhook``: its deliveries are queued with the run's
terminal event and sent by ``runs/webhooks.py`` as the run's own are. A tenant has at most
``MAX_ENDPOINTS``. The history is every attempt to either kind of destination, newest
first, with the stable reasons the run's log shows (``webhooks.py``), never an address."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound, TenantryError
from tenantry.ids import AgentId, RunId, TenantId, WebhookDeliveryId, WebhookEndpointId
from tenantry.runs.webhooks import NOT_RESOLVED, Refused, destination

Q = load(__package__, "webhook_endpoints.sql")

#: The table's slots say the same (migration 0052): each endpoint is one more delivery
#: queued with every run's end, so the number is bounded.
MAX_ENDPOINTS = 10
ENDPOINT_NOT_FOUND = "No webhook endpoint with this id."
#: Two registrations that pick the same free slot: the loser looks again, this many times.
_SLOT_TRIES = 3
#: A registration waits this long for the URL's name to resolve, then stores it unchecked
#: (every attempt checks it again).
RESOLVE_SECONDS = 5.0


class WebhookUrlRefused(TenantryError):
    """An endpoint URL no attempt could deliver to: ``detail`` is the stable reason an
    attempt would record (``destination refused: not a public address``, ...)."""

    type: ClassVar[str] = "webhook_url_refused"
    status: ClassVar[int] = 422
    title: ClassVar[str] = "Webhook URL refused"


async def check_url(url: str, *, allow_private: bool) -> None:
    """Refuse a URL no attempt could ever deliver to, by the check every attempt makes
    (``webhooks.destination``): not http(s) with a host, or a name with an address that is
    not public. A name that does not resolve (yet, or within ``RESOLVE_SECONDS``) passes:
    DNS may be on its way, and every attempt resolves and vets it again."""
    try:
        async with asyncio.timeout(RESOLVE_SECONDS):
            await destination(url, allow_private=allow_private)
    except Refused as exc:
        if exc.reason != NOT_RESOLVED:
            raise WebhookUrlRefused(exc.reason, field="url") from None
    except TimeoutError:
        pass


@dataclass(frozen=True, slots=True)
class Endpoint:
    endpoint_id: WebhookEndpointId
    url: str
    statuses: tuple[str, ...] | None  # None: every end
    agent_ids: tuple[AgentId, ...] | None  # None: every agent's runs
    description: str | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: Any) -> Endpoint:
        return cls(WebhookEndpointId(row["endpoint_id"]), row["url"],
                   tuple(row["statuses"]) if row["statuses"] is not None else None,
                   tuple(AgentId(a) for a in row["agent_ids"])
                   if row["agent_ids"] is not None else None,
                   row["description"], row["created_at"])


@dataclass(frozen=True, slots=True)
class DeliveryAttempt:
    delivery_id: WebhookDeliveryId
    run_id: RunId
    endpoint_id: WebhookEndpointId | None  # None: the run's own webhook
    url: str
    attempt: int
    attempted_at: datetime
    outcome: str  # delivered, retrying, failed
    status_code: int | None
    error: str | None  # a stable reason (webhooks.py)


async def register(
    db: Database, tenant: TenantId, *, url: str, statuses: Sequence[str] | None,
    agent_ids: Sequence[AgentId] | None, description: str | None,
) -> Endpoint:
    """A new endpoint. Conflict when an agent named is not the tenant's, or when the
    tenant has ``MAX_ENDPOINTS`` already. The URL is checked by the caller (check_url)."""
    agents = [a.uuid for a in agent_ids] if agent_ids is not None else None
    async with db.tenant_tx(tenant) as conn:
        if agents:
            known = {r["agent_id"] for r in await conn.fetch(Q.known_agents, tenant.value,
                                                                agents)}
            missing = [a for a in agents if a not in known]
            if missing:  # the request is right, the state is not: a conflict (api.md)
                raise Conflict(f"agent_ids: you have no agent {AgentId(missing[0])}",
                               field="agent_ids", missing=[str(AgentId(m)) for m in missing])
        for _ in range(_SLOT_TRIES):
            row = await conn.fetchrow(
                Q.insert_endpoint, tenant.value, WebhookEndpointId.new().uuid, url,
                list(statuses) if statuses is not None else None, agents, description)
            if row is not None:
                return Endpoint.from_row(row)
            if await conn.fetchval(Q.count_endpoints, tenant.value) >= MAX_ENDPOINTS:
                break
    raise Conflict(f"A tenant has at most {MAX_ENDPOINTS} webhook endpoints: delete one "
                   "first.", limit=MAX_ENDPOINTS)


async def list_endpoints(
    db: Database, tenant: TenantId, *, after: WebhookEndpointId | None, limit: int
) -> list[Endpoint]:
    async with db.tenant_tx(tenant) as conn:
        rows = await conn.fetch(Q.list_endpoints, tenant.value,
                                after.uuid if after else None, limit)
    return [Endpoint.from_row(r) for r in rows]


async def get_endpoint(db: Database, tenant: TenantId, endpoint: WebhookEndpointId) -> Endpoint:
    row = await db.tenant_row(tenant, Q.get_endpoint, endpoint.uuid,
                              missing=ENDPOINT_NOT_FOUND)
    return Endpoint.from_row(row)


async def delete_endpoint(db: Database, tenant: TenantId, endpoint: WebhookEndpointId) -> None:
    """Gone, and its deliveries not yet made with it; its attempts stay in the history."""
    async with db.tenant_tx(tenant) as conn:
        done = await conn.execute(Q.delete_endpoint, tenant.value, endpoint.uuid)
    if not done.endswith(" 1"):
        raise NotFound(ENDPOINT_NOT_FOUND)


async def history(
    db: Database, tenant: TenantId, *, before: WebhookDeliveryId | None, limit: int,
    run: RunId | None = None, endpoint: WebhookEndpointId | None = None,
) -> list[DeliveryAttempt]:
    """Attempts newest first (another tenant's run or endpoint: an empty list)."""
    async with db.tenant_tx(tenant) as conn:
        rows = await conn.fetch(Q.delivery_history, tenant.value, _uuid(before),
                                _uuid(run), _uuid(endpoint), limit)
    return [DeliveryAttempt(
        WebhookDeliveryId(r["delivery_id"]), RunId(r["run_id"]),
        WebhookEndpointId(r["endpoint_id"]) if r["endpoint_id"] is not None else None,
        r["url"], r["attempt"], r["attempted_at"], r["outcome"], r["status_code"],
        r["error"]) for r in rows]


def _uuid(value: WebhookDeliveryId | RunId | WebhookEndpointId | None) -> uuid.UUID | None:
    return value.uuid if value is not None else None
