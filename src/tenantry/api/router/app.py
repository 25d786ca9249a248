"""The router's ASGI app: authenticate, find the home cell, forward, stream back.

- ``/v1/...`` (tenants): the API key's SHA-256 is looked up in the directory (cached,
  dropped on ``tenantry_directory`` notifications); the request goes to the key's tenant's
  home cell with its own ``Authorization`` (the cell authenticates the key again).
- ``/admin/v1/tenants`` (operator, the router's operator token): placed in a cell of the
  asked region (fewest tenants) or a named cell, created there, recorded in the directory.
- ``/admin/v1/tenants/{id}/...``: forwarded to the tenant's home cell with that cell's
  operator token; issuing and revoking API keys also record them in the directory.

A tenant being moved answers 503 ``tenant_moving``; a home cell that does not answer, 503
``cell_unavailable`` naming it; a tenant with as many requests (or event streams) in flight
through this router as it may, 429 ``overloaded`` at once (:mod:`tenantry.cells.caps`),
and the operator's calls likewise per cell. Answers are passed on within the deadlines of
:mod:`.forwarded`. Every refusal is the platform's problem+json."""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass

import orjson
from pydantic import Field, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tenantry.api.fields import Body, Label, Slug, Text
from tenantry.api.problems import DATABASE_RETRY_AFTER, from_error, problem
from tenantry.api.router.forwarded import Forwarded
from tenantry.cells import directory
from tenantry.cells.caps import Hold, InFlight
from tenantry.cells.directory import Cell, TenantHome
from tenantry.cells.forward import (
    Deadlines,
    Forwarder,
    Opened,
    request_headers,
    request_target,
    response_headers,
)
from tenantry.cells.routes import Routes
from tenantry.config import CELL_NAME_RE, Settings
from tenantry.db import DATABASE_DOWN
from tenantry.errors import (
    DatabaseUnavailable,
    NotFound,
    PayloadTooLarge,
    TenantMoving,
    TenantryError,
    Unauthorized,
)
from tenantry.ids import TenantId
from tenantry.telemetry.readiness import Readiness, reachable
from tenantry.tenants.keys import key_hash

log = logging.getLogger(__name__)

TENANT_NOT_FOUND = "No tenant with this id."
_TENANT_PATH = re.compile(r"^/admin/v1/tenants/([^/]+)(/.*)?$")
_KEYS_PATH = re.compile(r"^/api-keys(?:/([^/]+))?$")
#: A run's event log: an event stream unless only JSON is asked for (the cell's rule,
#: api/runs.py), counted against the tenant's stream cap as well as its request cap.
_EVENTS_PATH = re.compile(r"^/v1/runs/[^/]+/events$")
_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


@dataclass(slots=True)
class RouterState:
    settings: Settings
    routes: Routes
    forwarder: Forwarder
    in_flight: InFlight
    deadlines: Deadlines


class CreateTenant(Body):
    """The cell's body (name, tenant_id, plan), plus where to place the tenant."""

    name: Text = Field(min_length=1, max_length=200)
    tenant_id: Slug | None = None
    region: Label | None = Field(default=None, description="A cell of this region, the "
                                 "one with the fewest tenants.")
    cell: str | None = Field(default=None, pattern=CELL_NAME_RE.pattern,
                             description="A named (dedicated) cell instead.")
    plan: Label | None = None


def create_router_app(
    settings: Settings, state: Callable[[], AbstractAsyncContextManager[RouterState]],
) -> Starlette:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with state() as opened:
            app.state.router = opened
            # Ready while its directory answers (a cell that does not is that tenant's
            # 503 cell_unavailable, not the router's).
            app.state.readiness = Readiness([("directory", reachable(
                "directory", lambda: opened.routes.pool.fetchval("SELECT 1")))])
            yield

    async def endpoint(request: Request) -> Response:
        router: RouterState = request.app.state.router
        try:
            return await _dispatch(router, request)
        except TenantryError as exc:
            if exc.status >= 500:
                log.warning("router refused %s %s: %s", request.method, request.url.path,
                            exc.detail)
            return from_error(exc)
        except DATABASE_DOWN as exc:
            log.warning("directory unavailable: %s", exc)
            return from_error(DatabaseUnavailable(
                "The directory is not answering; retry shortly.",
                retry_after=DATABASE_RETRY_AFTER))

    async def healthz(_request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    async def readyz(request: Request) -> Response:
        readiness: Readiness = request.app.state.readiness
        return await readiness.answer()

    async def http_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        type_ = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return problem(exc.status_code, type_, str(exc.detail), str(exc.detail),
                       dict(exc.headers or {}) or None)

    return Starlette(routes=[Route("/healthz", healthz, methods=["GET"]),
                             Route("/readyz", readyz, methods=["GET"]),
                             Route("/{path:path}", endpoint, methods=_METHODS)],
                     exception_handlers={HTTPException: http_error}, lifespan=lifespan)


@asynccontextmanager
async def router_state(settings: Settings, dsn: str) -> AsyncIterator[RouterState]:
    """The directory's pool and LISTEN loop, the forwarding client, and the caps and
    deadlines of what is forwarded."""
    async with Routes.open(dsn) as routes:
        forwarder = Forwarder(connections_per_cell=settings.router_cell_connections)
        requests, streams, operator = settings.router_caps
        in_flight = InFlight(per_tenant=requests, streams_per_tenant=streams,
                             operator_per_cell=operator)
        deadlines = Deadlines(idle=settings.router_idle_seconds,
                              body=settings.router_body_seconds,
                              stream_lifetime=settings.router_stream_lifetime_seconds)
        try:
            yield RouterState(settings, routes, forwarder, in_flight, deadlines)
        finally:
            await forwarder.aclose()


async def _dispatch(router: RouterState, request: Request) -> Response:
    path = request.url.path
    if path.startswith("/v1/") or path == "/v1":
        home = await router.routes.for_key(_bearer(request))
        hold = router.in_flight.tenant(home.tenant_id.value, stream=_wants_stream(request))
        return await _forward(router, request, home, hold, authorization=None)
    if path.startswith("/admin/v1/"):
        _operator(router.settings, request)
        if path == "/admin/v1/tenants" and request.method == "POST":
            return await _create_tenant(router, request)
        if path == "/admin/v1/cells" and request.method == "GET":
            return await _list_cells(router)
        match = _TENANT_PATH.match(path)
        if match is not None:
            return await _tenant_call(router, request, match[1], match[2] or "")
    raise NotFound("No such resource: the router forwards /v1 calls, and the operator's "
                   "calls about one tenant (/admin/v1/tenants/...); call a cell's API for "
                   "the rest.")


def _wants_stream(request: Request) -> bool:
    if request.method != "GET" or not _EVENTS_PATH.match(request.url.path):
        return False
    accept = request.headers.get("accept", "")
    return "text/event-stream" in accept or "application/json" not in accept


def _bearer(request: Request) -> str:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("Send 'Authorization: Bearer <key>'.")
    return token.strip()


def _operator(settings: Settings, request: Request) -> None:
    expected = settings.operator_token
    token = _bearer(request)
    if not expected or not hmac.compare_digest(token.encode(), expected.encode()):
        raise Unauthorized("Invalid operator token.")


async def _body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"Request bodies are limited to {limit} bytes.")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"Request bodies are limited to {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


async def _open(router: RouterState, request: Request, home: TenantHome, *,
                authorization: str | None, target: str | None = None,
                body: bytes | None = None) -> Opened:
    if home.moving:
        raise TenantMoving()  # Retry-After: errors.TENANT_MOVING_RETRY_AFTER
    where = target or request_target(request.scope.get("raw_path") or
                                     request.url.path.encode(),
                                     request.scope.get("query_string", b""))
    if body is None:
        body = await _body(request, router.settings.max_body_bytes)
    client = request.client.host if request.client else None
    headers = request_headers(
        ((k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw),
        authorization=authorization, client=client)
    return await router.forwarder.open(home.cell, request.method, where, headers, body)


async def _forward(router: RouterState, request: Request, home: TenantHome, hold: Hold, *,
                   authorization: str | None) -> Response:
    """The cell's answer, passed on as it arrives; ``hold`` is released when it is done."""
    try:
        opened = await _open(router, request, home, authorization=authorization)
    except BaseException:
        hold.release()
        raise
    return Forwarded(opened, hold, router.deadlines)


async def _buffered(router: RouterState,
                    opened: Opened) -> tuple[int, dict[str, str], bytes]:
    content = await opened.read(router.deadlines)
    # The body is whole here: the Response sets its own Content-Length.
    headers = {k: v for k, v in response_headers(dict(opened.response.headers)).items()
               if k != "content-length"}
    return opened.status, headers, content


def _cell_token(home: TenantHome) -> str:
    return f"Bearer {home.cell.operator_token}"


async def _create_tenant(router: RouterState, request: Request) -> Response:
    raw = await _body(request, router.settings.max_body_bytes)
    try:
        body = CreateTenant.model_validate_json(raw or b"null")
    except ValidationError as exc:
        errors = [{"loc": [str(p) for p in e.get("loc", ())], "msg": e.get("msg", "invalid"),
                   "kind": e.get("type")} for e in exc.errors()]
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        where = ".".join(first["loc"]) or "body"
        return problem(400, "validation_error", "Invalid request", f"{where}: {first['msg']}",
                       extra={"errors": errors})
    async with router.routes.pool.acquire() as conn:
        cell = await directory.place(conn, region=body.region, cell=body.cell)
    region = body.region or cell.region
    forwarded = {"name": body.name, "region": region, "plan": body.plan,
                 "tenant_id": body.tenant_id}
    payload = orjson.dumps({k: v for k, v in forwarded.items() if v is not None})
    home = TenantHome(TenantId("placing"), region, directory.ACTIVE, cell)
    with _operator_hold(router, cell):
        opened = await _open(router, request, home,
                             authorization=f"Bearer {cell.operator_token}",
                             target="/admin/v1/tenants", body=payload)
        status, headers, content = await _buffered(router, opened)
    if status == 201:
        created = orjson.loads(content)
        async with router.routes.pool.acquire() as conn:
            await directory.record_tenant(conn, created["tenant_id"], region=created["region"],
                                          cell=cell.name)
        log.info("tenant placed", extra={"tenant": created["tenant_id"], "cell": cell.name,
                                         "region": created["region"]})
    return Response(content, status_code=status, headers=headers)


async def _list_cells(router: RouterState) -> Response:
    async with router.routes.pool.acquire() as conn:
        found = await directory.list_cells(conn)
    data = [{"name": c.cell.name, "region": c.cell.region, "api_url": c.cell.api_url,
             "dedicated": c.cell.dedicated, "tenants": c.tenants,
             "created_at": c.cell.created_at.isoformat()} for c in found]
    return Response(orjson.dumps({"data": data}), media_type="application/json")


async def _tenant_call(router: RouterState, request: Request, raw_id: str,
                       rest: str) -> Response:
    try:
        tenant = TenantId.parse(raw_id)
    except ValueError:
        raise NotFound(TENANT_NOT_FOUND) from None
    home = await router.routes.for_tenant(tenant)
    if home is None:
        raise NotFound(TENANT_NOT_FOUND)
    keys = _KEYS_PATH.match(rest)
    token = _cell_token(home)
    if keys is not None and keys[1] is None and request.method == "POST":
        with _operator_hold(router, home.cell):
            opened = await _open(router, request, home, authorization=token)
            status, headers, content = await _buffered(router, opened)
        if status == 201:  # routable from now on: its hash is in the directory
            issued = orjson.loads(content)
            async with router.routes.pool.acquire() as conn:
                await directory.record_api_key(conn, tenant, key_hash=key_hash(
                    issued["api_key"]), key_id=issued["key_id"])
        return Response(content, status_code=status, headers=headers)
    hold = router.in_flight.operator(home.cell.name)  # before any write: a 429 does none
    try:
        if keys is not None and keys[1] is not None and request.method == "DELETE":
            # The directory first: the router refuses the key from this commit on, whatever
            # the cell answers next.
            async with router.routes.pool.acquire() as conn:
                await directory.revoke_api_key(conn, tenant, keys[1])
    except BaseException:
        hold.release()
        raise
    return await _forward(router, request, home, hold, authorization=token)


@contextmanager
def _operator_hold(router: RouterState, cell: Cell) -> Iterator[None]:
    hold = router.in_flight.operator(cell.name)
    try:
        yield
    finally:
        hold.release()
