"""Who is calling: a tenant (its API key) or the operator (the operator token). The tenant
comes from the key, never from a body, path or model (invariant 4).

Every tenant route states the one scope it needs by its dependency — ``tenant: RunsReader``,
an alias of ``Depends(tenant_may(Scope.RUNS_READ))`` — which the OpenAPI document publishes
and a test holds every route to (ADR 0043)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Annotated

from fastapi import Depends, Request

from tenantry.api.platform import Platform
from tenantry.db import DATABASE_DOWN
from tenantry.errors import Forbidden, Unauthorized
from tenantry.ids import ApiKeyId, TenantId
from tenantry.tenants.scopes import KeyGrant, Scope
from tenantry.tenants.service import authenticate


def bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("Send 'Authorization: Bearer <key>'.")
    return token.strip()


async def platform(request: Request) -> Platform:
    # async on purpose: FastAPI runs a plain-def dependency in a worker thread per request.
    p: Platform = request.app.state.platform
    return p


async def current_grant(request: Request) -> KeyGrant:
    """What the calling key grants (401 for no key, an unknown, revoked or expired one)."""
    p = await platform(request)
    grant = await authenticate(p.db, bearer(request), p.auth_cache)
    request.state.grant = grant  # for what records who did what (the audit trail)
    return grant


@dataclass(frozen=True, slots=True)
class Caller:
    """The tenant and which of its API keys is calling (for what records who asked)."""

    tenant: TenantId
    key: ApiKeyId


class ScopeCheck:
    """A route's dependency that authenticates the key and refuses it (403, the scope
    named) unless it holds ``scope``. One instance per scope and answer shape, so the
    OpenAPI document can read each route's scope from its dependencies."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    async def grant(self, request: Request) -> KeyGrant:
        grant = await current_grant(request)
        if self.scope not in grant.scopes:
            raise Forbidden(f"This API key does not hold the scope {self.scope.value!r}.",
                            scope=self.scope.value)
        request.state.checked_scope = self.scope  # what the audit trail records (a change?)
        return grant


class _TenantMay(ScopeCheck):
    async def __call__(self, request: Request) -> TenantId:
        return (await self.grant(request)).tenant


class _CallerMay(ScopeCheck):
    async def __call__(self, request: Request) -> Caller:
        grant = await self.grant(request)
        return Caller(grant.tenant, grant.key_id)


class _GrantMay(ScopeCheck):
    async def __call__(self, request: Request) -> KeyGrant:
        return await self.grant(request)


@cache
def grant_may(scope: Scope) -> _GrantMay:
    """All the calling key grants (its other scopes too), once it holds ``scope``."""
    return _GrantMay(scope)


@cache
def tenant_may(scope: Scope) -> _TenantMay:
    """The calling tenant, once its key is known to hold ``scope``."""
    return _TenantMay(scope)


@cache
def caller_may(scope: Scope) -> _CallerMay:
    """The calling tenant and key, once the key is known to hold ``scope``."""
    return _CallerMay(scope)


async def operator(request: Request) -> None:
    """An operator token in force: the configured one, or one a rotation made (ADR 0043
    §9), until a rotation ends it."""
    if not await (await platform(request)).operator_tokens.valid(bearer(request)):
        raise Unauthorized("Invalid operator token.")
    # For the action log (api/operator_actions.py): only a request that showed the token is
    # the operator's, refused or not.
    request.state.operator = True


async def scraper(request: Request) -> None:
    """``/metrics``: the operator's token, checked by the database or, while it does not
    answer, by what it last said of the token (a scrape during an outage still answers)."""
    try:
        await operator(request)
    except DATABASE_DOWN:
        if not (await platform(request)).operator_tokens.last_known(bearer(request)):
            raise
        request.state.operator = True


# What handlers declare, each written once (``p: PlatformDep``, ``tenant: RunsReader``).
PlatformDep = Annotated[Platform, Depends(platform)]
#: The calling tenant, once its key is known to hold the scope the name says.
RunsReader = Annotated[TenantId, Depends(tenant_may(Scope.RUNS_READ))]
RunsWriter = Annotated[TenantId, Depends(tenant_may(Scope.RUNS_WRITE))]
ApprovalsDecider = Annotated[TenantId, Depends(tenant_may(Scope.APPROVALS_DECIDE))]
AgentsManager = Annotated[TenantId, Depends(tenant_may(Scope.AGENTS_MANAGE))]
IntegrationsManager = Annotated[TenantId, Depends(tenant_may(Scope.INTEGRATIONS_MANAGE))]
KeysManager = Annotated[TenantId, Depends(tenant_may(Scope.KEYS_MANAGE))]
AuditReader = Annotated[TenantId, Depends(tenant_may(Scope.AUDIT_READ))]
DataExporter = Annotated[TenantId, Depends(tenant_may(Scope.DATA_EXPORT))]
#: The calling tenant and key (for what records who asked), once the key holds the scope.
AgentsManagerCaller = Annotated[Caller, Depends(caller_may(Scope.AGENTS_MANAGE))]
KeysManagerCaller = Annotated[Caller, Depends(caller_may(Scope.KEYS_MANAGE))]
DataExporterCaller = Annotated[Caller, Depends(caller_may(Scope.DATA_EXPORT))]
#: All the calling key grants, once it holds ``keys:manage``.
KeysManagerGrant = Annotated[KeyGrant, Depends(grant_may(Scope.KEYS_MANAGE))]
