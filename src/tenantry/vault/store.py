"""Per-tenant secrets. Written by operators (write-only: the API lists names and dates,
never a value); read by the tool gateway for the one outbound call that needs a
credential (invariant 5)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import NotFound
from tenantry.ids import TenantId
from tenantry.vault import crypto
from tenantry.vault.crypto import MasterKey, VaultError

Q = load(__package__)


@dataclass(frozen=True, slots=True)
class SecretInfo:
    name: str
    created_at: datetime
    updated_at: datetime
    created: bool = False


@dataclass(frozen=True, slots=True, repr=False)
class SealedSecret:
    """A tenant's secret as stored: its ciphertext and the tenant's wrapped data key, useless
    without the master key. What a process may keep in memory between calls."""

    tenant: str
    name: str
    ciphertext: bytes
    nonce: bytes
    wrapped_key: bytes
    key_nonce: bytes
    master_key_id: str

    def __repr__(self) -> str:
        return f"SealedSecret({self.tenant!r}, {self.name!r})"


class Vault:
    def __init__(self, db: Database, master: MasterKey) -> None:
        self._db = db
        self._master = master

    async def put(self, tenant: TenantId, name: str, value: str) -> SecretInfo:
        """Store (or replace) a secret; ``created`` tells which."""
        async with self._db.tenant_tx(tenant) as conn:
            return await self.put_in(conn, tenant, name, value)

    async def put_in(self, conn: Connection, tenant: TenantId, name: str,
                     value: str) -> SecretInfo:
        """:meth:`put` in the caller's transaction (the tenant's), so that the secret and
        what uses it (a model account) commit together or not at all."""
        data_key = await self._data_key(conn, tenant, create=True)
        ciphertext, nonce = crypto.encrypt_secret(data_key, tenant.value, name, value)
        row = await conn.fetchrow(Q.upsert_secret, tenant.value, name, ciphertext, nonce)
        assert row is not None
        return SecretInfo(name, row["created_at"], row["updated_at"], row["created"])

    async def get(self, tenant: TenantId, name: str) -> str:
        return self.open(await self.sealed(tenant, name))

    async def sealed(self, tenant: TenantId, name: str) -> SealedSecret:
        """The secret as it is stored, to be kept (e.g. cached) instead of its value and
        opened for the one call that sends it."""
        async with self._db.tenant_tx(tenant) as conn:
            row = await conn.fetchrow(Q.get_secret, tenant.value, name)
            if row is None:
                raise NotFound(f"No secret named {name!r}.")
            key = await conn.fetchrow(Q.get_tenant_key, tenant.value)
        if key is None:
            raise VaultError("the tenant has no data key")
        return SealedSecret(tenant.value, name, bytes(row["ciphertext"]), bytes(row["nonce"]),
                            bytes(key["wrapped_key"]), bytes(key["nonce"]),
                            key["master_key_id"])

    def open(self, sealed: SealedSecret) -> str:
        if sealed.master_key_id != self._master.key_id:
            raise VaultError("the tenant's data key is wrapped by another master key; "
                             "finish `tenantry vault rotate-master-key` first")
        data_key = crypto.unwrap(self._master, sealed.tenant, sealed.wrapped_key,
                                 sealed.key_nonce)
        return crypto.decrypt_secret(data_key, sealed.tenant, sealed.name, sealed.ciphertext,
                                     sealed.nonce)

    async def seal(self, conn: Connection, tenant: TenantId, label: str,
                   value: str) -> tuple[bytes, bytes]:
        """``value`` sealed under the tenant's data key, bound to ``label`` (what it is, e.g.
        ``oauth/<server>/refresh``: it opens only as that): (ciphertext, nonce), for a row of
        the caller's, in the caller's transaction."""
        data_key = await self._data_key(conn, tenant, create=True)
        return crypto.encrypt_secret(data_key, tenant.value, label, value)

    async def unseal(self, conn: Connection, tenant: TenantId, label: str,
                     sealed: tuple[bytes, bytes]) -> str:
        data_key = await self._data_key(conn, tenant, create=False)
        return crypto.decrypt_secret(data_key, tenant.value, label, bytes(sealed[0]),
                                     bytes(sealed[1]))

    async def _data_key(self, conn: Connection, tenant: TenantId, *, create: bool) -> bytes:
        row = await conn.fetchrow(Q.get_tenant_key, tenant.value)
        if row is None:
            if not create:
                raise VaultError("the tenant has no data key")
            data_key = crypto.new_data_key()
            wrapped, nonce = crypto.wrap(self._master, tenant.value, data_key)
            await conn.execute(Q.insert_tenant_key, tenant.value, wrapped, nonce,
                               self._master.key_id)
            row = await conn.fetchrow(Q.get_tenant_key, tenant.value)  # ours, or a racer's
            assert row is not None
        if row["master_key_id"] != self._master.key_id:
            raise VaultError("the tenant's data key is wrapped by another master key; "
                             "finish `tenantry vault rotate-master-key` first")
        return crypto.unwrap(self._master, tenant.value, bytes(row["wrapped_key"]),
                             bytes(row["nonce"]))


async def secrets_page(
    db: Database, tenant: TenantId, *, after: str | None, limit: int
) -> list[SecretInfo]:
    """Names and dates of the tenant's secrets, by name; never a value. Needs no master
    key: nothing is decrypted."""
    async with db.tenant_tx(tenant) as conn:
        rows = await conn.fetch(Q.secrets_page, tenant.value, after, limit)
    return [SecretInfo(r["name"], r["created_at"], r["updated_at"]) for r in rows]


async def secret_info(db: Database, tenant: TenantId, name: str) -> SecretInfo:
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.secret_info, tenant.value, name)
    if row is None:
        raise NotFound(f"No secret named {name!r}.")
    return SecretInfo(row["name"], row["created_at"], row["updated_at"])


async def delete_secret(conn: Connection, tenant: TenantId, name: str) -> None:
    """In the caller's transaction (which checked nothing still sends it)."""
    if await conn.fetchval(Q.delete_secret, tenant.value, name) is None:
        raise NotFound(f"No secret named {name!r}.")


async def rotate_master_key(conn: asyncpg.Connection, old: MasterKey, new: MasterKey) -> int:
    """Re-wrap every tenant's data key (and re-seal model accounts' API keys) under ``new``
    in one transaction; tenants' secrets themselves are not re-encrypted. Keys already under
    ``new`` are left alone, so an interrupted rotation can simply be run again. Needs a
    connection that sees all tenants."""
    async with conn.transaction():
        count = 0
        for row in await conn.fetch(Q.all_tenant_keys):
            count += await _rewrap(conn, row["tenant_id"], row, old, new)
        # Model accounts' API keys are sealed by the master key directly.
        return count + await _reseal_all(conn, await conn.fetch(Q.all_sealed_account_secrets),
                                         old, new)


async def rewrap_tenant(conn: asyncpg.Connection, tenant: str, old: MasterKey,
                        new: MasterKey) -> int:
    """Re-wrap one tenant's data key, and re-seal its own model accounts' keys, from ``old``
    to ``new``: a tenant moved to a cell with another master key (ADR 0029). Its secrets
    themselves are untouched (the data key is the same). In the caller's transaction."""
    row = await conn.fetchrow(Q.tenant_key_for_update, tenant)
    count = 0 if row is None else await _rewrap(conn, tenant, row, old, new)
    return count + await _reseal_all(
        conn, await conn.fetch(Q.sealed_account_secrets_of_tenant, tenant), old, new)


async def _rewrap(conn: asyncpg.Connection, tenant: str, row: asyncpg.Record, old: MasterKey,
                  new: MasterKey) -> int:
    """Re-wrap a tenant's data key (its key row) from ``old`` to ``new``: 1, or 0 when it
    is under ``new`` already."""
    if row["master_key_id"] == new.key_id:
        return 0
    if row["master_key_id"] != old.key_id:
        raise VaultError(f"tenant {tenant}'s key is wrapped by neither key")
    data_key = crypto.unwrap(old, tenant, bytes(row["wrapped_key"]), bytes(row["nonce"]))
    wrapped, nonce = crypto.wrap(new, tenant, data_key)
    await conn.execute(Q.rewrap_tenant_key, tenant, wrapped, nonce, new.key_id)
    return 1


async def _reseal_all(conn: asyncpg.Connection, accounts: list[asyncpg.Record],
                      old: MasterKey, new: MasterKey) -> int:
    """Re-seal these model accounts' keys from ``old`` to ``new``; how many were not under
    ``new`` already."""
    count = 0
    for account in accounts:
        if account["master_key_id"] == new.key_id:
            continue
        if account["master_key_id"] != old.key_id:
            raise VaultError(f"model account {account['account_id']}'s key is sealed by "
                             "neither key")
        await _reseal(conn, account, old, new)
        count += 1
    return count


async def reseal_legacy_accounts(conn: asyncpg.Connection, master: MasterKey) -> list[str]:
    """Re-seal model accounts' keys sealed before migration 0015 (bound to the account id
    only) so they are bound to the provider and base_url too; the ids re-sealed. Idempotent.
    Needs the migrating role: the application role may not update sealed keys. Keys under
    another master key are left to `tenantry vault rotate-master-key`, which re-seals too."""
    resealed = []
    async with conn.transaction():
        for row in await conn.fetch(Q.legacy_sealed_account_secrets):
            if row["master_key_id"] == master.key_id:
                await _reseal(conn, row, master, master)
                resealed.append(row["account_id"])
    return resealed


async def _reseal(conn: asyncpg.Connection, row: asyncpg.Record, old: MasterKey,
                  new: MasterKey) -> None:
    """Open an account's key as it was sealed, seal it under ``new`` bound to the account's
    provider and base_url as they are now."""
    def scope(binding: int) -> str:
        return crypto.account_scope(row["account_id"], row["provider"], row["base_url"],
                                    binding)

    value = crypto.open_platform_secret(old, scope(row["secret_binding"]),
                                        bytes(row["secret_sealed"]), bytes(row["secret_nonce"]))
    sealed, nonce = crypto.seal_platform_secret(new, scope(crypto.ACCOUNT_BINDING), value)
    await conn.execute(Q.reseal_account_secret, row["account_id"], sealed, nonce, new.key_id,
                       crypto.ACCOUNT_BINDING)
