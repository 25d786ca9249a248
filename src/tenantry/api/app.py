"""The HTTP app factory: wires settings, database and event hub into FastAPI routes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from tenantry import __version__
from tenantry.api import admin, agents, approvals, problems, runs
from tenantry.api.body_limit import BodyLimit
from tenantry.api.platform import Platform
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.platform_setup import master_key
from tenantry.runs.hub import EventHub
from tenantry.tools.mcp_client import McpToolClient
from tenantry.vault import Vault

_PROBLEM_SCHEMA = {
    "type": "object",
    "description": "RFC 9457 problem details. `type` is stable: not_found, validation_error, "
                   "unauthorized, conflict, payload_too_large, method_not_allowed, quota_exceeded, "
                   "overloaded, budget_exhausted, tool_unavailable, database_unavailable, "
                   "internal_error.",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
    },
    "additionalProperties": True,
}


def create_app(settings: Settings, dsn: str) -> FastAPI:
    """``dsn`` is the resolved database (the embedded one's or TENANTRY_DATABASE_URL)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        db = await Database.connect(
            dsn, role=settings.db_role or None, min_size=settings.db_pool_min,
            max_size=settings.db_pool_max,
        )
        hub = EventHub(dsn)
        mcp = McpToolClient()
        master = master_key(settings)
        try:
            await hub.start()
            vault = Vault(db, master) if master is not None else None
            app.state.platform = Platform(settings, db, hub, mcp, vault)
            yield
        finally:
            await mcp.aclose()
            await hub.close()
            await db.close()

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
    app.include_router(admin.router)
    app.include_router(agents.router)
    app.include_router(runs.router)
    app.include_router(approvals.router)

    @app.get("/healthz", tags=["meta"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, corrected to what the API really answers: validation errors are
    400 problem+json (not 422), and every route may answer with a problem."""
    if app.openapi_schema:
        return app.openapi_schema
    doc = get_openapi(title=app.title, version=app.version, description=app.description,
                      routes=app.routes)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schemas["Problem"] = _PROBLEM_SCHEMA
    schemas.setdefault("EventPage", runs.EventPage.model_json_schema(
        ref_template="#/components/schemas/{model}"))
    for name, sub in schemas["EventPage"].pop("$defs", {}).items():
        schemas.setdefault(name, sub)
    ref = {"$ref": "#/components/schemas/Problem"}
    problem = {"content": {problems.MEDIA_TYPE: {"schema": ref}}}
    for path, operations in doc["paths"].items():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            if path != "/healthz":
                responses.setdefault("400", {"description": "Invalid request", **problem})
                responses.setdefault("401", {"description": "Missing or invalid credentials",
                                             **problem})
            if "{" in path:
                responses.setdefault("404", {"description": "Not found", **problem})
            if operation.get("requestBody"):
                responses.setdefault("413", {"description": "Body too large", **problem})
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            conflicts = method == "post" and (
                path.startswith(("/v1/agents", "/admin/v1/tenants")) or path == "/v1/runs"
                or path.endswith("/cancel"))
            if conflicts:
                operation["responses"].setdefault("409", {"description": "Conflict", **problem})
            if path.startswith("/admin/"):
                operation["security"] = [{"operatorToken": []}]
            elif path.startswith("/v1/"):
                operation["security"] = [{"apiKey": []}]
    doc["components"]["securitySchemes"] = {
        "apiKey": {"type": "http", "scheme": "bearer",
                   "description": "A tenant API key (tnt_...)."},
        "operatorToken": {"type": "http", "scheme": "bearer",
                          "description": "The operator token printed by `tenantry up`."},
    }
    app.openapi_schema = doc
    return doc
