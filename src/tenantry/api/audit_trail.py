"""The audit trail over HTTP: the tenant reads its own (``GET /v1/audit``), the operator
any tenant's (``GET /admin/v1/tenants/{id}/audit``); and the recorder that writes an account
change for every request that made one.

What counts as a change is read from each route's scope, not listed by hand: a request
that succeeded (2xx/3xx) with a method other than GET, to a route whose scope manages the
account (``CHANGE_SCOPES``), or to an operator route under ``/admin/v1/tenants/{id}``.
Starting and cancelling runs are not account changes (the runs' own logs hold them). The
entry is written after the change committed and before the answer is sent: a client that
saw the answer can find the entry (a crash between the two loses it, never invents one).
Never the body: it may hold a secret."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as AsgiScope

from tenantry.api.admin import TENANT_NOT_FOUND
from tenantry.api.auth import AuditReader, PlatformDep, operator
from tenantry.api.fields import IsoTime
from tenantry.api.operator_actions import route_of
from tenantry.api.pagination import PageRequest, keyed_by
from tenantry.api.params import parse_or_404
from tenantry.api.platform import Platform
from tenantry.audit import trail
from tenantry.ids import ApiKeyId, RunId, TenantId
from tenantry.tenants import service
from tenantry.tenants.scopes import KeyGrant, Scope

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/v1", tags=["audit"])
admin_router = APIRouter(prefix="/admin/v1", tags=["operator"],
                         dependencies=[Depends(operator)])
_Page = Annotated[PageRequest, Depends(keyed_by(trail.CURSOR_RE))]

#: The scopes whose writes change the tenant's account (what the trail records).
CHANGE_SCOPES = frozenset({Scope.APPROVALS_DECIDE, Scope.AGENTS_MANAGE,
                           Scope.INTEGRATIONS_MANAGE, Scope.KEYS_MANAGE, Scope.DATA_EXPORT})
_OPERATOR_TENANT_ROUTES = "/admin/v1/tenants/{tenant_id}"


class AuditEntryOut(BaseModel):
    kind: Literal["tool_call", "change"]
    id: str
    at: datetime
    actor: str | None = Field(description="change: who — `key:<key id>`, `user:<user id>` "
                                          "or `operator`.")
    action: str | None = Field(description="change: the route, e.g. `POST /v1/api-keys`.")
    target: str | None = Field(description="change: the path the request named.")
    status: int | None = Field(description="change: the HTTP status it was answered.")
    run_id: str | None = Field(description="tool_call: the run that made it.")
    tool: str | None
    server: str | None
    key: str | None = Field(description="tool_call: the call's idempotency key.")
    arguments_sha256: str | None = Field(description="tool_call: SHA-256 of its arguments "
                                                     "(the arguments are not kept here).")
    outcome: str | None
    detail: str | None
    duration_ms: float | None


class AuditPage(BaseModel):
    data: list[AuditEntryOut]
    next_cursor: str | None


def _out(e: trail.Entry) -> AuditEntryOut:
    return AuditEntryOut(
        kind=e.kind, id=str(e.id), at=e.at, actor=e.actor, action=e.action, target=e.target,
        status=e.status, run_id=str(e.run_id) if e.run_id else None, tool=e.tool,
        server=e.server, key=e.key, arguments_sha256=e.arguments_sha256, outcome=e.outcome,
        detail=e.detail, duration_ms=e.duration_ms)


async def _trail_query(
    kind: Literal["tool_call", "change"] | None = Query(None, description="One kind only."),
    run_id: Annotated[str | None, Query(pattern=RunId.pattern(),
                                        description="That run's tool calls only.")] = None,
    actor: Annotated[str | None, Query(
        pattern=rf"^(operator|key:{ApiKeyId.pattern()[1:-1]}|user:[a-z0-9_-]{{1,64}})$",
        description="That actor's changes only.")] = None,
    since: Annotated[IsoTime | None, Query(description="Nothing before this time (with a "
                                                      "time zone).")] = None,
) -> trail.TrailQuery:
    return trail.TrailQuery(kind, RunId.parse(run_id) if run_id else None, actor, since)


_Query = Annotated[trail.TrailQuery, Depends(_trail_query)]


async def _page(
    p: Platform, tenant: TenantId, query: trail.TrailQuery, page: PageRequest,
) -> AuditPage:
    found = await trail.trail_page(p.db, tenant, query, after=page.position(trail.parse_cursor),
                                   limit=page.limit)
    return page.answer(AuditPage, found, _out, key=lambda e: e.cursor)


@router.get("/audit", response_model=AuditPage)
async def read_audit(query: _Query, page: _Page, tenant: AuditReader, p: PlatformDep) -> AuditPage:
    """Your audit trail, newest first: every tool call your runs made, and every change to
    your account (keys, tool servers, secrets, agents, promotions, approvals, exports) with
    who made it. Kept under your audit-retention policy."""
    return await _page(p, tenant, query, page)


@admin_router.get("/tenants/{tenant_id}/audit", response_model=AuditPage)
async def read_tenant_audit(
    tenant_id: str, query: _Query, page: _Page, p: PlatformDep,
) -> AuditPage:
    """A tenant's audit trail, as the tenant reads it."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    page.position(trail.parse_cursor)  # a bad cursor is a 400 before anything else
    await service.get_tenant(p.db, tenant)
    return await _page(p, tenant, query, page)


class ChangeRecorder:
    """ASGI middleware writing an account change for each request that made one (module
    doc). The route's scope comes from its ScopeCheck (``request.state.checked_scope``),
    its template from the route Starlette matched: what the route declares, never a list
    kept here."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return

        async def answer(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                await _record(scope, message["status"])
            await send(message)

        await self.app(scope, receive, answer)


async def _record(scope: AsgiScope, status: int) -> None:
    action = route_of(scope)
    if action is None:
        return
    state = scope.get("state", {})
    grant: KeyGrant | None = state.get("grant")
    if action.partition(" ")[2].startswith(_OPERATOR_TENANT_ROUTES):
        try:
            tenant = TenantId.parse(str(scope.get("path_params", {}).get("tenant_id")))
        except ValueError:
            return
        actor = "operator"
    elif grant is not None and state.get("checked_scope") in CHANGE_SCOPES:
        tenant, actor = grant.tenant, f"key:{grant.key_id}"
    else:
        return
    p: Platform = scope["app"].state.platform
    try:
        await trail.record_change(p.db, tenant, trail.Change(actor, action, scope["path"],
                                                             status))
    # Whatever failed (an asyncpg error too), the change is made and its answer must go out:
    # say the entry went unrecorded. Not BaseException: a cancelled request stays cancelled.
    except Exception as exc:
        logger.error("audit: could not record %s %s for %s: %s", action, scope["path"],
                     tenant, exc)
