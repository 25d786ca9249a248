"""The tenants page: each tenant's plan, load and month's spend, and the queue depth."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlencode

from fastapi import APIRouter
from fastapi.responses import Response

from tenantry.api.console import reads
from tenantry.api.console.view import PREFIX, SignedInPage, id_or_none
from tenantry.ids import TenantId

router = APIRouter()


@router.get("/tenants")
async def tenants(v: SignedInPage) -> Response:
    after = id_or_none(TenantId, v.request.query_params.get("after"))
    rows, depth = await reads.tenants_page(v.console_db, after=after)
    more = (f"{PREFIX}/tenants?{urlencode({'after': rows[-1].tenant.value})}"
            if len(rows) == reads.PAGE else None)
    return v.render("tenants.html", title="Tenants", rows=rows, queue_depth=depth,
                    more=more, month=datetime.now(UTC).strftime("%B %Y"))
