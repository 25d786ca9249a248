"""``GET /metrics``: Prometheus text, for the operator's scraper (operator token)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse

from tenantry.api.auth import operator, platform
from tenantry.api.platform import Platform
from tenantry.scheduler import metrics

router = APIRouter(tags=["operator"], dependencies=[Depends(operator)])


@router.get("/metrics", response_class=PlainTextResponse,
            responses={200: {"content": {"text/plain": {}}}})
async def get_metrics(p: Platform = Depends(platform)) -> PlainTextResponse:
    """Gauges labelled by tenant class (plan), never by tenant id."""
    return PlainTextResponse(await metrics.render(p.db),
                             media_type="text/plain; version=0.0.4")
