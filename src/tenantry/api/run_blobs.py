"""Tenant API: a run's blobs — its tool outputs over the event cap, its sandbox's saved
files, its browser's screenshots — listed from the registry and read back through the API
(ADR 0042: the bytes pass through the API, never a presigned URL, so the object store is
never exposed to tenants and one API key guards both).

Another tenant's run or ref, or a ref of another run, is 404 like one that never was; a
ref that could not be one (a slash, ``..``, a leading dot) is 400; an object store that
does not answer is 503 with Retry-After, and nothing is lost."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, Field

from tenantry.api.auth import PlatformDep, RunsReader
from tenantry.api.params import parse_or_404
from tenantry.api.platform import Platform
from tenantry.blobs import (
    BlobKind,
    BlobNotFound,
    BlobRecord,
    Blobs,
    BlobStoreUnavailable,
    check_ref,
)
from tenantry.blobs.objects import REF_PATTERN, UNAVAILABLE_RETRY_AFTER
from tenantry.errors import NotFound
from tenantry.ids import RunId
from tenantry.runs import service

router = APIRouter(prefix="/v1/runs", tags=["runs"])
logger = logging.getLogger(__name__)

NO_STORE = "this API process has no blob store"
UNAVAILABLE = "the blob store is not answering; nothing was lost, retry shortly"
MEDIA_TYPES = {BlobKind.TOOL_OUTPUT: "text/plain; charset=utf-8",
               BlobKind.SCREENSHOT: "image/png",
               BlobKind.SANDBOX_FILES: "application/x-tar"}
_SUFFIXES = {BlobKind.TOOL_OUTPUT: "txt", BlobKind.SCREENSHOT: "png",
             BlobKind.SANDBOX_FILES: "tar"}
_UNAVAILABLE: dict[int | str, dict[str, Any]] = {503: {
    "description": "`blob_store_unavailable`: the object store is not answering; retry "
                   "after `Retry-After` seconds (nothing was lost).",
    "headers": {"Retry-After": {"description": "Seconds to wait before retrying.",
                                "schema": {"type": "integer", "const": UNAVAILABLE_RETRY_AFTER}}},
}}


class BlobOut(BaseModel):
    ref: str = Field(description="What the run's events name it by (`output_ref`, "
                                 "`blob_refs`, `SandboxSaved.ref`).")
    kind: BlobKind = Field(description="`tool_output`: a tool's whole output over the 8 KiB "
                                       "event cap; `sandbox_files`: the run's work directory "
                                       "(a tar) saved while it waits; `screenshot`: a PNG.")
    bytes: int
    created_at: datetime
    url: str = Field(description="Where its bytes are read (`GET`).")


class BlobList(BaseModel):
    data: list[BlobOut]


def _out(run: RunId, record: BlobRecord) -> BlobOut:
    return BlobOut(ref=record.ref, kind=record.kind, bytes=record.bytes,
                   created_at=record.created_at, url=f"/v1/runs/{run}/blobs/{record.ref}")


def _store(p: Platform) -> Blobs:
    if p.blobs is None:
        raise NotFound(NO_STORE)
    return p.blobs


@router.get("/{run_id}/blobs", response_model=BlobList)
async def list_blobs(run_id: str, tenant: RunsReader, p: PlatformDep) -> BlobList:
    """The run's blobs held now, oldest first. A run's saved files go when it ends; all
    of its blobs go with the run (retention, `DELETE /v1/runs/{run_id}`, erase)."""
    run = parse_or_404(RunId, run_id, service.NOT_FOUND)
    await service.get_run(p.db, tenant, run)  # 404 for a run that is not the tenant's
    return BlobList(data=[_out(run, r) for r in await _store(p).of_run(tenant, run)])


@router.get("/{run_id}/blobs/{ref:path}", response_class=Response, responses={
    200: {"description": "The blob's bytes: `text/plain` (a tool output), `image/png` (a "
                         "screenshot) or `application/x-tar` (saved files).",
          "content": {media: {"schema": {"type": "string", "format": "binary"}}
                      for media in MEDIA_TYPES.values()}},
    **_UNAVAILABLE})
async def read_blob(
    run_id: str,
    # Checked by check_ref below (400 bad_blob_ref, not FastAPI's 422); published here.
    ref: Annotated[str, Path(json_schema_extra={"pattern": REF_PATTERN})],
    tenant: RunsReader, p: PlatformDep,
) -> Response:
    """Read a blob of a run.

    The full bytes of one of the run's stored outputs (a tool output over 8 KiB, say), as
    listed by `GET /v1/runs/{run_id}/blobs`."""
    run = parse_or_404(RunId, run_id, service.NOT_FOUND)
    check_ref(ref)  # 400 before anything is looked up
    store = _store(p)
    record = await store.record(tenant, run, ref)
    try:
        body = await store.get(tenant, ref)
    except BlobNotFound:  # its row without its object: written, never finished, or going
        raise BlobNotFound(f"run {run} has no blob {ref}") from None
    except BlobStoreUnavailable as exc:
        # The detail names the store's endpoint: the operator's log has it, not the tenant.
        logger.warning("blob read refused: %s", exc.detail, extra={"tenant_id": tenant.value})
        raise BlobStoreUnavailable(UNAVAILABLE) from None
    return Response(body, media_type=MEDIA_TYPES[record.kind], headers={
        "Content-Disposition": f'attachment; filename="{run}-{ref}.{_SUFFIXES[record.kind]}"',
        "X-Content-Type-Options": "nosniff", "Cache-Control": "private, max-age=0"})
