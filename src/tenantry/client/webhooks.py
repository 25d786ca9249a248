"""The typed answers about the webhooks a tenant manages itself (ADR 0045): its endpoints
(``/v1/webhook-endpoints``), a rotation of its signing secret
(``/v1/webhook-secret/rotate``) and its delivery history (``/v1/webhook-deliveries``), read
from the API's JSON as the others are (models.py: ``raw`` keeps the JSON, times are aware
UTC ``datetime`` values).

The signing secret is in one answer only, the rotation that made it, and never in a
``repr``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tenantry.client.models import Json, _maybe_time, _time

__all__ = ["RotatedWebhookSecret", "WebhookDelivery", "WebhookEndpoint"]


def _names(value: Any) -> tuple[str, ...] | None:
    return None if value is None else tuple(str(v) for v in value)


@dataclass(frozen=True, slots=True)
class WebhookEndpoint:
    """A URL that hears the end of the tenant's runs: every run's, or only those that end
    with one of ``statuses`` and are of one of ``agent_ids`` (None: no such filter)."""

    endpoint_id: str
    url: str
    statuses: tuple[str, ...] | None
    agent_ids: tuple[str, ...] | None
    description: str | None
    created_at: datetime
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Json) -> WebhookEndpoint:
        return cls(str(body["endpoint_id"]), str(body["url"]), _names(body.get("statuses")),
                   _names(body.get("agent_ids")), body.get("description"),
                   _time(body["created_at"]), raw=body)


@dataclass(frozen=True, slots=True)
class RotatedWebhookSecret:
    """The new signing secret (``whsec_…``), shown this once. The one it replaced signs
    every delivery beside it until ``previous_valid_until`` (None: it stopped at once)."""

    webhook_secret: str = field(repr=False)
    previous_valid_until: datetime | None
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Json) -> RotatedWebhookSecret:
        return cls(str(body["webhook_secret"]), _maybe_time(body.get("previous_valid_until")),
                   raw=body)


@dataclass(frozen=True, slots=True)
class WebhookDelivery:
    """One attempt to deliver a run's end: to an endpoint, or to the run's own ``webhook``
    URL (``endpoint_id`` None). ``outcome``: ``delivered``, ``retrying`` (another attempt
    follows) or ``failed`` (the last one failed); ``error`` the reason (``HTTP 503``,
    ``timed out``, ...); ``status_code`` the receiver's, if it answered."""

    delivery_id: str
    run_id: str
    endpoint_id: str | None
    url: str
    attempt: int
    attempted_at: datetime
    outcome: str
    status_code: int | None
    error: str | None
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Json) -> WebhookDelivery:
        return cls(str(body["delivery_id"]), str(body["run_id"]), body.get("endpoint_id"),
                   str(body["url"]), int(body["attempt"]), _time(body["attempted_at"]),
                   str(body["outcome"]), body.get("status_code"), body.get("error"), raw=body)
