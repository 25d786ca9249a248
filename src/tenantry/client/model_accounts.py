"""The typed answer about the tenant's own model provider accounts (bring your own key:
``/v1/model-accounts``), read from the API's JSON as the others are (models.py: ``raw``
keeps the JSON, times are aware UTC ``datetime`` values).

The provider key is write-only: no answer carries it, so no field here holds it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from tenantry.client.models import Json, _maybe_time

__all__ = ["ModelAccount"]


@dataclass(frozen=True, slots=True)
class ModelAccount:
    """A provider account that serves the tenant's runs alone, for ``models``, with its
    own ``rpm``/``tpm``; lower ``priority`` is preferred. ``secret`` names the vault secret
    that holds its key; ``registered_by``: ``tenant`` (with its own key) or ``operator``.
    A disabled one (``enabled`` False) is listed but no longer routed to."""

    account_id: str
    provider: str
    base_url: str
    models: tuple[str, ...]
    region: str
    rpm: int | None
    tpm: int | None
    priority: int
    tenant_id: str | None
    secret: str | None
    has_secret: bool
    created_at: datetime | None
    enabled: bool
    registered_by: str
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Json) -> ModelAccount:
        return cls(str(body["account_id"]), str(body["provider"]), str(body["base_url"]),
                   tuple(str(m) for m in body.get("models") or ()), str(body["region"]),
                   body.get("rpm"), body.get("tpm"), int(body.get("priority") or 0),
                   body.get("tenant_id"), body.get("secret"), bool(body.get("has_secret")),
                   _maybe_time(body.get("created_at")), bool(body.get("enabled", True)),
                   str(body.get("registered_by", "operator")), raw=body)
