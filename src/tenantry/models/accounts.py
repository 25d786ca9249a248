"""Provider accounts: where the model gateway can send a call, and with which credentials.

Operators register platform accounts (``POST /admin/v1/model-accounts``); a tenant's own
provider key (bring your own key) is an account owned by that tenant: it serves only that
tenant's runs, with the tenant's own limits, and its key stays in the tenant's vault.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound, ValidationFailed
from tenantry.ids import TenantId
from tenantry.ledger.prices import PriceBook, how_to_price
from tenantry.ledger.pricing import SANDBOX
from tenantry.models.types import PLATFORM, TENANT
from tenantry.vault import crypto
from tenantry.vault.crypto import MasterKey

Q = load(__package__)

PROVIDERS = ("openai", "anthropic", "scripted")
ANY_MODEL = "*"
ANY_REGION = "default"
ACCOUNT_ID_RE = r"^[a-z0-9][a-z0-9_-]{1,63}$"
#: Who registered an account (``model_accounts.registered_by``, migration 0050).
OPERATOR = "operator"
_ACCOUNT_ID = re.compile(ACCOUNT_ID_RE)


@dataclass(frozen=True, slots=True)
class ModelAccount:
    account_id: str
    provider: str
    base_url: str
    models: tuple[str, ...]
    region: str
    rpm: int | None = None
    tpm: int | None = None
    priority: int = 0
    tenant: str | None = None  # set: a bring-your-own-key account serving only this tenant
    secret_name: str | None = None  # BYOK: the tenant's vault secret holding the key
    sealed_secret: tuple[bytes, bytes] | None = None  # platform: (sealed, nonce)
    created_at: datetime | None = None
    enabled: bool = True  # false: disabled (by the operator, or its tenant), not routed to
    secret_binding: int = crypto.ACCOUNT_BINDING  # what the sealed key is bound to
    # Who registered it: the tenant itself (``POST /v1/model-accounts``: the gateway holds it
    # to the operator's address rules at every connection) or the operator.
    registered_by: str = OPERATOR
    # Called in the provider's streaming mode (ADR 0030). Not stored: the workers'
    # TENANTRY_MODEL_NO_STREAM turns it off for the accounts it lists.
    stream: bool = True

    def serves(self, model: str) -> bool:
        """``*`` serves any model; ``family/*`` any ``family/...`` model."""
        return any(m in (model, ANY_MODEL) or (m.endswith("/*") and model.startswith(m[:-1]))
                   for m in self.models)

    def allowed_for(self, tenant: str, region: str) -> bool:
        """May a run of ``tenant``, whose data must stay in ``region``, use this account?
        A tenant in the ``default`` region may use any; otherwise the account's region must
        be the tenant's or inside it (``eu`` allows ``eu``, ``eu-west-1``, ...)."""
        if self.tenant is not None and self.tenant != tenant:
            return False
        return region_allows(region, self.region)

    @property
    def owner(self) -> str:
        """Whose account it is: a tenant's own (bring your own key), or the platform's."""
        return TENANT if self.tenant is not None else PLATFORM

    @property
    def scope(self) -> str:
        """The sealed key's associated data: the account and where its key is sent, so a
        row whose base_url or provider changed cannot open its key."""
        return crypto.account_scope(self.account_id, self.provider, self.base_url,
                                    self.secret_binding)

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> ModelAccount:
        sealed = None
        if row["secret_sealed"] is not None:
            sealed = (bytes(row["secret_sealed"]), bytes(row["secret_nonce"]))
        return cls(
            account_id=row["account_id"], provider=row["provider"], base_url=row["base_url"],
            models=tuple(row["models"]), region=row["region"], rpm=row["rpm"], tpm=row["tpm"],
            priority=row["priority"], tenant=row["tenant_id"], secret_name=row["secret_name"],
            sealed_secret=sealed, created_at=row["created_at"], enabled=row["enabled"],
            secret_binding=row["secret_binding"], registered_by=row["registered_by"],
        )

    def to_json(self) -> dict[str, Any]:
        """What the operator API shows: never the key, only whether there is one."""
        return {
            "account_id": self.account_id, "provider": self.provider,
            "base_url": self.base_url, "models": list(self.models), "region": self.region,
            "rpm": self.rpm, "tpm": self.tpm, "priority": self.priority,
            "tenant_id": self.tenant, "secret": self.secret_name,
            "has_secret": self.sealed_secret is not None or self.secret_name is not None,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "enabled": self.enabled, "registered_by": self.registered_by,
        }


def parse_account_id(text: str) -> str:
    """An account id (a slug), or ValueError: text that is none (a NUL, a newline) never
    reaches a query."""
    if not _ACCOUNT_ID.fullmatch(text):
        raise ValueError("account_id: 2-64 characters of a-z, 0-9, '_', '-'")
    return text


def is_wildcard(model: str) -> bool:
    return model == ANY_MODEL or model.endswith("/*")


def region_allows(tenant_region: str, account_region: str) -> bool:
    if tenant_region in ("", ANY_REGION):
        return True
    return account_region == tenant_region or account_region.startswith(tenant_region + "-")


@dataclass(frozen=True, slots=True)
class NewAccount:
    account_id: str
    provider: str
    base_url: str
    models: tuple[str, ...]
    region: str
    rpm: int | None = None
    tpm: int | None = None
    priority: int = 0
    tenant: TenantId | None = None
    secret: str | None = None  # platform: the key itself (sealed before it is stored)
    secret_name: str | None = None  # BYOK: name of the tenant's vault secret


async def register(
    db: Database, account: NewAccount, *, prices: PriceBook, master: MasterKey | None,
) -> ModelAccount:
    """Store a new account. Every model it names must have a price in force (billing is
    exact or it is refused); a wildcard (``*``, ``family/*``) is accepted, and each call
    through it needs its own model priced (the run fails before the call otherwise). The
    key is sealed with the master key, or for BYOK must already be in the tenant's vault."""
    await check_new(account, prices)
    if account.tenant is None and account.secret_name is not None:
        raise ValidationFailed("secret_name: only a tenant's own account reads the vault")
    if account.tenant is not None and account.secret is not None:
        raise ValidationFailed("secret: a tenant's own account names its vault secret "
                               "(secret_name) instead of carrying a key")
    sealed: tuple[bytes, bytes] | None = None
    if account.secret is not None:
        if master is None:
            raise ValidationFailed("secret: the vault is not configured (TENANTRY_MASTER_KEY)")
        scope = crypto.account_scope(account.account_id, account.provider, account.base_url,
                                     crypto.ACCOUNT_BINDING)
        sealed = crypto.seal_platform_secret(master, scope, account.secret)
    async with db.unscoped() as conn:
        try:
            row = await insert(conn, account, sealed=sealed, master=master,
                               registered_by=OPERATOR)
        except asyncpg.ForeignKeyViolationError:
            raise NotFound("No tenant with this id.") from None
    if row is None:
        raise Conflict(f"A model account named {account.account_id!r} already exists.")
    # Runs parked because nothing served these models may be served now.
    await wake_parked(db, list(account.models))
    return row


async def check_new(account: NewAccount, prices: PriceBook) -> None:
    """What every new account must be, whoever registers it: a known wire format, and
    every model it names priced (or a wildcard)."""
    if not _ACCOUNT_ID.match(account.account_id):
        raise ValidationFailed("account_id: 2-64 characters of a-z, 0-9, '_', '-'")
    if account.provider not in PROVIDERS:
        raise ValidationFailed(f"provider: one of {', '.join(PROVIDERS)}")
    if SANDBOX in account.models:
        raise ValidationFailed(f"models: {SANDBOX!r} is the reserved name of the sandbox's "
                               "price, not a model")
    unpriced = [m for m in account.models
                if not is_wildcard(m) and not await prices.is_priced(m)]
    if unpriced:
        # The platform's state, not the request's shape: pricing the model makes the same
        # request succeed.
        raise Conflict(f"models: {how_to_price(unpriced)}", field="models", models=unpriced)


async def insert(conn: Connection, account: NewAccount, *, sealed: tuple[bytes, bytes] | None,
                 master: MasterKey | None, registered_by: str) -> ModelAccount | None:
    """Insert the account on ``conn`` (in its transaction); None if the id is taken."""
    row = await conn.fetchrow(
        Q.insert_account, account.account_id,
        account.tenant.value if account.tenant else None, account.provider,
        account.base_url, list(account.models), account.region, account.rpm,
        account.tpm, account.priority, account.secret_name,
        sealed[0] if sealed else None, sealed[1] if sealed else None,
        master.key_id if sealed and master else None, registered_by,
    )
    return None if row is None else ModelAccount.from_row(row)


async def list_enabled(db: Database) -> list[ModelAccount]:
    async with db.unscoped() as conn:
        return [ModelAccount.from_row(r) for r in await conn.fetch(Q.list_accounts)]


async def accounts_page(
    db: Database, *, tenant: TenantId | None, after: str | None, limit: int,
) -> list[ModelAccount]:
    """A page of accounts by id: every one (``tenant`` None) or one tenant's own."""
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.accounts_page, tenant.value if tenant else None, after,
                                limit)
    return [ModelAccount.from_row(r) for r in rows]


async def get_account(db: Database, account_id: str,
                      tenant: TenantId | None = None) -> ModelAccount:
    """One account (disabled ones too); with ``tenant``, only that tenant's own."""
    row = None
    if _ACCOUNT_ID.fullmatch(account_id):
        async with db.unscoped() as conn:
            row = await conn.fetchrow(Q.get_account, account_id)
    if row is None or (tenant is not None and row["tenant_id"] != tenant.value):
        raise NotFound("No model account with this id.")
    return ModelAccount.from_row(row)


async def disable(db: Database, account_id: str) -> ModelAccount:
    row = None
    if _ACCOUNT_ID.fullmatch(account_id):  # text Postgres cannot hold (NUL) is no id either
        async with db.unscoped() as conn:
            row = await conn.fetchrow(Q.disable_account, account_id)
    if row is None:
        raise NotFound("No enabled model account with this id.")
    return ModelAccount.from_row(row)


WAKE_BATCH = 1000  # runs queued per statement


async def wake_parked(db: Database, models: list[str] | None, *,
                      limit: int = WAKE_BATCH) -> int:
    """Send runs parked on one of ``models`` (or, with None, whose recheck is due) back to
    the queue, at most ``limit``. Returns how many."""
    row = await db.statement(Q.wake_parked, models, limit)  # no reset: it sets nothing
    return int(row[0] or 0) if row is not None else 0


async def wake_parked_for(db: Database, account: ModelAccount, limit: int | None = None) -> int:
    """Send runs parked on a model ``account`` serves back to the queue: ``limit`` of them,
    or (None) all. A tenant's own account wakes only that tenant's runs. A ``family/*``
    account wakes runs parked on any model (the store matches names exactly): the ones it
    cannot serve park again, which costs a little; missing one would cost liveness."""
    models = list(account.models)
    if any(m.endswith("/*") for m in models):
        models = [ANY_MODEL]
    tenant = TenantId(account.tenant) if account.tenant is not None else None
    return await wake_parked_on(db, models, tenant=tenant, limit=limit)


async def wake_parked_on(db: Database, models: list[str], *, tenant: TenantId | None = None,
                         limit: int | None = None) -> int:
    """Send runs parked on one of ``models`` (of ``tenant`` only, if given) back to the
    queue: ``limit`` of them, or (None) all, a batch at a time. Returns how many."""
    total = 0
    for _ in range(100):  # a bound, should woken runs park again as fast as they are woken
        batch = WAKE_BATCH if limit is None else min(limit - total, WAKE_BATCH)
        if batch <= 0:
            break
        if tenant is None:
            woken = await wake_parked(db, models, limit=batch)
        else:
            async with db.tenant_tx(tenant) as conn:
                woken = int(await conn.fetchval(Q.wake_parked_of_tenant, tenant.value,
                                                models, batch) or 0)
        total += woken
        if woken < batch:
            break
    return total
