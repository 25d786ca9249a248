"""One run: its page (events, approvals, the trace's waterfall), the page's changing parts
as a fragment the open page re-fetches, and its event stream over SSE."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from tenantry.api.console import live, reads, waterfall
from tenantry.api.console.view import HEADERS, PREFIX, SignedInPage, View, view
from tenantry.errors import NotFound
from tenantry.ids import EvaluationId, RunId, TenantId
from tenantry.runs import service
from tenantry.runs.events import TERMINAL_EVENTS, Event, EventType

router = APIRouter()


async def _run_context(v: View, tenant_id: str, run_id: str) -> dict[str, Any] | None:
    """What the page and its live fragment render; None when there is no such run."""
    try:
        tenant, run = TenantId.parse(tenant_id), RunId.parse(run_id)
        found = await service.get_run(v.db, tenant, run)
    except (ValueError, NotFound):
        return None
    details = await reads.run_details(v.db, tenant, run, found.agent_id, found.last_seq)
    base = f"{PREFIX}/runs/{tenant}/{run}"
    return {
        "title": f"Run {run}", "tenant": tenant, "run": found, "details": details,
        "ended": found.status.terminal and any(
            e.type in TERMINAL_EVENTS for e in details.events),
        "trace": waterfall.layout(details.trace) if details.trace else None,
        "base": base, "blobs": f"{base}/events", "prefix": PREFIX,
    }


@router.get("/runs/{tenant_id}/{run_id}")
async def run_page(tenant_id: str, run_id: str, v: SignedInPage) -> Response:
    context = await _run_context(v, tenant_id, run_id)
    if context is None:
        return v.not_found("No run with this id.")
    events = context["details"].events
    base = context["base"]
    return v.render(
        "run.html", **context, evaluation_id=await _evaluation_of(v, context, events),
        after=events[-1].seq if events else 0, earlier=events[0].seq - 1 if events else 0,
        event_types=" ".join(t.value for t in EventType),
        terminal_types=" ".join(sorted(TERMINAL_EVENTS)),
        stream=f"{base}/events", fragment=f"{base}/live")


async def _evaluation_of(v: View, context: dict[str, Any], events: list[Event]) -> str | None:
    """The evaluation the run is a case of, as its RunCreated records it (the page shows
    only the latest events: the first is read on its own when it is not among them)."""
    first = events[0] if events and events[0].seq == 1 else await reads.event_at(
        v.db, context["tenant"], context["run"].run_id, 1)
    if first is None or first.type != EventType.RUN_CREATED:
        return None
    found = first.data.get("evaluation_id")
    try:
        return str(EvaluationId.parse(found)) if isinstance(found, str) else None
    except ValueError:
        return None


@router.get("/runs/{tenant_id}/{run_id}/live")
async def run_live(tenant_id: str, run_id: str, v: View = Depends(view)) -> Response:
    """The page's changing parts (status, finished time, usage, approvals, trace, answer),
    which the open page fetches again as events arrive (throttled by the script)."""
    if v.session is None:
        return Response("log in again", status_code=401, headers=HEADERS)
    context = await _run_context(v, tenant_id, run_id)
    if context is None:
        return Response("no such run", status_code=404, headers=HEADERS)
    return v.render("_run_live.html", **context)


@router.get("/runs/{tenant_id}/{run_id}/events")
async def run_events(tenant_id: str, run_id: str, v: View = Depends(view)) -> Response:
    """The run's log as SSE for the console, authorized by the operator's session
    instead of a key."""
    if v.session is None:
        return Response("log in again", status_code=401, headers=HEADERS)
    # The operator's streams count against the process's cap, not the run's tenant's.
    return await live.run_events(v.platform, v.request, tenant_id, run_id, slot_of=None)
