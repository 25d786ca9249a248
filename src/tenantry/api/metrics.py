"""``GET /metrics``: Prometheus text, for the operator's scraper (operator token).

The database's gauges (queue depth and age, leases held, runs by status, retention:
candidates, tombstones, blob deletions pending, cleanup lag, runs deleted), plus what the
worker loops running in this same process counted (``tenantry up``): queue waits, step
platform time, model calls and errors, breakers, the sandbox pool, budget refusals — and
the shedding level this API process answers new runs with, and its open event streams,
dead-lettered activity tasks by tenant class (read through the console's pool) and, in
``tenantry up``, the activity dispatcher's attempts by outcome. A
standalone ``tenantry worker`` serves its own figures on ``--metrics-port``. Every tenant
label is a tenant *class* (plan), never a tenant id."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse

from tenantry.activities.tasks.metrics import render_dead_letters
from tenantry.api.auth import PlatformDep, operator
from tenantry.retention import metrics as retention
from tenantry.scheduler import metrics, shedding
from tenantry.telemetry.registry import merge

router = APIRouter(tags=["operator"], dependencies=[Depends(operator)])


@router.get("/metrics", response_class=PlainTextResponse,
            responses={200: {"content": {"text/plain": {}}}})
async def get_metrics(p: PlatformDep) -> PlainTextResponse:
    """Gauges and counters labelled by tenant class (plan), never by tenant id."""
    text = await metrics.render(p.db) + await metrics.render_runs(p.db)
    text += await render_dead_letters(p.cross_tenant_db)
    text += await retention.render(p.db)
    if p.cell is not None:
        text += await shedding.render(p.cell.load)
    text += p.streams.render()
    if p.local is not None:
        # Worker loops of one process share one metrics object; render each once.
        seen = {id(e.metrics): e.metrics for e in p.local.engines}
        text += merge(m.render() for m in seen.values())
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")
