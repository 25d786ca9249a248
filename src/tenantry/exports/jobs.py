"""A tenant's exports as the API shows them (ADR 0044): requesting one (idempotent by key),
reading one, listing them. Each is a row of ``exports`` (migration 0051), carried out by
:mod:`.runner`; every read and write here is in the tenant's transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.errors import QuotaExceeded
from tenantry.ids import ExportId, TenantId

Q = load(__package__)

NOT_FOUND = "No export with this id."
#: Exports of one tenant queued or running at once: each reads every row the tenant has,
#: so a loop of requests is refused rather than queued behind itself.
MAX_UNFINISHED = 2


class ExportsBusy(QuotaExceeded):
    """The tenant has :data:`MAX_UNFINISHED` exports not finished yet."""


@dataclass(frozen=True, slots=True)
class Export:
    export_id: ExportId
    status: str  # queued | running | ready | failed
    requested_by: str
    attempts: int
    bytes: int | None
    counts: dict[str, int] | None
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    expires_at: datetime | None
    archive_ref: str | None  # the object's ref under the tenant's prefix, once claimed

    @classmethod
    def from_row(cls, row: Any) -> Export:
        return cls(export_id=ExportId(row["export_id"]), status=row["status"],
                   requested_by=row["requested_by"], attempts=row["attempts"],
                   bytes=row["bytes"], counts=row["counts"], error=row["error"],
                   created_at=row["created_at"], started_at=row["started_at"],
                   finished_at=row["finished_at"], expires_at=row["expires_at"],
                   archive_ref=row["archive_ref"])

    @property
    def ready(self) -> bool:
        return self.status == "ready" and self.archive_ref is not None


async def request(db: Database, tenant: TenantId, *, requested_by: str,
                  idempotency_key: str | None) -> tuple[Export, bool]:
    """A new export of everything ``tenant`` has, queued; with a key used before, the
    export that key made. Returns it and whether it is new. :class:`ExportsBusy` when the
    tenant has :data:`MAX_UNFINISHED` unfinished (and the key is new)."""
    async with db.tenant_tx(tenant) as conn:
        await conn.execute(Q.lock, tenant.value)
        made = await conn.fetchval(Q.create, tenant.value, ExportId.new().uuid,
                                   idempotency_key, requested_by, MAX_UNFINISHED)
        new = made is not None
        if made is None and idempotency_key is not None:
            made = await conn.fetchval(Q.by_key, tenant.value, idempotency_key)
        if made is None:
            raise ExportsBusy(
                f"This tenant has {MAX_UNFINISHED} exports queued or running; wait for one "
                "to finish (GET /v1/exports), then ask again.", limit=MAX_UNFINISHED)
        row = await conn.fetchrow(Q.get, tenant.value, made)
    return Export.from_row(row), new


async def get(db: Database, tenant: TenantId, export: ExportId) -> Export:
    """The export, or NotFound — another tenant's looks like none at all."""
    row = await db.tenant_row(tenant, Q.get, export.uuid, missing=NOT_FOUND)
    return Export.from_row(row)


async def page(db: Database, tenant: TenantId, *, before: ExportId | None,
               limit: int) -> list[Export]:
    """Newest first; ``before``: the last export id of the previous page."""
    async with db.tenant_tx(tenant) as conn:
        rows = await conn.fetch(Q.page, tenant.value, before.uuid if before else None, limit)
    return [Export.from_row(r) for r in rows]
