"""The API's availability as its clients see it: ``tenantry_api_requests_total{route_class,
outcome}``, counted by an ASGI middleware around the whole app (routers are included lazily
here, so no per-router dependency sees every request; a middleware does, the 404s and
413s that no route answered included). docs/how-to/metrics.md lists the classes and rules.

Route class, from the matched route's template (the consoles by their path prefix; a path
no route matched by its prefix alone): one of a fixed set, whatever clients send:

- ``runs_create``: ``POST /v1/runs``, the hot path.
- ``stream``: ``GET /v1/runs/{run_id}/events``, a run's event stream.
- ``tenant_read`` / ``tenant_write``: the rest of ``/v1`` (and the OAuth callback), by
  method: GET, HEAD and OPTIONS read; every other method writes.
- ``operator``: ``/admin/v1``.
- ``console``: the operator's (``/console``) and the tenants' (``/app``) consoles.
- ``meta``: ``/healthz``, ``/readyz``, ``/openapi.json``.
- ``unmatched``: a path no route serves and outside those prefixes.

``/metrics`` is not counted: a scrape is the monitoring itself, every 15 s from each
scraper, and its own failures show as Prometheus's ``up``.

Outcome, from what was answered: ``ok`` (1xx-3xx), ``client_error`` (4xx), ``server_error``
(5xx, or an exception that reached the server), ``timeout`` (a 504, or a client that went
away before its answer was complete, except from an event stream, which a client ends by
leaving), ``unavailable_declared`` (a 503 with ``Retry-After``: the database is away, the
cell sheds load, the tenant is moving, or the process says it is not ready — the platform
saying when to come back, counted apart from failures it did not see coming)."""

from __future__ import annotations

import asyncio
import enum

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tenantry.telemetry.registry import Counter, Registry


class RouteClass(enum.StrEnum):
    RUNS_CREATE = "runs_create"
    STREAM = "stream"
    TENANT_READ = "tenant_read"
    TENANT_WRITE = "tenant_write"
    OPERATOR = "operator"
    CONSOLE = "console"
    META = "meta"
    UNMATCHED = "unmatched"


class Outcome(enum.StrEnum):
    OK = "ok"
    CLIENT_ERROR = "client_error"
    SERVER_ERROR = "server_error"
    TIMEOUT = "timeout"
    UNAVAILABLE_DECLARED = "unavailable_declared"


#: Not counted (see above).
UNCOUNTED = frozenset({"/metrics"})
_META = frozenset({"/healthz", "/readyz", "/openapi.json"})
_READS = frozenset({"GET", "HEAD", "OPTIONS"})
_CONSOLES = ("/console", "/app")


def route_class(method: str, where: str) -> RouteClass:
    """``where``: the matched route's template, else the request's path."""
    if where in _META:
        return RouteClass.META
    if where == "/v1/runs" and method == "POST":
        return RouteClass.RUNS_CREATE
    if where == "/v1/runs/{run_id}/events":
        return RouteClass.STREAM
    if where.startswith("/admin/"):
        return RouteClass.OPERATOR
    if any(where == prefix or where.startswith(prefix + "/") for prefix in _CONSOLES):
        return RouteClass.CONSOLE
    if where.startswith("/v1/") or where.startswith("/oauth/"):
        return RouteClass.TENANT_READ if method in _READS else RouteClass.TENANT_WRITE
    return RouteClass.UNMATCHED


def outcome(status: int | None, *, retry_after: bool, gone: bool) -> Outcome:
    """``status`` None: nothing was answered (an exception reached the server, which
    answers 500). ``gone``: the client left before the answer was complete."""
    if gone:
        return Outcome.TIMEOUT
    if status is None or status >= 500:
        if status == 504:
            return Outcome.TIMEOUT
        if status == 503 and retry_after:
            return Outcome.UNAVAILABLE_DECLARED
        return Outcome.SERVER_ERROR
    return Outcome.CLIENT_ERROR if status >= 400 else Outcome.OK


def requests_counter(registry: Registry) -> Counter:
    return registry.counter(
        "tenantry_api_requests_total",
        "Requests this API process answered, by route class (runs_create, stream, "
        "tenant_read, tenant_write, operator, console, meta, unmatched) and outcome (ok, "
        "client_error, server_error, timeout, unavailable_declared). /metrics is not "
        "counted.", ("route_class", "outcome"))


class CountRequests:
    """Outermost middleware: each HTTP request once, when its answer is complete."""

    def __init__(self, app: ASGIApp, counter: Counter) -> None:
        self.app = app
        self.counter = counter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNCOUNTED:
            await self.app(scope, receive, send)
            return
        status: int | None = None
        retry_after = complete = gone = False

        async def receiving() -> Message:
            nonlocal gone
            message = await receive()
            if message["type"] == "http.disconnect" and not complete:
                gone = True
            return message

        async def sending(message: Message) -> None:
            nonlocal status, retry_after, complete, gone
            if message["type"] == "http.response.start":
                status = int(message["status"])
                retry_after = any(name.lower() == b"retry-after"
                                  for name, _ in message.get("headers", ()))
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                complete = True  # before the send: a disconnect read meanwhile is not early
            try:
                await send(message)
            except OSError:
                gone = not complete
                raise

        try:
            await self.app(scope, receiving, sending)
        except asyncio.CancelledError:  # the server gave up on it (a client gone, a stop)
            gone = gone or not complete
            raise
        except Exception:  # the server answers 500, whatever was started
            if not complete:
                status = None
            raise
        finally:
            self._count(scope, status, retry_after=retry_after, gone=gone)

    def _count(self, scope: Scope, status: int | None, *, retry_after: bool,
               gone: bool) -> None:
        method, path = scope["method"], scope["path"]
        # The consoles by their prefix: their routers are included under it, and a route
        # included so names its template without it ("/runs" for /console/runs).
        kind = route_class(method, path)
        if kind is not RouteClass.CONSOLE:
            route = scope.get("route")
            where = getattr(route, "path_format", None) or getattr(route, "path", None)
            kind = route_class(method, where if isinstance(where, str) and where else path)
        if kind is RouteClass.STREAM:
            gone = False  # a client ends an event stream by leaving
        self.counter.inc(kind, outcome(status, retry_after=retry_after, gone=gone))
