"""The typed answer about an export of everything the tenant has (``/v1/exports``, ADR
0044), read from the API's JSON as the others are (models.py: ``raw`` keeps the JSON, times
are aware UTC ``datetime`` values). The archive's format: docs/reference/export-format.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from tenantry.client.models import Json, _maybe_time, _time

__all__ = ["EXPORT_ENDS", "Export"]

#: The statuses of an export that will not change again.
EXPORT_ENDS = frozenset({"ready", "failed"})


@dataclass(frozen=True, slots=True)
class Export:
    """An export: ``queued`` → ``running`` → ``ready`` (its archive can be read until
    ``expires_at``) or ``failed`` (``error`` says why). ``counts``, once ready: lines per
    file of the archive and its blobs, as its ``manifest.json`` has them;
    ``requested_by``: the id of the key that asked."""

    export_id: str
    status: str
    requested_by: str
    attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    expires_at: datetime | None
    bytes: int | None
    counts: dict[str, int] | None
    error: str | None
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @property
    def ready(self) -> bool:
        """Its archive can be downloaded."""
        return self.status == "ready"

    @property
    def ended(self) -> bool:
        """Ready or failed: its status will not change again."""
        return self.status in EXPORT_ENDS

    @classmethod
    def from_json(cls, body: Json) -> Export:
        counts = body.get("counts")
        return cls(str(body["export_id"]), str(body["status"]),
                   str(body.get("requested_by", "")), int(body.get("attempts") or 0),
                   _time(body["created_at"]), _maybe_time(body.get("started_at")),
                   _maybe_time(body.get("finished_at")), _maybe_time(body.get("expires_at")),
                   body.get("bytes"),
                   {str(k): int(v) for k, v in counts.items()} if counts else None,
                   body.get("error"), raw=body)
