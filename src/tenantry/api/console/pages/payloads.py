"""What an event's reference stands for, shown or downloaded from the run's page: a large
tool output kept in the blob store (``output_ref``), a blob a call stored besides its output
(``blob_refs``, by position ``?n=``: a browser's screenshot, shown inline), or a run's large
input, kept in the run's row (``input_ref``). Only references the run's own log holds are
followed: the URL names the event, never the blob."""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from fastapi.responses import Response

from tenantry.api.console import reads
from tenantry.api.console.view import HEADERS, SignedIn, SignedInPage
from tenantry.api.params import int4
from tenantry.blobs import BadBlobRef, BlobNotFound, BlobStoreUnavailable
from tenantry.blobs.objects import UNAVAILABLE_RETRY_AFTER
from tenantry.errors import NotFound
from tenantry.ids import RunId, TenantId
from tenantry.runs import service

router = APIRouter()

PNG = b"\x89PNG\r\n\x1a\n"
RUN_INPUT = "run.input"  # the input_ref of a run whose input is too big for RunCreated


@router.get("/runs/{tenant_id}/{run_id}/events/{seq}/{field}")
async def payload(tenant_id: str, run_id: str, seq: str, field: str, v: SignedInPage) -> Response:
    at = int4(seq)
    try:
        tenant, run = TenantId.parse(tenant_id), RunId.parse(run_id)
    except ValueError:
        return v.not_found("No run with this id.")
    if at is None or field not in ("output_ref", "input_ref", "blob_refs"):
        return v.not_found("No such event field: output_ref, input_ref or blob_refs of an "
                           "event seq.")
    event = await reads.event_at(v.db, tenant, run, at)
    ref = event.data.get(field) if event is not None else None
    if field == "blob_refs":
        index = int4(v.request.query_params.get("n") or "0")
        refs = ref if isinstance(ref, list) else []
        ref = refs[index] if index is not None and index < len(refs) else None
    if not isinstance(ref, str) or not ref:
        return v.not_found(f"Event {at} of this run has no {field}.")
    if field == "input_ref":
        if ref != RUN_INPUT:
            return v.not_found(f"Unknown input reference {ref!r}.")
        try:
            found = await service.get_run(v.db, tenant, run)
        except NotFound:
            return v.not_found("No run with this id.")
        body = orjson.dumps(found.input, option=orjson.OPT_INDENT_2)
        return _answer(body, "application/json", f"{run}-input.json", v)
    store = v.platform.blobs
    if store is None:
        return v.not_found("This API process has no blob store to read from.")
    try:
        body = await store.get(tenant, ref)
    except BlobStoreUnavailable:
        return Response("The blob store is not answering; try again in a few seconds.",
                        status_code=503, media_type="text/plain; charset=utf-8",
                        headers={**HEADERS, "Retry-After": str(UNAVAILABLE_RETRY_AFTER)})
    except (BlobNotFound, BadBlobRef):
        return v.not_found(f"The blob {ref} is not in the store (deleted with the run's "
                           "blobs by retention, or never written: over the tenant's quota).")
    if body.startswith(PNG):
        return _answer(body, "image/png", f"{run}-{at}-screenshot.png", v)
    if field == "blob_refs":
        return _answer(body, "application/octet-stream", f"{run}-{at}-blob", v)
    return _answer(body, "text/plain; charset=utf-8", f"{run}-{at}-output.txt", v)


def _answer(body: bytes, media_type: str, filename: str, v: SignedIn) -> Response:
    headers = dict(HEADERS)
    if v.request.query_params.get("download"):
        headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    return Response(body, media_type=media_type, headers=headers)
