"""The runs list, filtered by tenant, status and agent; its rows refresh live."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter
from fastapi.responses import Response

from tenantry.api.console import find, reads
from tenantry.api.console.view import PREFIX, SignedInPage, parse_id
from tenantry.db.status import console_status
from tenantry.ids import AgentId, RunId, TenantId
from tenantry.runs.events import RunStatus

router = APIRouter()


@router.get("/runs")
async def runs_list(v: SignedInPage) -> Response:
    q = v.request.query_params
    filters = {"tenant": q.get("tenant", "").strip(), "status": q.get("status", ""),
               "agent": q.get("agent", "").strip()}
    error = None
    rows: list[reads.RunRow] = []
    try:
        tenant = parse_id(TenantId, filters["tenant"])
        agent = parse_id(AgentId, filters["agent"])
        before = parse_id(RunId, q.get("before"))
        status = RunStatus(filters["status"]) if filters["status"] else None
    except ValueError as exc:
        error = str(exc)
    else:
        rows = await reads.runs_page(v.console_db, tenant=tenant,
                                     status=status.value if status else None,
                                     agent=agent, before=before)
    kept = {k: v for k, v in filters.items() if v}
    older = (f"{PREFIX}/runs?{urlencode({**kept, 'before': str(rows[-1].run_id)})}"
             if len(rows) == reads.PAGE else None)
    again = {**kept, "partial": "1"}
    if q.get("before"):
        again["before"] = q["before"]
    names = await find.names_of(v.db, [(r.tenant, r.agent_id) for r in rows])
    context: dict[str, Any] = {
        "rows": rows, "names": names, "filters": filters, "error": error, "older": older,
        "statuses": [s.value for s in RunStatus],
        "refresh": f"{PREFIX}/runs?{urlencode(again)}"}
    if q.get("partial") == "1":  # the live refresh: just the table rows
        return v.render("_run_rows.html", **context)
    # The console's home says which releases share the database (docs/how-to/upgrade.md).
    releases = (await console_status(v.console_db)).summary()
    return v.render("runs.html", title="Runs", releases=releases, **context)
