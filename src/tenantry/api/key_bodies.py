"""The bodies of the API key routes: the operator's (``/admin/v1/tenants/{id}/api-keys``)
and the tenant's own (``/v1/api-keys``) take and give the same shapes."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field

from tenantry.api.fields import Body, IsoTime, Text
from tenantry.tenants.scopes import ALL_SCOPES, Scope
from tenantry.tenants.service import ApiKeyInfo, IssuedKey, NewKey

_SCOPES = ", ".join(f"`{s.value}`" for s in Scope)
#: A scope by its name (a Body is strict, which would want the enum itself).
ScopeName = Annotated[Scope, Field(strict=False)]


class CreateKey(Body):
    name: Text = Field(default="", max_length=200)
    scopes: list[ScopeName] | None = Field(
        default=None, min_length=1, max_length=len(Scope),
        description=f"What the key may do ({_SCOPES}); every scope when omitted. A "
                    "tenant's key grants no scope it does not hold itself.")
    expires_at: IsoTime | None = Field(
        default=None, strict=False,
        description="When the key stops working (with a time zone; a time already past is a "
                    "409); never when omitted.")

    def new_key(self, created_by: str) -> NewKey:
        scopes = frozenset(self.scopes) if self.scopes is not None else ALL_SCOPES
        return NewKey(self.name, scopes, self.expires_at, created_by)


class ApiKeyOut(BaseModel):
    """A key's metadata: never the key or its hash."""

    key_id: str
    prefix: str = Field(description="The key's first characters, to tell keys apart.")
    name: str
    scopes: list[Scope] = Field(description="What it may do (a key older than scopes "
                                            "holds them all).")
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    created_by: str | None = Field(description="`operator`, `key:<key id>` or "
                                               "`user:<user id>`; null for older keys.")
    replaces: str | None = Field(description="The key this one was rotated from.")


class KeyOut(ApiKeyOut):
    api_key: str = Field(description="Shown once; only its SHA-256 is stored.")


class ApiKeyList(BaseModel):
    data: list[ApiKeyOut]
    next_cursor: str | None


def key_out(k: ApiKeyInfo) -> ApiKeyOut:
    return ApiKeyOut(key_id=str(k.key_id), prefix=k.prefix, name=k.name,
                     scopes=sorted(k.scopes), created_at=k.created_at,
                     expires_at=k.expires_at, revoked_at=k.revoked_at,
                     created_by=k.created_by,
                     replaces=str(k.replaces) if k.replaces else None)


def issued_out(issued: IssuedKey) -> KeyOut:
    return KeyOut(api_key=issued.api_key, **key_out(issued.info).model_dump())
