"""Tenant API: exports of everything the tenant has (issue 41, ADR 0044) — request one,
watch it, list them, download its archive (format: docs/reference/export-format.md).

Every route needs the ``data:export`` scope. Another tenant's export answers exactly like
one that never was (404); the archive is 404 until the export is ready. The archive's bytes
pass through the API from the object store in pieces (ADR 0042, 6b: never a presigned URL)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from tenantry.api.auth import DataExporter, DataExporterCaller, PlatformDep
from tenantry.api.links import links, to
from tenantry.api.pagination import PageRequest, keyed_by
from tenantry.api.params import idempotency_header, parse_or_404
from tenantry.blobs import BlobNotFound, BlobStoreUnavailable, object_key
from tenantry.blobs.objects import UNAVAILABLE_RETRY_AFTER
from tenantry.errors import NotFound
from tenantry.exports import jobs
from tenantry.exports.jobs import Export
from tenantry.ids import ExportId

router = APIRouter(prefix="/v1/exports", tags=["exports"])
logger = logging.getLogger(__name__)
_Page = Annotated[PageRequest, Depends(keyed_by(ExportId.pattern()))]

ARCHIVE_MEDIA_TYPE = "application/gzip"
NOT_READY = "The export's archive is not ready (status {status}); see GET /v1/exports/{id}."
NO_STORE = "this API process has no blob store"
UNAVAILABLE = "the blob store is not answering; nothing was lost, retry shortly"

_THE_EXPORT = {"export_id": "$response.body#/export_id"}


class ExportOut(BaseModel):
    export_id: str
    status: Literal["queued", "running", "ready", "failed"] = Field(
        description="queued → running → ready (the archive can be read) or failed (after "
                    "its attempts; `error` says why). A running export whose process died "
                    "is taken up by another, from the start.")
    requested_by: str = Field(description="The API key that asked for it.")
    attempts: int = Field(description="Times a process has started writing it.")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    expires_at: datetime | None = Field(
        description="When the archive and this record are deleted (set once finished).")
    bytes: int | None = Field(description="The archive's size, once ready.")
    counts: dict[str, int] | None = Field(
        description="Once ready: lines per file (`runs`, `events`, ...) and `blob_files`, "
                    "`blob_bytes`, `blobs_missing`, as the archive's manifest.json has them.")
    error: str | None = Field(description="Why the last attempt failed, if it did.")
    url: str
    archive_url: str | None = Field(description="Where the archive is read, once ready.")


class ExportList(BaseModel):
    data: list[ExportOut]
    next_cursor: str | None


def _out(export: Export) -> ExportOut:
    url = f"/v1/exports/{export.export_id}"
    return ExportOut(export_id=str(export.export_id), status=export.status,
                     requested_by=export.requested_by, attempts=export.attempts,
                     created_at=export.created_at, started_at=export.started_at,
                     finished_at=export.finished_at, expires_at=export.expires_at,
                     bytes=export.bytes, counts=export.counts, error=export.error, url=url,
                     archive_url=f"{url}/archive" if export.ready else None)


@router.post("", status_code=202, response_model=ExportOut, responses={
    202: links(GetExport=to("GET", "/v1/exports/{export_id}", "The export: its status.",
                            parameters=_THE_EXPORT),
               ExportArchive=to("GET", "/v1/exports/{export_id}/archive",
                                "Its archive, once ready.", parameters=_THE_EXPORT)),
    429: {"description": "`quota_exceeded`: the tenant has as many exports queued or "
                         "running as it may (`limit`); ask again once one has finished"}})
async def request_export(
    response: Response, caller: DataExporterCaller, p: PlatformDep,
    idempotency_key: str | None = idempotency_header(
        "Retrying with the same key returns the same export."),
) -> ExportOut:
    """Queue an export of everything the tenant has: its runs with their events, traces
    and blobs, the tombstones of its deleted runs, its agents and their versions, test
    sets, evaluations and usage, in one archive. A worker process writes it."""
    export, _ = await jobs.request(p.db, caller.tenant, requested_by=str(caller.key),
                                   idempotency_key=idempotency_key)
    response.headers["Location"] = f"/v1/exports/{export.export_id}"
    return _out(export)


@router.get("", response_model=ExportList)
async def list_exports(page: _Page, tenant: DataExporter, p: PlatformDep) -> ExportList:
    """The tenant's exports, newest first (`cursor`: the last export id of the previous
    page). Finished ones are listed until they expire."""
    found = await jobs.page(p.db, tenant, before=page.position(ExportId.parse),
                            limit=page.limit)
    return page.answer(ExportList, found, _out, key=lambda e: str(e.export_id))


async def _export(export_id: str, tenant: DataExporter, p: PlatformDep) -> Export:
    """The tenant's export the path names: 404 for none (another tenant's too)."""
    return await jobs.get(p.db, tenant, parse_or_404(ExportId, export_id, jobs.NOT_FOUND))


TheExport = Annotated[Export, Depends(_export)]


@router.get("/{export_id}", response_model=ExportOut)
async def get_export(export: TheExport) -> ExportOut:
    """Get an export.

    Its status (queued, running, ready, failed), its size and counts, and the archive's URL
    once ready."""
    return _out(export)


_UNAVAILABLE: dict[int | str, dict[str, Any]] = {503: {
    "description": "`blob_store_unavailable`: the object store is not answering; retry "
                   "after `Retry-After` seconds (nothing was lost).",
    "headers": {"Retry-After": {"description": "Seconds to wait before retrying.",
                                "schema": {"type": "integer",
                                           "const": UNAVAILABLE_RETRY_AFTER}}},
}}


@router.get("/{export_id}/archive", response_class=StreamingResponse, responses={
    200: {"description": "The archive: a gzip-compressed tar (docs/reference/"
                         "export-format.md), `manifest.json` first.",
          "content": {ARCHIVE_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}}},
    **_UNAVAILABLE})
async def read_archive(
    export: TheExport, tenant: DataExporter, p: PlatformDep,
) -> StreamingResponse:
    """The archive's bytes, streamed; 404 until the export is ready (and after it
    expired)."""
    if not export.ready or export.archive_ref is None:
        raise NotFound(NOT_READY.format(status=export.status, id=export.export_id),
                       export_status=export.status)
    if p.blobs is None:
        raise NotFound(NO_STORE)
    pieces = p.blobs.objects.chunks(object_key(tenant, export.archive_ref))
    try:
        # The first piece before the answer starts: a missing object or a store that does
        # not answer is still a 404 or a 503, not a 200 cut short.
        first = await anext(pieces, b"")
    except BlobNotFound:  # ready, then deleted (its expiry, an erase) between two reads
        raise NotFound(jobs.NOT_FOUND) from None
    except BlobStoreUnavailable as exc:
        logger.warning("export read refused: %s", exc.detail, extra={"tenant_id": tenant.value})
        raise BlobStoreUnavailable(UNAVAILABLE) from None

    async def body() -> AsyncIterator[bytes]:
        try:
            if first:
                yield first
            async for piece in pieces:
                yield piece
        finally:
            await pieces.aclose()

    headers = {"Content-Disposition":
               f'attachment; filename="{tenant.value}-{export.export_id}.tar.gz"',
               "X-Content-Type-Options": "nosniff", "Cache-Control": "private, max-age=0"}
    if export.bytes is not None:
        headers["Content-Length"] = str(export.bytes)
    return StreamingResponse(body(), media_type=ARCHIVE_MEDIA_TYPE, headers=headers)
