"""Who is calling: a tenant (its API key) or the operator (the operator token). The tenant
comes from the key, never from a body, path or model (invariant 4)."""

from __future__ import annotations

import hmac

from fastapi import Depends, Request

from tenantry.api.platform import Platform
from tenantry.errors import Unauthorized
from tenantry.ids import TenantId
from tenantry.tenants.service import authenticate, key_id_of


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


async def caller(request: Request,
                 tenant: TenantId = Depends(current_tenant)) -> tuple[TenantId, str]:
    """The tenant, and who of it is calling for records of who did what: its API key's id."""
    p = await platform(request)
    found = await key_id_of(p.db, tenant, _bearer(request))
    if found is None:  # revoked between the two reads
        raise Unauthorized("Missing or invalid API key.")
    return tenant, str(found)


async def operator(request: Request) -> None:
    expected = (await platform(request)).settings.operator_token
    token = _bearer(request)
    if not expected or not hmac.compare_digest(token.encode(), expected.encode()):
        raise Unauthorized("Invalid operator token.")
