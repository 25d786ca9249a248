"""A run's event log as SSE for a console's run page, which console.js follows (both
consoles: the operator's and the tenant's, each authorizing the request its own way)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from tenantry.api import runs as runs_api
from tenantry.api.console.view import HEADERS
from tenantry.api.params import int4
from tenantry.api.platform import Platform
from tenantry.api.streams import SlotStream
from tenantry.errors import NotFound
from tenantry.ids import RunId, TenantId

__all__ = ["run_events"]


async def run_events(p: Platform, request: Request, tenant_id: str, run_id: str, *,
                     slot_of: str | None) -> Response:
    """The tenant API's stream (same hub, same no-gap/no-repeat resume from ``after`` or
    Last-Event-ID), its slot counted against ``slot_of``: the tenant's own slots, or None
    for the process's cap only. 404 when ``tenant_id`` holds no such run."""
    start_text = request.query_params.get("after") or request.headers.get(
        "last-event-id") or "0"
    start = int4(start_text)
    if start is None:
        return Response("after / Last-Event-ID: an event seq (ASCII digits 0-2147483647)",
                        status_code=400, headers=HEADERS)
    try:
        tenant, run = TenantId.parse(tenant_id), RunId.parse(run_id)
    except ValueError:
        return Response("no such run", status_code=404, headers=HEADERS)
    slot = runs_api.take_stream_slot(p, slot_of)
    try:
        first, ended = await runs_api.first_events(p, tenant, run, start)
    except NotFound:
        slot.release()
        return Response("no such run", status_code=404, headers=HEADERS)
    except BaseException:
        slot.release()
        raise
    return SlotStream(
        # The page shows durable events only: no live deltas (and so no NOTIFY traffic
        # for a run someone looks at).
        runs_api.event_stream(p, tenant, run, start, first, ended=ended, deltas=False), slot,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no",
                 "X-Content-Type-Options": "nosniff"})
