"""The tenant's runs (``/app``) and one run with its events, approvals and trace."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from tenantry.api.console import reads, waterfall
from tenantry.api.console.view import parse_id
from tenantry.api.tenant_console.view import PREFIX, Page, member
from tenantry.errors import NotFound
from tenantry.ids import RunId
from tenantry.runs import service
from tenantry.runs.events import TERMINAL_EVENTS
from tenantry.tenants.scopes import Scope

router = APIRouter()
PAGE = 50


@router.get("")
async def runs_list(v: Page = Depends(member)) -> Response:
    if not v.may(Scope.RUNS_READ):
        return v.not_allowed(Scope.RUNS_READ)
    try:
        before = parse_id(RunId, v.request.query_params.get("before"))
    except ValueError:
        before = None
    rows = await service.list_runs(v.db, v.member.tenant, before=before, status=None,
                                   limit=PAGE)
    older = f"{PREFIX}?before={rows[-1].run_id}" if len(rows) == PAGE else None
    return v.render("runs.html", title="Runs", rows=rows, older=older)


@router.get("/runs/{run_id}")
async def run_page(run_id: str, v: Page = Depends(member)) -> Response:
    if not v.may(Scope.RUNS_READ):
        return v.not_allowed(Scope.RUNS_READ)
    tenant = v.member.tenant  # only ever the signed-in person's: another's run is not found
    try:
        run = RunId.parse(run_id)
        found = await service.get_run(v.db, tenant, run)
    except (ValueError, NotFound):
        return v.not_found("No run with this id.")
    details = await reads.run_details(v.db, tenant, run, found.agent_id, found.last_seq)
    events = details.events
    return v.render(
        "run.html", title=f"Run {run}", run=found, details=details,
        ended=found.status.terminal and any(e.type in TERMINAL_EVENTS for e in events),
        trace=waterfall.layout(details.trace) if details.trace else None,
        earlier=events[0].seq - 1 if events else 0,
        decide=v.may(Scope.APPROVALS_DECIDE))
