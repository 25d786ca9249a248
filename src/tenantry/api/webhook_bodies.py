"""Bodies of the tenant's webhook routes (``api/webhooks.py``, ADR 0045)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from tenantry.api.fields import Body, HttpUrl, Text
from tenantry.ids import AgentId
from tenantry.runs.webhook_endpoints import MAX_ENDPOINTS
from tenantry.tenants.service import DEFAULT_SECRET_OVERLAP_SECONDS, MAX_SECRET_OVERLAP_SECONDS

RunEnd = Literal["finished", "failed", "cancelled"]


class CreateEndpoint(Body):
    url: HttpUrl = Field(description="Where each run's end is POSTed, as a run's own "
                                     "`webhook` is: an http(s) URL whose host resolves to "
                                     "public addresses only (checked now and at every "
                                     "attempt).")
    statuses: list[RunEnd] | None = Field(
        default=None, min_length=1, max_length=3,
        description="Only runs that end so; every end when omitted.")
    agent_ids: list[Annotated[str, Field(pattern=AgentId.pattern())]] | None = Field(
        default=None, min_length=1, max_length=20,
        description="Only these agents' runs; every agent's when omitted. An id that is "
                    "not one of your agents answers 409 (`field`: `agent_ids`).")
    description: Text | None = Field(default=None, max_length=200)


class EndpointOut(BaseModel):
    endpoint_id: str
    url: str
    statuses: list[str] | None
    agent_ids: list[str] | None
    description: str | None
    created_at: datetime


class EndpointList(BaseModel):
    data: list[EndpointOut] = Field(description=f"At most {MAX_ENDPOINTS} in all.")
    next_cursor: str | None


class RotateSecret(Body):
    overlap_seconds: int = Field(
        default=DEFAULT_SECRET_OVERLAP_SECONDS, ge=0, le=MAX_SECRET_OVERLAP_SECONDS,
        description="How long the current secret keeps signing beside the new one (every "
                    "delivery then carries both signatures); 0 stops it at once.")


class RotatedSecretOut(BaseModel):
    webhook_secret: str = Field(description="The new secret (`whsec_…`), shown only here.")
    previous_valid_until: datetime | None = Field(
        description="Until when the replaced secret signs too; null when it stopped now.")


class DeliveryOut(BaseModel):
    delivery_id: str
    run_id: str
    endpoint_id: str | None = Field(description="Null: the run's own `webhook` URL.")
    url: str
    attempt: int = Field(description="1 to 8.")
    attempted_at: datetime
    outcome: Literal["delivered", "retrying", "failed"] = Field(
        description="`retrying`: this attempt failed and another follows; `failed`: the "
                    "last attempt failed.")
    status_code: int | None = Field(description="The receiver's HTTP status, if it answered.")
    error: str | None = Field(description="Why the attempt failed: a stable reason "
                                          "(`HTTP 503`, `timed out`, `connect failed`, …).")


class DeliveryList(BaseModel):
    data: list[DeliveryOut]
    next_cursor: str | None
