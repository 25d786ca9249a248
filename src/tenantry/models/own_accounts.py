"""A tenant's own provider accounts, registered and managed with its own API key
(``/v1/model-accounts``; bring your own key).

Such an account is a ``ModelAccount`` with the tenant as owner, as one the operator
registers for it is (models/accounts.py): it serves only that tenant's runs, with the
tenant's own limits, and its key lives in the tenant's vault. What differs is that the
tenant hands over the key itself (write-only) rather than naming a secret: the key goes
into the vault under a name the account is given (:func:`secret_name_for`), in the same
transaction as the account — either both are stored or neither is. The base URL is held to
the operator's rules for tenants' own destinations, at registration (by the API) and at
every connection (models/clients.py), and the account says so (``registered_by``).
"""

from __future__ import annotations

import contextlib
import secrets

from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound
from tenantry.ids import TenantId
from tenantry.ledger.prices import PriceBook
from tenantry.models import accounts
from tenantry.models.accounts import ModelAccount, NewAccount
from tenantry.models.types import TENANT
from tenantry.vault import Vault
from tenantry.vault import store as vault_store

Q = load(__package__)

#: Enabled accounts one tenant may have registered (every worker holds a client, a breaker
#: and a capacity share per account: bounded, as everything a tenant can create is).
MAX_OWN_ACCOUNTS = 20
NOT_FOUND = "No model account with this id."


def new_account_id() -> str:
    """A fresh account id. Tenants do not choose one: ids are one namespace across the
    platform, and a 409 for a taken id would tell a tenant another's account exists."""
    return f"own-{secrets.token_hex(8)}"


def secret_name_for(account_id: str) -> str:
    """The vault secret holding an account's key (listed with the tenant's secrets)."""
    return f"model-account.{account_id}"


async def register(db: Database, vault: Vault, account: NewAccount, api_key: str, *,
                   prices: PriceBook) -> ModelAccount:
    """Store ``api_key`` in the tenant's vault and the account that reads it, in one
    transaction. ``account`` names its tenant and :func:`secret_name_for` its id; its base
    URL was vetted by the caller."""
    assert account.tenant is not None and account.secret_name is not None
    tenant = account.tenant
    await accounts.check_new(account, prices)
    async with db.tenant_tx(tenant) as conn:
        await conn.execute(Q.lock_own_accounts, tenant.value)
        if int(await conn.fetchval(Q.count_own_accounts, tenant.value)) >= MAX_OWN_ACCOUNTS:
            raise Conflict(f"You have {MAX_OWN_ACCOUNTS} enabled model accounts, the most "
                           "one tenant may have: disable one first.")
        await vault.put_in(conn, tenant, account.secret_name, api_key)
        created = await accounts.insert(conn, account, sealed=None, master=None,
                                        registered_by=TENANT)
        if created is None:  # a generated id taken: astronomically unlikely, never half-done
            raise Conflict("account_id: taken; send the request again.")
    # Runs of this tenant parked because nothing served these models may be served now.
    await accounts.wake_parked_for(db, created)
    return created


async def get(db: Database, tenant: TenantId, account_id: str) -> ModelAccount:
    """One of the tenant's own accounts, disabled ones too (NotFound for any other id)."""
    account_id = _own_id(account_id)
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.own_account, account_id, tenant.value)
    if row is None:
        raise NotFound(NOT_FOUND)
    return ModelAccount.from_row(row)


async def rotate_key(db: Database, vault: Vault, tenant: TenantId, account_id: str,
                     api_key: str) -> ModelAccount:
    """Replace the key of one of the tenant's own enabled accounts. Workers read it again
    within ``credential_ttl_seconds`` (5 minutes), at once if the provider refuses the old
    one (models/gateway.py)."""
    account_id = _own_id(account_id)
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.own_account_for_key, account_id, tenant.value)
        if row is None:
            raise NotFound(NOT_FOUND)
        account = ModelAccount.from_row(row)
        # An account the operator registered for the tenant names the tenant's secret: its
        # key is rotated there, as the tenant could with PUT /v1/secrets/{name}.
        name = account.secret_name or secret_name_for(account_id)
        await vault.put_in(conn, tenant, name, api_key)
    return account


async def disable(db: Database, tenant: TenantId, account_id: str) -> ModelAccount:
    """Stop routing the tenant's calls to one of its own accounts (its runs move to another
    on their next step). The key it was registered with (:func:`register`) is deleted with
    it: nothing uses it any more. A secret the operator's registration named stays."""
    account_id = _own_id(account_id)
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.disable_own_account, account_id, tenant.value)
        if row is None:
            raise NotFound(NOT_FOUND)
        account = ModelAccount.from_row(row)
        if account.registered_by == TENANT and account.secret_name is not None:
            with contextlib.suppress(NotFound):  # already gone (the tenant removed it)
                await vault_store.delete_secret(conn, tenant, account.secret_name)
    return account


async def reading_secret(conn: Connection, tenant: TenantId, name: str) -> list[str]:
    """The tenant's enabled accounts whose key is the vault secret ``name``."""
    return [r["account_id"] for r in
            await conn.fetch(Q.own_accounts_reading_secret, tenant.value, name)]


def _own_id(account_id: str) -> str:
    try:
        return accounts.parse_account_id(account_id)
    except ValueError:  # no id at all (a NUL, a slash): missing, as for any other
        raise NotFound(NOT_FOUND) from None
