"""Tenant API: the tenant's own API keys (``/v1/api-keys``), with a key holding
``keys:manage``: make, list, read, rotate and revoke them.

A key never grants more than the key that made it holds: a `keys:manage` key without
`integrations:manage` cannot mint one with it (403, the scope named). Rotating gives a new
key with the old one's name, scopes and expiry; the old one keeps working for the overlap
asked for (none by default), so callers can move over without an outage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from tenantry.api.auth import KeysManager, KeysManagerGrant, PlatformDep
from tenantry.api.fields import Body
from tenantry.api.key_bodies import (
    ApiKeyList,
    ApiKeyOut,
    CreateKey,
    KeyOut,
    issued_out,
    key_out,
)
from tenantry.api.links import links, to
from tenantry.api.pagination import PageRequest, keyed_by
from tenantry.api.params import parse_or_404
from tenantry.errors import Forbidden, NotFound
from tenantry.ids import ApiKeyId
from tenantry.tenants import service
from tenantry.tenants.scopes import KeyGrant, Scope

router = APIRouter(prefix="/v1/api-keys", tags=["api keys"])
_KeyPage = Annotated[PageRequest, Depends(keyed_by(ApiKeyId.pattern()))]
_THE_KEY = {"key_id": "$response.body#/key_id"}
MAX_OVERLAP_SECONDS = 7 * 24 * 3600


class RotateKey(Body):
    overlap_seconds: int = Field(
        default=0, ge=0, le=MAX_OVERLAP_SECONDS,
        description="How long the old key keeps working (at most 7 days); 0: it stops now.")


class RevokedKeyOut(BaseModel):
    key_id: str
    revoked_at: datetime


def _no_wider(grant: KeyGrant, wanted: frozenset[Scope]) -> None:
    missing = sorted(wanted - grant.scopes)
    if missing:
        raise Forbidden(f"scopes: this API key cannot grant {missing[0]!r}, which it does not "
                        "hold itself.", scope=missing[0])


@router.post("", status_code=201, response_model=KeyOut, responses={201: links(
    GetKey=to("GET", "/v1/api-keys/{key_id}", "The key just made (never its secret again).",
              parameters=_THE_KEY),
    RevokeKey=to("DELETE", "/v1/api-keys/{key_id}", "Revoke it.", parameters=_THE_KEY))})
async def create_key(body: CreateKey, grant: KeysManagerGrant, p: PlatformDep) -> KeyOut:
    """A new key for your tenant: the scopes you name (every scope this key holds when
    omitted), an optional expiry. The key is shown once."""
    new = body.new_key(created_by=f"key:{grant.key_id}")
    if body.scopes is None:
        new = service.NewKey(new.name, grant.scopes, new.expires_at, new.created_by)
    _no_wider(grant, new.scopes)
    return issued_out(await service.issue_api_key(p.db, grant.tenant, new))


@router.get("", response_model=ApiKeyList)
async def list_keys(page: _KeyPage, tenant: KeysManager, p: PlatformDep) -> ApiKeyList:
    """Your keys, revoked and expired ones included, newest first."""
    found = await service.api_keys_page(p.db, tenant, before=page.position(ApiKeyId.parse),
                                        limit=page.limit)
    return page.answer(ApiKeyList, found, key_out, key=lambda k: str(k.key_id))


@router.get("/{key_id}", response_model=ApiKeyOut)
async def get_key(key_id: str, tenant: KeysManager, p: PlatformDep) -> ApiKeyOut:
    """A key that was not revoked (a revoked one is a 404 here; the list still shows it)."""
    key = parse_or_404(ApiKeyId, key_id, service.KEY_NOT_FOUND)
    found = await service.get_api_key(p.db, tenant, key)
    if found.revoked_at is not None:
        raise NotFound(service.KEY_NOT_FOUND)
    return key_out(found)


@router.post("/{key_id}/rotate", status_code=201, response_model=KeyOut, responses={201: links(
    GetKey=to("GET", "/v1/api-keys/{key_id}", "The new key.", parameters=_THE_KEY))})
async def rotate_key(
    key_id: str, grant: KeysManagerGrant, p: PlatformDep, body: RotateKey | None = None,
) -> KeyOut:
    """A new key in place of this one (same name, scopes and expiry), shown once; the old
    one stops after ``overlap_seconds``. A key may rotate itself."""
    key = parse_or_404(ApiKeyId, key_id, service.KEY_NOT_FOUND)
    old = await service.get_api_key(p.db, grant.tenant, key)
    _no_wider(grant, old.scopes)
    overlap = (body or RotateKey()).overlap_seconds
    until = datetime.now(UTC) + timedelta(seconds=overlap) if overlap else None
    return issued_out(await service.rotate_api_key(
        p.db, grant.tenant, key, created_by=f"key:{grant.key_id}", old_expires_at=until,
        cache=p.auth_cache))


@router.delete("/{key_id}", response_model=RevokedKeyOut)
async def revoke_key(key_id: str, tenant: KeysManager, p: PlatformDep) -> RevokedKeyOut:
    """Revoke a key at once (this one too, if named: the request still completes)."""
    key = parse_or_404(ApiKeyId, key_id, service.KEY_NOT_FOUND)
    return RevokedKeyOut(key_id=str(key),
                         revoked_at=await service.revoke_api_key(p.db, tenant, key,
                                                                 p.auth_cache))
