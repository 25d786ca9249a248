"""``/metrics`` of a standalone ``tenantry worker`` (``--metrics-port``): the process's
worker metrics in the Prometheus text format, behind the operator token; and its
``/readyz`` (telemetry/readiness.py), open as the API's is."""

from __future__ import annotations

import hmac

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from tenantry.telemetry.readiness import Readiness
from tenantry.telemetry.worker import WorkerMetrics

CONTENT_TYPE = "text/plain; version=0.0.4"


def metrics_app(metrics: WorkerMetrics, operator_token: str,
                readiness: Readiness | None = None) -> Starlette:
    async def scrape(request: Request) -> Response:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
                token.strip().encode(), operator_token.encode()):
            return PlainTextResponse("Invalid operator token.\n", status_code=401)
        return PlainTextResponse(metrics.render(), media_type=CONTENT_TYPE)

    routes = [Route("/metrics", scrape)]
    if readiness is not None:
        async def readyz(_request: Request) -> Response:
            return await readiness.answer()

        routes.append(Route("/readyz", readyz))
    return Starlette(routes=routes)
