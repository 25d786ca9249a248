"""Who is calling: a tenant (its API key) or the operator (the operator token). The tenant
comes from the key, never from a body, path or model (invariant 4)."""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from fastapi import Depends, Request

from tenantry.api.platform import Platform
from tenantry.errors import Unauthorized
from tenantry.ids import ApiKeyId, TenantId
from tenantry.tenants.service import authenticate, key_of


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("Send 'Authorization: Bearer <key>'.")
    return token.strip()


async def platform(request: Request) -> Platform:
    # async on purpose: FastAPI runs a plain-def dependency in a worker thread per request.
    p: Platform = request.app.state.platform
    return p


async def current_tenant(request: Request) -> TenantId:
    p = await platform(request)
    return await authenticate(p.db, _bearer(request), p.auth_cache)


@dataclass(frozen=True, slots=True)
class Caller:
    """The tenant and which of its API keys is calling (for what records who asked)."""

    tenant: TenantId
    key: ApiKeyId


async def current_caller(request: Request,
                         tenant: TenantId = Depends(current_tenant)) -> Caller:
    """The tenant (authenticated as by ``current_tenant``) and the calling key's id."""
    p = await platform(request)
    return Caller(tenant, await key_of(p.db, tenant, _bearer(request)))


async def operator(request: Request) -> None:
    expected = (await platform(request)).settings.operator_token
    token = _bearer(request)
    if not expected or not hmac.compare_digest(token.encode(), expected.encode()):
        raise Unauthorized("Invalid operator token.")
