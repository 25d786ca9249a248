"""Tenants and their API keys. Operators create both; a key authenticates to one tenant."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg

from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import (
    Conflict,
    NotFound,
    TenantErased,
    TenantMoving,
    Unauthorized,
    ValidationFailed,
)
from tenantry.ids import ApiKeyId, TenantId
from tenantry.tenants.auth_cache import AuthCache
from tenantry.tenants.keys import KEY_PREFIX, display_prefix, key_hash, new_key
from tenantry.tenants.scopes import ALL_SCOPES, KeyGrant, Scope, stored

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
    api_key: str  # the only time the plaintext exists outside the caller
    info: ApiKeyInfo

    @property
    def key_id(self) -> ApiKeyId:
        return self.info.key_id


@dataclass(frozen=True, slots=True)
class NewKey:
    """What a new key is to be: its name, scopes (every scope unless narrowed), expiry, and
    who asks (``operator``, ``key:<id>``, ``user:<id>``: recorded with it)."""

    name: str = ""
    scopes: frozenset[Scope] = ALL_SCOPES
    expires_at: datetime | None = None
    created_by: str = "operator"


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


#: The longest a replaced webhook secret keeps signing (ADR 0045), and the default.
MAX_SECRET_OVERLAP_SECONDS = 7 * 24 * 3600
DEFAULT_SECRET_OVERLAP_SECONDS = 24 * 3600


@dataclass(frozen=True, slots=True)
class RotatedSecret:
    secret: str  # shown once
    previous_valid_until: datetime | None  # None: the old secret stopped at once


async def rotate_webhook_secret(db: Database, tenant: TenantId) -> str:
    """The operator's rotation: a new signing secret for the tenant's webhooks; the old one
    stops at once, and so does one a tenant's rotation left signing."""
    secret = new_webhook_secret()
    async with db.tenant_tx(tenant) as conn:
        done = await conn.execute(Q.set_webhook_secret, tenant.value, secret)
    if not done.endswith(" 1"):
        raise NotFound(TENANT_NOT_FOUND)
    return secret


async def rotate_own_webhook_secret(
    db: Database, tenant: TenantId, overlap_seconds: int
) -> RotatedSecret:
    """The tenant's rotation: a new secret signs from now on, and the current one beside it
    for ``overlap_seconds`` (0 to ``MAX_SECRET_OVERLAP_SECONDS``; 0 stops it at once). A
    secret an earlier rotation left signing stops now: two at most sign a delivery."""
    if not 0 <= overlap_seconds <= MAX_SECRET_OVERLAP_SECONDS:
        raise ValidationFailed(f"overlap_seconds: 0 to {MAX_SECRET_OVERLAP_SECONDS}",
                               field="overlap_seconds")
    secret = new_webhook_secret()
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.rotate_webhook_secret, tenant.value, secret,
                                  overlap_seconds)
    if row is None:
        raise NotFound(TENANT_NOT_FOUND)
    return RotatedSecret(secret, row["webhook_secret_previous_until"])


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


async def issue_api_key(db: Database, tenant: TenantId,
                        new: NewKey = NewKey()) -> IssuedKey:
    if new.expires_at is not None and new.expires_at <= datetime.now(UTC):
        # A 409, not a 400: the time is well formed; it is the clock it conflicts with.
        raise Conflict("expires_at: already past", field="expires_at")
    async with db.tenant_tx(tenant) as conn:
        return await _insert_key(conn, tenant, new, replaces=None)


async def _insert_key(conn: Connection, tenant: TenantId, new: NewKey,
                      replaces: ApiKeyId | None) -> IssuedKey:
    row = await conn.fetchrow(Q.get_tenant, tenant.value)
    if row is None:
        raise NotFound(TENANT_NOT_FOUND)
    if row["erased_at"] is not None:  # its keys were revoked by the erase (ADR 0017)
        raise TenantErased("This tenant was erased: it gets no new API key.")
    key = new_key()
    key_id = ApiKeyId.new()
    # Every scope is stored as NULL, as the keys older than scopes are: such a key also
    # holds the scopes a later release adds, as a full key should.
    scopes = None if new.scopes >= ALL_SCOPES else sorted(new.scopes)
    created = await conn.fetchval(
        Q.insert_api_key, tenant.value, key_id.uuid, key_hash(key), display_prefix(key),
        new.name, scopes, new.expires_at, new.created_by,
        replaces.uuid if replaces else None)
    info = ApiKeyInfo(key_id, display_prefix(key), new.name, created, None,
                      stored(scopes), new.expires_at, new.created_by, replaces)
    return IssuedKey(key, info)


async def rotate_api_key(
    db: Database, tenant: TenantId, key_id: ApiKeyId, *, created_by: str,
    old_expires_at: datetime | None, cache: AuthCache | None = None,
) -> IssuedKey:
    """A new key with the old one's name, scopes and expiry; the old one stops at
    ``old_expires_at`` (an overlap for the callers still using it), or now when None."""
    now = datetime.now(UTC)
    async with db.tenant_tx(tenant) as conn:
        old = await conn.fetchrow(Q.get_api_key_for_update, tenant.value, key_id.uuid)
        if old is None or old["revoked_at"] is not None or (
                old["expires_at"] is not None and old["expires_at"] <= now):
            raise NotFound(KEY_NOT_FOUND)
        before = ApiKeyInfo.from_row(old)
        issued = await _insert_key(conn, tenant, NewKey(
            before.name, before.scopes, before.expires_at, created_by), replaces=key_id)
        if old_expires_at is None:
            await conn.execute(Q.revoke_api_key, tenant.value, key_id.uuid)
        elif before.expires_at is None or old_expires_at < before.expires_at:
            await conn.execute(Q.expire_api_key, tenant.value, key_id.uuid, old_expires_at)
        await conn.execute(Q.announce_revocation)
    if cache is not None:
        cache.clear()
    return issued


@dataclass(frozen=True, slots=True)
class ApiKeyInfo:
    key_id: ApiKeyId
    prefix: str
    name: str
    created_at: datetime
    revoked_at: datetime | None
    scopes: frozenset[Scope]
    expires_at: datetime | None
    created_by: str | None
    replaces: ApiKeyId | None

    @classmethod
    def from_row(cls, r: asyncpg.Record) -> ApiKeyInfo:
        return cls(ApiKeyId(r["key_id"]), r["key_prefix"], r["name"], r["created_at"],
                   r["revoked_at"], stored(r["scopes"]), r["expires_at"], r["created_by"],
                   ApiKeyId(r["replaces"]) if r["replaces"] is not None else None)


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


async def authenticate(db: Database, api_key: str, cache: AuthCache | None = None) -> KeyGrant:
    """What an API key grants. Unknown and revoked keys look the same; an expired one is
    told so (only its holder can ask)."""
    if not api_key.startswith(KEY_PREFIX) or len(api_key) > 200:
        raise Unauthorized("Missing or invalid API key.")
    digest = key_hash(api_key)

    async def read() -> KeyGrant | None:
        async with db.unscoped() as conn:
            found = await conn.fetchrow(Q.authenticate, digest)
        if found is None:
            return None
        if found["moving"]:  # never cached: a freeze's notification cleared the cache,
            raise TenantMoving()  # and every request asks again until the move ends
        return KeyGrant(TenantId(found["tenant_id"]), ApiKeyId(found["key_id"]),
                        stored(found["scopes"]), found["expires_at"])

    grant = await cache.resolve(digest, read) if cache is not None else await read()
    if grant is None:  # never cached: a new key works at once
        raise Unauthorized("Missing or invalid API key.")
    if grant.expired(datetime.now(UTC)):
        assert grant.expires_at is not None
        raise Unauthorized(f"This API key expired at {grant.expires_at.isoformat()}.")
    return grant
