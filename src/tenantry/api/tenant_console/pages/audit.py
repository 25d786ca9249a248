"""The tenant's audit trail (tool calls and account changes, newest first), for a role
holding ``audit:read`` — what ``GET /v1/audit`` answers a key with that scope."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from tenantry.api.tenant_console.view import PREFIX, AuditPage
from tenantry.audit import trail

router = APIRouter()
PAGE = 50


@router.get("/audit")
async def audit(v: AuditPage) -> Response:
    try:
        after = trail.parse_cursor(v.request.query_params.get("after", ""))
    except ValueError:
        after = None
    entries = await trail.trail_page(v.db, v.member.tenant, trail.TrailQuery(), after=after,
                                     limit=PAGE)
    older = f"{PREFIX}/audit?after={entries[-1].cursor}" if len(entries) == PAGE else None
    return v.render("audit.html", title="Audit trail", entries=entries, older=older)
