"""The tenant's runs (``/app``) and one run with its events, approvals and trace; the run's
changing parts as a fragment and its events over SSE, which the open page follows as the
operator console's run page does (the same console.js)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from tenantry.api.console import live, reads, waterfall
from tenantry.api.console.view import HEADERS, id_or_none
from tenantry.api.tenant_console.view import PREFIX, Page, RunsPage
from tenantry.errors import NotFound
from tenantry.ids import RunId
from tenantry.runs import service
from tenantry.runs.events import TERMINAL_EVENTS, EventType
from tenantry.tenants.scopes import Scope

router = APIRouter()
PAGE = 50


@router.get("")
async def runs_list(v: RunsPage) -> Response:
    before = id_or_none(RunId, v.request.query_params.get("before"))
    rows = await service.list_runs(v.db, v.member.tenant, before=before, status=None,
                                   limit=PAGE)
    older = f"{PREFIX}?before={rows[-1].run_id}" if len(rows) == PAGE else None
    return v.render("runs.html", title="Runs", rows=rows, older=older)


async def _run_context(v: Page, run_id: str) -> dict[str, Any] | None:
    """What the page and its live fragment render; None when the person's tenant has no
    such run (only ever theirs: another tenant's run is not found)."""
    tenant = v.member.tenant
    try:
        run = RunId.parse(run_id)
        found = await service.get_run(v.db, tenant, run)
    except (ValueError, NotFound):
        return None
    details = await reads.run_details(v.db, tenant, run, found.agent_id, found.last_seq)
    return {
        "title": f"Run {run}", "run": found, "details": details,
        "ended": found.status.terminal and any(
            e.type in TERMINAL_EVENTS for e in details.events),
        "trace": waterfall.layout(details.trace) if details.trace else None,
        "decide": v.may(Scope.APPROVALS_DECIDE),
    }


@router.get("/runs/{run_id}")
async def run_page(run_id: str, v: RunsPage) -> Response:
    context = await _run_context(v, run_id)
    if context is None:
        return v.not_found("No run with this id.")
    events = context["details"].events
    base = f"{PREFIX}/runs/{context['run'].run_id}"
    return v.render(
        "run.html", **context,
        after=events[-1].seq if events else 0, earlier=events[0].seq - 1 if events else 0,
        event_types=" ".join(t.value for t in EventType),
        terminal_types=" ".join(sorted(TERMINAL_EVENTS)),
        stream=f"{base}/events", fragment=f"{base}/live")


@router.get("/runs/{run_id}/live")
async def run_live(run_id: str, v: RunsPage) -> Response:
    """The page's changing parts (status, usage, approvals with their forms and the
    session's CSRF token, outcome, trace), fetched again by the open page as events
    arrive."""
    context = await _run_context(v, run_id)
    if context is None:
        return Response("no such run", status_code=404, headers=HEADERS)
    return v.render("_run_live.html", **context)


@router.get("/runs/{run_id}/events")
async def run_events(run_id: str, v: RunsPage) -> Response:
    """The run's log as SSE, for the person's own tenant only, counted against that
    tenant's stream slots as its API key's stream would be."""
    tenant = v.member.tenant
    return await live.run_events(v.platform, v.request, tenant.value, run_id,
                                 slot_of=tenant.value)
