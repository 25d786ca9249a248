"""The HTTP app factory: FastAPI routes over the :class:`Platform` its caller builds
(``tenantry.bootstrap.api`` does, for a process), and the OpenAPI document they answer."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from starlette.responses import Response

from tenantry import __version__
from tenantry.api import (
    activities,
    admin,
    agents,
    api_keys,
    approvals,
    audit_trail,
    auth,
    billing,
    console,
    evaluations,
    exports,
    fields,
    inbox,
    metrics,
    model_accounts,
    model_snapshots,
    operator_actions,
    operator_runs,
    operators,
    own_model_accounts,
    own_tool_servers,
    policy,
    prices,
    problems,
    retention,
    run_blobs,
    run_bodies,
    runs,
    tenant_console,
    tool_servers,
    users,
    webhooks,
)
from tenantry.api.availability import CountRequests, requests_counter
from tenantry.api.body_limit import BodyLimit
from tenantry.api.platform import Platform
from tenantry.config import Settings
from tenantry.db.status import serving_refusals
from tenantry.telemetry.readiness import Readiness
from tenantry.telemetry.registry import Registry

_PROBLEM_SCHEMA = {
    "type": "object",
    "description": "RFC 9457 problem details. `type` is stable: not_found, validation_error, "
                   "unauthorized, forbidden, conflict, payload_too_large, method_not_allowed, "
                   "quota_exceeded, "
                   "overloaded, budget_exhausted, tool_unavailable, tenant_erased, "
                   "admissions_paused, region_not_served, unpriced_model, "
                   "database_unavailable, "
                   "tool_server_authorization_failed, tool_server_url_refused, "
                   "model_account_url_refused, webhook_url_refused, internal_error, "
                   "unready (`/readyz`: its `reasons`); "
                   "through `tenantry router` also tenant_moving and cell_unavailable.",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
    },
    "additionalProperties": True,
}


_DATABASE_UNAVAILABLE = "`database_unavailable`: the database is not answering (see Retry-After)"
_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before retrying.",
                                "schema": {"type": "integer", "minimum": 0}}}

#: Operations that can answer 409, and body references that can answer 404 on a path
#: without ids: kept beside the routes so the document says what really happens. (A route
#: may instead declare ``responses={409: {"description": ...}}`` itself: every 4xx/5xx it
#: declares is published as problem+json.)
_CONFLICTS = {
    ("POST", "/v1/runs"), ("POST", "/v1/agents"), ("POST", "/v1/agents/{agent_id}/versions"),
    ("POST", "/v1/runs/{run_id}/cancel"), ("POST", "/v1/approvals/{approval_id}"),
    ("POST", "/admin/v1/tenants"), ("POST", "/admin/v1/tenants/{tenant_id}/tool-servers"),
    ("POST", "/admin/v1/tenants/{tenant_id}/tool-servers/{name}/pin"),
    ("POST", "/v1/tool-servers"), ("POST", "/v1/tool-servers/{name}/pin"),
    ("PUT", "/admin/v1/prices/{model}"),
    ("POST", "/admin/v1/model-accounts"), ("POST", "/admin/v1/tenants/{tenant_id}/model-accounts"),
    ("POST", "/v1/model-accounts"),
    ("POST", "/v1/activity-tasks"), ("POST", "/v1/activities/{name}/versions"),
    ("POST", "/admin/v1/tenants/{tenant_id}/api-keys"),  # erased tenant (ADR 0017); expiry past
    ("POST", "/v1/api-keys"),  # an expiry already past
    ("POST", "/v1/webhook-endpoints"),  # ten already (ADR 0045)
    # The address already a user of the tenant (or an erased tenant); a disabled user's link.
    ("POST", "/v1/users"), ("POST", "/admin/v1/tenants/{tenant_id}/users"),
    ("POST", "/v1/users/{user_id}/sign-in-links"),
    ("POST", "/admin/v1/tenants/{tenant_id}/users/{user_id}/sign-in-links"),
    ("POST", "/admin/v1/operators"),  # the address already an operator's
}
_MISSING_REFERENCES = {("POST", "/v1/runs"), ("POST", "/admin/v1/billing/reconcile"),
                       ("POST", "/v1/activity-tasks")}
#: Methods whose body BodyLimit measures: any of them can answer 413, with or without a body.
_BODY_METHODS = {"post", "put", "patch"}


def create_app(
    settings: Settings, platform: Callable[[], AbstractAsyncContextManager[Platform]],
) -> FastAPI:
    """``platform`` opens what the handlers need for as long as the app serves (its
    lifespan): ``tenantry.bootstrap.api.build_app`` passes the process's."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with platform() as state:
            app.state.platform = state
            app.state.readiness = Readiness([
                ("database", lambda: serving_refusals(state.cross_tenant_db)),
                *(state.local.checks() if state.local is not None else [])])
            yield

    app = FastAPI(
        title="Tenantry",
        version=__version__,
        description="Runs AI agents for other companies: durable runs, fair scheduling, "
                    "tenant isolation. Tenant calls authenticate with "
                    "`Authorization: Bearer <api key>`; `/admin/v1` with the operator token.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    problems.install(app)
    # Runs first: routing tries routes in order, and POST /v1/runs is the hot path (at
    # 1,000 runs/s, matching it after every admin route cost a fifth of the process).
    api_routers = [runs.router, run_blobs.router, admin.router, tool_servers.router,
                   own_tool_servers.router, tool_servers.callback_router,
                   model_accounts.router, own_model_accounts.router, billing.router,
                   prices.router, policy.admin_router, policy.router, metrics.router,
                   agents.router, evaluations.router, model_snapshots.router,
                   activities.router, approvals.router, inbox.router, operator_runs.router,
                   retention.admin_router, retention.router,
                   audit_trail.router, audit_trail.admin_router, api_keys.router,
                   exports.router, webhooks.router,
                   users.router, users.admin_router, operators.router,
                   operators.token_router]
    for router in api_routers:
        app.include_router(router)
    console.install(app)
    tenant_console.install(app)  # after console: it serves the same static assets

    @app.get("/healthz", tags=["meta"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers (a constant). Whether to send it work: /readyz."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["meta"], response_model=None, responses={
        200: {"description": "Ready", "content": {"application/json": {"schema": {
            "type": "object", "required": ["status"],
            "properties": {"status": {"type": "string", "enum": ["ready"]}}}}}},
        503: {"description": "`unready`: the problem's `reasons` list what is missing (the "
                             "database, its schema, the workers' sessions or sandbox "
                             "boundary)", "headers": _RETRY_AFTER}})
    async def readyz(request: Request) -> Response:
        """Readiness: the database answers, its schema is this release's to serve and, in a
        process that runs workers, they hold their sessions behind the minimum sandbox
        boundary. Checked at most once a second however many probes arrive."""
        readiness: Readiness = request.app.state.readiness
        return await readiness.answer()

    app.add_middleware(audit_trail.ChangeRecorder)
    app.add_middleware(operator_actions.OperatorActionRecorder)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    # Last: the outermost, so it sees every answer (the 413s above, the 500s below it).
    app.state.requests = Registry()  # /metrics renders it (api/metrics.py)
    app.add_middleware(CountRequests, counter=requests_counter(app.state.requests))
    app.openapi = lambda: _openapi(app, api_routers)  # type: ignore[method-assign]
    return app


def _credentials(routers: list[APIRouter]) -> dict[str, tuple[str, list[str]]]:
    """Which bearer scheme each operation takes, and the scope a tenant key needs for it,
    read from its dependencies (so a new route is documented by what it really checks,
    not by its prefix)."""
    schemes: dict[str, tuple[str, list[str]]] = {}
    for route in (r for router in routers for r in router.routes):
        if not isinstance(route, APIRoute):
            continue
        calls = set()
        pending = [route.dependant]
        while pending:
            dependant = pending.pop()
            calls.add(dependant.call)
            pending.extend(dependant.dependencies)
        scopes = sorted({_scope_of(c) for c in calls} - {""})
        scheme = ("operatorToken" if {auth.operator, auth.scraper} & calls
                  else "apiKey" if scopes or auth.current_grant in calls else None)
        if scheme is not None:
            for method in route.methods or ():
                schemes[f"{method.lower()} {route.path_format}"] = (scheme, scopes)
    return schemes


def _scope_of(call: object) -> str:
    return call.scope.value if isinstance(call, auth.ScopeCheck) else ""


def _left_out_not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A parameter's schema without FastAPI's ``null`` branch (``X | None`` is written
    ``anyOf: [X, null]``): an optional parameter is left out, and ``null`` sent as text
    is refused like any other text that is not an X."""
    options = schema.get("anyOf")
    if not isinstance(options, list) or {"type": "null"} not in options:
        return schema
    kept = [option for option in options if option != {"type": "null"}]
    rest = {key: value for key, value in schema.items()
            if key != "anyOf" and not (key == "default" and value is None)}
    return {**kept[0], **rest} if len(kept) == 1 else {**rest, "anyOf": kept}


def _keys_by_pattern(node: object) -> None:
    """pydantic writes a dict whose keys have a pattern as ``patternProperties``, which
    allows keys of any other shape too; the model refuses them: say ``propertyNames``."""
    if isinstance(node, list):
        for item in node:
            _keys_by_pattern(item)
    elif isinstance(node, dict):
        by_pattern = node.get("patternProperties")
        if isinstance(by_pattern, dict) and len(by_pattern) == 1 and (
                "additionalProperties" not in node):
            [(pattern, values)] = by_pattern.items()
            node["propertyNames"] = {**node.get("propertyNames", {}), "pattern": pattern}
            node["additionalProperties"] = values
            del node["patternProperties"]
        for value in node.values():
            _keys_by_pattern(value)


def _summarize(operation: dict[str, Any]) -> None:
    """The summary from the handler's docstring, whose first sentence names what the
    operation does, up to its first clause ("Erase the tenant: ..." is "Erase the tenant"),
    in place of FastAPI's title-cased function name ("Pending By Tenant"). A route that
    sets ``summary=`` keeps it."""
    description = operation.get("description", "")
    words = operation["summary"].lower().split()
    if not description or not operation["operationId"].startswith("_".join(words) + "_"):
        return
    sentence = re.split(r"\.(?:\s|$)|\n\n", description.strip(), maxsplit=1)[0]
    clause = re.split(r": |; | \(| — ", sentence, maxsplit=1)[0]
    operation["summary"] = " ".join(clause.split())


def _openapi(app: FastAPI, routers: list[APIRouter]) -> dict[str, Any]:
    """FastAPI's document, corrected to what the API really answers: validation errors are
    400 problem+json (not 422), every error is problem+json, and every route may answer
    with a problem."""
    if app.openapi_schema:
        return app.openapi_schema
    doc = get_openapi(title=app.title, version=app.version, description=app.description,
                      routes=app.routes)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schemas["Problem"] = _PROBLEM_SCHEMA
    schemas["StoredJson"] = fields.STORED_JSON_SCHEMA
    schemas.setdefault("EventPage", run_bodies.EventPage.model_json_schema(
        ref_template="#/components/schemas/{model}"))
    for name, sub in schemas["EventPage"].pop("$defs", {}).items():
        schemas.setdefault(name, sub)
    # FastAPI renders numeric bounds as floats, and 2^63-1 does not survive that (it reads
    # back as 2^63): the price body's schema is pydantic's own, exact.
    schemas["PutPrice"] = prices.PutPrice.model_json_schema()
    schemas["PutSandboxPrice"] = prices.PutSandboxPrice.model_json_schema()
    _keys_by_pattern(doc)
    ref = {"$ref": "#/components/schemas/Problem"}
    problem = {"content": {problems.MEDIA_TYPE: {"schema": ref}}}
    schemes = _credentials(routers)
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", ()):
                parameter["schema"] = _left_out_not_null(parameter["schema"])
            _summarize(operation)
            responses = operation.setdefault("responses", {})
            if responses.get("422", {}).get("description") == "Validation Error":
                responses.pop("422")  # FastAPI's: ours are 400 (a route's own 422 stays)
            answers: list[tuple[str, str]] = []
            if path not in ("/healthz", "/readyz"):
                answers += [("400", "Invalid request"), ("503", _DATABASE_UNAVAILABLE)]
            scheme, scopes = schemes.get(f"{method} {path}", (None, []))
            if scheme is not None:
                answers.append(("401", "Missing or invalid credentials"))
            if scopes:
                answers.append(("403", "`forbidden`: the API key lacks the scope "
                                       f"`{scopes[0]}` (the problem's `scope` names it)"))
            if "{" in path or (method.upper(), path) in _MISSING_REFERENCES:
                answers.append(("404", "Not found"))
            if method in _BODY_METHODS:
                answers.append(("413", "Body too large"))
            if (method.upper(), path) in _CONFLICTS:
                answers.append(("409", "Conflict"))
            for status, description in answers:
                responses.setdefault(status, {"description": description})
            for status, response in responses.items():
                if status[0] in "45":  # whatever a route declared, errors are problems
                    response.update(problem)
            if "503" in responses and path != "/readyz":  # any route that reads the database
                busy = responses["503"]
                if _DATABASE_UNAVAILABLE not in busy["description"]:
                    busy["description"] += f"; {_DATABASE_UNAVAILABLE}"
                busy.setdefault("headers", _RETRY_AFTER)
            if scheme is not None:
                # OpenAPI 3.1: a bearer scheme's requirement may list the roles it needs.
                operation["security"] = [{scheme: scopes}]
                if scopes:
                    operation["x-tenantry-scope"] = scopes[0]
    doc["components"]["securitySchemes"] = {
        "apiKey": {"type": "http", "scheme": "bearer",
                   "description": "A tenant API key (tnt_...). Each operation lists the "
                                  "scope the key needs (`x-tenantry-scope`); a key without "
                                  "it is answered 403 `forbidden`, the scope named."},
        "operatorToken": {"type": "http", "scheme": "bearer",
                          "description": "The operator token printed by `tenantry up`."},
    }
    app.openapi_schema = doc
    return doc
