"""Tenants and their API keys. Operators create both; a key authenticates to one tenant."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound, TenantErased, TenantMoving, Unauthorized
from tenantry.ids import ApiKeyId, TenantId
from tenantry.tenants.auth_cache import AuthCache
from tenantry.tenants.keys import KEY_PREFIX, display_prefix, key_hash, new_key

Q = load(__package__)

TENANT_NOT_FOUND = "No tenant with this id."
KEY_NOT_FOUND = "No API key with this id."


@dataclass(frozen=True, slots=True)
class Tenant:
    """A customer of the platform: its home cell and region decide where its runs live."""

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
    tenant_id: TenantId | None = None, home_cell: str = "local",
) -> CreatedTenant:
    """``home_cell``: the cell creating it (TENANTRY_CELL), which its rows live in."""
    tenant = tenant_id or TenantId.new()
    secret = new_webhook_secret()
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.insert_tenant, tenant.value, name, region, plan, secret,
                                  home_cell)
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
        raise NotFound(TENANT_NOT_FOUND)
    return secret


async def get_tenant(db: Database, tenant: TenantId) -> Tenant:
    return _tenant(await db.tenant_row(tenant, Q.get_tenant, missing=TENANT_NOT_FOUND))


async def set_admissions_paused(db: Database, tenant: TenantId,
                                paused: bool) -> datetime | None:
    """Pause (or resume) the tenant's admissions: while paused, POST /v1/runs and POST
    /v1/activity-tasks answer 409 admissions_paused (admission reads the flag in its lock
    query). When the pause began, or None once resumed."""
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.set_admissions_paused, tenant.value, paused)
    if row is None:
        raise NotFound(TENANT_NOT_FOUND)
    paused_at: datetime | None = row["admissions_paused_at"]
    return paused_at


async def admissions_paused_at(db: Database, tenant: TenantId) -> datetime | None:
    """When the tenant's admissions were paused; None when they are not (or no tenant)."""
    async with db.tenant_tx(tenant) as conn:
        found: datetime | None = await conn.fetchval(Q.admissions_paused_at, tenant.value)
    return found


async def list_tenants(db: Database, *, after: TenantId | None, limit: int) -> list[Tenant]:
    """Every tenant, by id: a page of at most ``limit`` (capped at 200) after ``after``."""
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.tenants_page, after.value if after else None, limit)
    return [_tenant(r) for r in rows]


def _tenant(row: asyncpg.Record) -> Tenant:
    return Tenant(TenantId(row["tenant_id"]), row["name"], row["region"], row["plan"],
                  row["home_cell"], row["created_at"])


async def issue_api_key(db: Database, tenant: TenantId, name: str = "") -> IssuedKey:
    key = new_key()
    key_id = ApiKeyId.new()
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.get_tenant, tenant.value)
        if row is None:
            raise NotFound(TENANT_NOT_FOUND)
        if row["erased_at"] is not None:  # its keys were revoked by the erase (ADR 0017)
            raise TenantErased("This tenant was erased: it gets no new API key.")
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


    @classmethod
    def from_row(cls, r: asyncpg.Record) -> ApiKeyInfo:
        return cls(ApiKeyId(r["key_id"]), r["key_prefix"], r["name"], r["created_at"],
                   r["revoked_at"])


async def list_api_keys(db: Database, tenant: TenantId) -> list[ApiKeyInfo]:
    async with db.tenant_tx(tenant) as conn:
        rows = await conn.fetch(Q.list_api_keys, tenant.value)
    return [ApiKeyInfo.from_row(r) for r in rows]


async def api_keys_page(
    db: Database, tenant: TenantId, *, before: ApiKeyId | None, limit: int
) -> list[ApiKeyInfo]:
    """The tenant's keys, revoked ones included, newest first (404 for no such tenant)."""
    async with db.tenant_tx(tenant) as conn:
        if await conn.fetchrow(Q.get_tenant, tenant.value) is None:
            raise NotFound(TENANT_NOT_FOUND)
        rows = await conn.fetch(Q.api_keys_page, tenant.value,
                                before.uuid if before else None, limit)
    return [ApiKeyInfo.from_row(r) for r in rows]


async def get_api_key(db: Database, tenant: TenantId, key_id: ApiKeyId) -> ApiKeyInfo:
    return ApiKeyInfo.from_row(
        await db.tenant_row(tenant, Q.get_api_key, key_id.uuid, missing=KEY_NOT_FOUND))


async def revoke_api_key(
    db: Database, tenant: TenantId, key_id: ApiKeyId, cache: AuthCache | None = None
) -> datetime:
    async with db.tenant_tx(tenant) as conn:
        revoked: datetime | None = await conn.fetchval(Q.revoke_api_key, tenant.value, key_id.uuid)
        if revoked is not None:  # every API process drops its cached keys at commit
            await conn.execute(Q.announce_revocation)
    if revoked is None:
        raise NotFound(KEY_NOT_FOUND)
    if cache is not None:
        cache.clear()
    return revoked


async def announce_revocations(db: Database, tenant: TenantId,
                               cache: AuthCache | None = None) -> None:
    """Every API process drops its cached keys now: after the tenant's keys were revoked
    otherwise than one by one (an erase revokes them all)."""
    async with db.tenant_tx(tenant) as conn:
        await conn.execute(Q.announce_revocation)
    if cache is not None:
        cache.clear()


async def authenticate(db: Database, api_key: str, cache: AuthCache | None = None) -> TenantId:
    """The tenant an API key belongs to. Unknown and revoked keys look the same."""
    if not api_key.startswith(KEY_PREFIX) or len(api_key) > 200:
        raise Unauthorized("Missing or invalid API key.")
    digest = key_hash(api_key)

    async def read() -> TenantId | None:
        async with db.unscoped() as conn:
            found = await conn.fetchrow(Q.authenticate, digest)
        if found is None or found["tenant_id"] is None:
            return None
        if found["moving"]:  # never cached: a freeze's notification cleared the cache,
            raise TenantMoving()  # and every request asks again until the move ends
        return TenantId(found["tenant_id"])

    tenant = await cache.resolve(digest, read) if cache is not None else await read()
    if tenant is None:  # never cached: a new key works at once
        raise Unauthorized("Missing or invalid API key.")
    return tenant


async def key_of(db: Database, tenant: TenantId, api_key: str) -> ApiKeyId:
    """The id of ``tenant``'s key ``api_key`` (authenticated first): for what records who
    asked. A key revoked meanwhile is refused like an unknown one."""
    async with db.tenant_tx(tenant) as conn:
        found = await conn.fetchval(Q.key_id, tenant.value, key_hash(api_key))
    if found is None:
        raise Unauthorized("Missing or invalid API key.")
    return ApiKeyId(found)
