"""The charts page: the last hour's runs and queue waits, slots against caps, the month's
spend and tokens, model calls per account and the sandbox pools — for every tenant by tenant
class, or for one tenant (``?tenant=``). Drawn on the server as SVG (svg.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter
from fastapi.responses import Response

from tenantry.api.console import chart_data, svg
from tenantry.api.console.view import SignedInPage, parse_id
from tenantry.ids import TenantId

router = APIRouter()


@router.get("/charts")
async def charts(v: SignedInPage) -> Response:
    given = (v.request.query_params.get("tenant") or "").strip()
    try:
        tenant = parse_id(TenantId, given)
    except ValueError:
        return v.render("error.html", status=400, title="Not a tenant id",
                        message=f"{given!r} is not a tenant id "
                                "(3-64 characters: a-z, 0-9, _ or -).")
    w = chart_data.Window.at(datetime.now(UTC))
    more = False
    if tenant is None:
        figures, more = await chart_data.all_tenants(v.db, v.console_db, w)
    else:
        found = await chart_data.one_tenant(v.db, tenant, w)
        if found is None:
            return v.not_found("No tenant with this id.")
        figures = [found]
    drawn = chart_data.charts(figures, w, v.platform.local, single=tenant is not None)
    return v.render("charts.html", title="Charts", tenant=tenant, more=more,
                    shown=len(figures), limit=chart_data.CHART_TENANTS,
                    runs_limit=chart_data.RUNS_PER_TENANT,
                    cut=[f.tenant for f in figures if f.runs_cut],
                    charts=[(c, svg.render(c)) for c in drawn], fmt=svg.format_value,
                    now=w.now)
