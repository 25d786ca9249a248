"""``GET /metrics``: Prometheus text, for the operator's scraper (operator token).

The database's gauges (queue depth and age, leases held, runs by status, retention:
candidates, tombstones, blob deletions pending, cleanup lag, runs deleted; scheduled billing
reconciliation per operator model account), plus what the
worker loops running in this same process counted (``tenantry up``): queue waits, step
platform time, model calls and errors, breakers, the sandbox pool, budget refusals — and
the shedding level this API process answers new runs with, and its open event streams,
dead-lettered activity tasks by tenant class (read through the console's pool), the blob
store calls that failed unavailable and, in ``tenantry up``, the activity dispatcher's
attempts by outcome. A
standalone ``tenantry worker`` serves its own figures on ``--metrics-port``. Every tenant
label is a tenant *class* (plan), never a tenant id.

It also counts this process's requests by route class and outcome (api/availability.py).
While the database does not answer, it still answers 200 with what this process holds
(requests, streams, its workers' figures) and ``tenantry_database_up 0``: an outage is an
alert, not a failed scrape. The operator token is then checked against what the database
last said of it (api/auth.py's ``scraper``)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import PlainTextResponse

from tenantry.activities.tasks.metrics import render_dead_letters
from tenantry.api.auth import PlatformDep, scraper
from tenantry.api.platform import Platform
from tenantry.billing import metrics as billing
from tenantry.db import DATABASE_DOWN
from tenantry.retention import metrics as retention
from tenantry.scheduler import metrics, shedding
from tenantry.telemetry.blob_store import watch_blob_store
from tenantry.telemetry.registry import Registry, merge

router = APIRouter(tags=["operator"])

DATABASE_UP_HELP = ("# HELP tenantry_database_up 1 when this scrape read the database's "
                    "gauges, 0 when the database did not answer (the rest is this "
                    "process's own).\n# TYPE tenantry_database_up gauge\n")


@router.get("/metrics", response_class=PlainTextResponse, dependencies=[Depends(scraper)],
            responses={200: {"content": {"text/plain": {}}}})
async def get_metrics(request: Request, p: PlatformDep) -> PlainTextResponse:
    """Gauges and counters labelled by tenant class (plan), never by tenant id."""
    try:
        text = await _database_gauges(p)
        up = 1
    except DATABASE_DOWN as exc:
        p.db.outage.failed("GET /metrics", exc)
        text, up = "", 0
    text += f"{DATABASE_UP_HELP}tenantry_database_up {up}\n"
    text += request.app.state.requests.render()
    text += p.streams.render()
    parts: list[str] = []
    blobs = p.blobs
    if blobs is not None:
        blob_store = Registry()
        watch_blob_store(blob_store, lambda: blobs.failures)
        parts.append(blob_store.render())
    if p.local is not None:
        # Worker loops of one process share one metrics object; render each once.
        seen = {id(e.metrics): e.metrics for e in p.local.engines}
        parts += [m.render() for m in seen.values()]
    # One merge: the API's blob store failures and its worker loops' (tenantry up) are
    # one series each, summed, not two families of one name.
    text += merge(parts)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


async def _database_gauges(p: Platform) -> str:
    text = await metrics.render(p.db) + await metrics.render_runs(p.db)
    text += await render_dead_letters(p.cross_tenant_db)
    text += await retention.render(p.db)
    text += await billing.render(p.db)
    if p.cell is not None:
        text += await shedding.render(p.cell.load)
    return text
