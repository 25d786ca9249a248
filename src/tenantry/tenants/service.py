"""Tenants and their API keys. Operators create both; a key authenticates to one tenant."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound, Unauthorized
from tenantry.ids import ApiKeyId, TenantId
from tenantry.tenants.auth_cache import AuthCache
from tenantry.tenants.keys import KEY_PREFIX, display_prefix, key_hash, new_key

Q = load(__package__)


@dataclass(frozen=True, slots=True)
class Tenant:
    tenant_id: TenantId
    name: str
    region: str
    plan: str
    home_cell: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class CreatedTenant:
    tenant: Tenant
    webhook_secret: str  # shown once, like an API key

    @property
    def tenant_id(self) -> TenantId:
        return self.tenant.tenant_id


@dataclass(frozen=True, slots=True)
class IssuedKey:
    key_id: ApiKeyId
    api_key: str  # the only time the plaintext exists outside the caller
    prefix: str
    created_at: datetime


async def create_tenant(
    db: Database, name: str, *, region: str = "default", plan: str = "standard",
    tenant_id: TenantId | None = None,
) -> CreatedTenant:
    tenant = tenant_id or TenantId.new()
    secret = new_webhook_secret()
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.insert_tenant, tenant.value, name, region, plan, secret)
    if row is None:
        raise Conflict("a tenant with this id already exists")
    return CreatedTenant(Tenant(tenant, row["name"], row["region"], row["plan"],
                                row["home_cell"], row["created_at"]), secret)


def new_webhook_secret() -> str:
    return "whsec_" + secrets.token_hex(32)


async def rotate_webhook_secret(db: Database, tenant: TenantId) -> str:
    """A new signing secret for the tenant's webhooks; the old one stops at once."""
    secret = new_webhook_secret()
    async with db.tenant_tx(tenant) as conn:
        done = await conn.execute(Q.set_webhook_secret, tenant.value, secret)
    if not done.endswith(" 1"):
        raise NotFound("No tenant with this id.")
    return secret


async def get_tenant(db: Database, tenant: TenantId) -> Tenant:
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.get_tenant, tenant.value)
    if row is None:
        raise NotFound("No tenant with this id.")
    return Tenant(tenant, row["name"], row["region"], row["plan"], row["home_cell"],
                  row["created_at"])


async def issue_api_key(db: Database, tenant: TenantId, name: str = "") -> IssuedKey:
    key = new_key()
    key_id = ApiKeyId.new()
    async with db.tenant_tx(tenant) as conn:
        if await conn.fetchrow(Q.get_tenant, tenant.value) is None:
            raise NotFound("No tenant with this id.")
        created = await conn.fetchval(
            Q.insert_api_key, tenant.value, key_id.uuid, key_hash(key), display_prefix(key), name
        )
    return IssuedKey(key_id, key, display_prefix(key), created)


@dataclass(frozen=True, slots=True)
class ApiKeyInfo:
    key_id: ApiKeyId
    prefix: str
    name: str
    created_at: datetime
    revoked_at: datetime | None


async def list_api_keys(db: Database, tenant: TenantId) -> list[ApiKeyInfo]:
    async with db.tenant_tx(tenant) as conn:
        rows = await conn.fetch(Q.list_api_keys, tenant.value)
    return [ApiKeyInfo(ApiKeyId(r["key_id"]), r["key_prefix"], r["name"], r["created_at"],
                       r["revoked_at"]) for r in rows]


async def revoke_api_key(
    db: Database, tenant: TenantId, key_id: ApiKeyId, cache: AuthCache | None = None
) -> datetime:
    async with db.tenant_tx(tenant) as conn:
        revoked: datetime | None = await conn.fetchval(Q.revoke_api_key, tenant.value, key_id.uuid)
        if revoked is not None:  # every API process drops its cached keys at commit
            await conn.execute(Q.announce_revocation)
    if revoked is None:
        raise NotFound("No API key with this id.")
    if cache is not None:
        cache.clear()
    return revoked


async def authenticate(db: Database, api_key: str, cache: AuthCache | None = None) -> TenantId:
    """The tenant an API key belongs to. Unknown and revoked keys look the same."""
    if not api_key.startswith(KEY_PREFIX) or len(api_key) > 200:
        raise Unauthorized("Missing or invalid API key.")
    digest = key_hash(api_key)
    cached = cache.get(digest) if cache is not None else None
    if cached is not None:
        return cached
    async with db.unscoped() as conn:
        tenant: str | None = await conn.fetchval(Q.authenticate, digest)
    if tenant is None:  # never cached: a new key works at once
        raise Unauthorized("Missing or invalid API key.")
    if cache is not None:
        cache.put(digest, TenantId(tenant))
    return TenantId(tenant)
