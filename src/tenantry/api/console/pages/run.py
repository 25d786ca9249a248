"""One run: its page (events, approvals, the trace's waterfall), the summary the page
polls, and its event stream over SSE."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response

from tenantry.api import runs as runs_api
from tenantry.api.console import reads, waterfall
from tenantry.api.console.filters import usd
from tenantry.api.console.view import HEADERS, PREFIX, SignedIn, View, signed_in, view
from tenantry.api.params import int4
from tenantry.api.streams import SlotStream
from tenantry.errors import NotFound
from tenantry.ids import RunId, TenantId
from tenantry.runs import service
from tenantry.runs.events import TERMINAL_EVENTS, EventType

router = APIRouter()


@router.get("/runs/{tenant_id}/{run_id}")
async def run_page(tenant_id: str, run_id: str, v: SignedIn = Depends(signed_in)) -> Response:
    try:
        tenant, run = TenantId.parse(tenant_id), RunId.parse(run_id)
        found = await service.get_run(v.db, tenant, run)
    except (ValueError, NotFound):
        return v.not_found("No run with this id.")
    details = await reads.run_details(v.db, tenant, run, found.agent_id, found.last_seq)
    after = details.events[-1].seq if details.events else 0
    hidden = details.events[0].seq - 1 if details.events else 0
    return v.render(
        "run.html", title=f"Run {run}", tenant=tenant, run=found,
        details=details, after=after, earlier=hidden,
        ended=found.status.terminal and any(
            e.type in TERMINAL_EVENTS for e in details.events),
        trace=waterfall.layout(details.trace) if details.trace else None,
        event_types=" ".join(t.value for t in EventType),
        terminal_types=" ".join(sorted(TERMINAL_EVENTS)),
        stream=f"{PREFIX}/runs/{tenant}/{run}/events",
        summary=f"{PREFIX}/runs/{tenant}/{run}/summary")


@router.get("/runs/{tenant_id}/{run_id}/summary")
async def run_summary(tenant_id: str, run_id: str, v: View = Depends(view)) -> Response:
    if v.session is None:
        return JSONResponse({"error": "log in again"}, status_code=401, headers=HEADERS)
    try:
        tenant, run = TenantId.parse(tenant_id), RunId.parse(run_id)
        found = await service.get_run(v.db, tenant, run)
    except (ValueError, NotFound):
        return JSONResponse({"error": "no such run"}, status_code=404, headers=HEADERS)
    return JSONResponse({
        "status": found.status.value, "steps": found.steps,
        "input_tokens": found.input_tokens, "output_tokens": found.output_tokens,
        "cost": usd(found.cost_micros), "last_seq": found.last_seq,
    }, headers=HEADERS)


@router.get("/runs/{tenant_id}/{run_id}/events")
async def run_events(tenant_id: str, run_id: str, v: View = Depends(view)) -> Response:
    """The run's log as SSE for the console: the tenant API's stream (same hub, same
    no-gap/no-repeat resume), authorized by the operator's session instead of a key."""
    if v.session is None:
        return Response("log in again", status_code=401, headers=HEADERS)
    start_text = v.request.query_params.get("after") or v.request.headers.get(
        "last-event-id") or "0"
    start = int4(start_text)
    if start is None:
        return Response("after / Last-Event-ID: an event seq (ASCII digits 0-2147483647)",
                        status_code=400, headers=HEADERS)
    try:
        tenant, run = TenantId.parse(tenant_id), RunId.parse(run_id)
    except ValueError:
        return Response("no such run", status_code=404, headers=HEADERS)
    # The operator's streams count against the process's cap, not the run's tenant's.
    slot = runs_api.take_stream_slot(v.platform, None)
    try:
        first, ended = await runs_api.first_events(v.platform, tenant, run, start)
    except NotFound:
        slot.release()
        return Response("no such run", status_code=404, headers=HEADERS)
    except BaseException:
        slot.release()
        raise
    return SlotStream(
        runs_api.event_stream(v.platform, tenant, run, start, first, ended=ended), slot,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no",
                 "X-Content-Type-Options": "nosniff"})
