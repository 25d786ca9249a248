"""RFC 9457 problem+json, produced in one place for every error the API returns."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import Match

from tenantry.db import DATABASE_DOWN
from tenantry.errors import (
    DatabaseUnavailable,
    Overloaded,
    TenantMoving,
    TenantryError,
)
from tenantry.jsonutil import dumps

log = logging.getLogger(__name__)

#: The SQLSTATE of a write refused because its tenant is being moved (migration 0031).
TENANT_MOVING = "TR020"

MEDIA_TYPE = "application/problem+json"
#: Seconds a client is told to wait when the database is not answering.
DATABASE_RETRY_AFTER = 5


#: A browser page's answer while the database is away, by the path prefix it serves.
OutagePage = Callable[[Request], Response]


def answer_outages_with(app: FastAPI, prefix: str, page: OutagePage) -> None:
    """Requests under ``prefix`` (a console's) are answered ``page`` while the database is
    not answering, instead of the API's problem+json: a person reads it in a browser."""
    pages: dict[str, OutagePage] = getattr(app.state, "outage_pages", {})
    app.state.outage_pages = {**pages, prefix: page}


def _outage_page(request: Request) -> OutagePage | None:
    path = request.url.path
    pages: dict[str, OutagePage] = getattr(request.app.state, "outage_pages", {})
    return next((page for prefix, page in pages.items()
                 if path == prefix or path.startswith(f"{prefix}/")), None)


def problem(
    status: int, type_: str, title: str, detail: str, headers: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> Response:
    # Typed fields first so an extra can never overwrite the stable ones.
    body = {**(extra or {}), "type": type_, "title": title, "status": status, "detail": detail}
    return Response(dumps(body), status_code=status, media_type=MEDIA_TYPE, headers=headers)


def from_error(exc: TenantryError) -> Response:
    headers = {}
    if "retry_after" in exc.extra:
        headers["Retry-After"] = str(exc.extra["retry_after"])
    if exc.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return problem(exc.status, exc.type, exc.title, exc.detail, headers or None, exc.extra)


def _validation_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    errors = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ())]
        errors.append({"loc": loc, "msg": err.get("msg", "invalid"), "kind": err.get("type")})
    return errors


_HTTP_TYPES = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}


#: The methods a route can serve (RFC 9110's, and PATCH).
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> str:
    """Every method some route serves at this path, for a 405's ``Allow``. The router names
    only the first route whose path matched, and the API has a route per method: a path
    served by GET and PUT would otherwise answer ``Allow: GET``. Each method is asked of
    the routes as the router would ask it (included routers hide their routes)."""
    routes = request.app.router.routes
    return ", ".join(method for method in _METHODS if any(
        route.matches({**request.scope, "method": method})[0] is Match.FULL
        for route in routes))


def install(app: FastAPI) -> None:
    @app.exception_handler(TenantryError)
    async def tenantry_error(_request: Request, exc: TenantryError) -> Response:
        # Shedding is the platform working as designed, not failing: one error line per
        # refused request would add load to an overloaded cell's logs.
        if exc.status >= 500 and not isinstance(exc, Overloaded | TenantMoving):
            log.error("request failed: %s", exc.detail)
        return from_error(exc)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, exc: RequestValidationError) -> Response:
        errors = _validation_errors(exc)
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        where = ".".join(p for p in first["loc"] if p not in ("body",)) or "body"
        return problem(
            400, "validation_error", "Invalid request", f"{where}: {first['msg']}",
            extra={"errors": errors},
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        type_ = _HTTP_TYPES.get(exc.status_code, "http_error")
        detail = "No such resource." if exc.status_code == 404 else str(exc.detail)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = allowed_methods(request)
        return problem(exc.status_code, type_, detail, detail, headers or None)

    async def database_down(request: Request, exc: Exception) -> Response:
        platform = getattr(request.app.state, "platform", None)
        if platform is not None:
            platform.db.outage.failed(f"{request.method} {request.url.path}", exc)
        page = _outage_page(request)
        if page is not None:
            return page(request)
        return from_error(DatabaseUnavailable(
            "The database is not answering; retry shortly.", retry_after=DATABASE_RETRY_AFTER))

    # A handler per class, not a branch in the catch-all below: Starlette answers the
    # catch-all's response and then re-raises, and uvicorn, seeing the exception after
    # the response started, logs a traceback and drops the connection (the next request
    # on a kept-alive connection then fails). These handlers answer and are done.
    for kind in DATABASE_DOWN:
        app.add_exception_handler(kind, database_down)

    @app.exception_handler(asyncpg.PostgresError)
    async def database_refused(request: Request, exc: asyncpg.PostgresError) -> Response:
        # A write that reached a moving tenant's rows before this process heard of the
        # move (the trigger of migration 0031): the tenant's 503, not a platform fault.
        if exc.sqlstate == TENANT_MOVING:
            return from_error(TenantMoving())
        return await unexpected(request, exc)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        if isinstance(exc, DATABASE_DOWN):  # raised outside the routes (a middleware)
            return await database_down(request, exc)
        log.exception("unhandled error", exc_info=exc)
        return problem(500, "internal_error", "Internal error", "The platform failed; retry later.")
