"""An account's provider client and the key it calls with: the wire format picks the client
(OpenAI-compatible, Anthropic, the scripted model speaking OpenAI's); the key is the one
configured, one sealed under the platform's master key (bound to the account's provider and
base URL), or the tenant's own secret in the vault (bring your own key)."""

from __future__ import annotations

import logging

from tenantry import http1
from tenantry.errors import TenantryError
from tenantry.ids import TenantId
from tenantry.models.accounts import ModelAccount
from tenantry.models.errors import AccountUnusable
from tenantry.models.types import TENANT, ProviderClient
from tenantry.vault import Vault, crypto
from tenantry.vault.crypto import MasterKey

logger = logging.getLogger("tenantry.models.gateway")


def http_client(account: ModelAccount, api_key: str | None, timeout: float, *,
                guard: http1.ConnectTo | None = None) -> ProviderClient:
    """The provider client for an account's wire format. ``guard``: the operator's rules
    for where tenants' own registrations may be (tools/destinations.py, wired in by the
    worker); an account the tenant registered itself connects only through it, to an
    address vetted at that connection, as its tool servers do."""
    connect_to = guard if account.registered_by == TENANT else None
    if account.provider == "anthropic":
        from tenantry.models.anthropic import AnthropicMessages

        return AnthropicMessages(account.base_url, api_key=api_key,
                                 account=account.account_id, timeout=timeout,
                                 stream=account.stream, connect_to=connect_to)
    from tenantry.models.openai_compat import OpenAICompatible

    client = OpenAICompatible(account.base_url, api_key=api_key, account=account.account_id,
                              timeout=timeout, stream=account.stream, connect_to=connect_to)
    client.provider = account.provider  # "scripted" speaks the OpenAI format
    return client


async def api_key(account: ModelAccount, implicit: tuple[ModelAccount, str | None] | None, *,
                  master: MasterKey | None, vault: Vault | None) -> str | None:
    """The key to call ``account`` with: its configured one (``implicit``: an account from
    configuration, not the registry), its key sealed under the platform's master key, or
    its tenant's secret in the vault (bring your own key); None when it has none.
    AccountUnusable when the key cannot be had."""
    if implicit is not None:
        return implicit[1]
    if account.sealed_secret is not None:
        if master is None:
            raise AccountUnusable(f"{account.account_id}: its key is sealed but no "
                                  "master key is configured")
        try:
            return crypto.open_platform_secret(master, account.scope,
                                               *account.sealed_secret)
        except crypto.VaultError:
            # The key is bound to the provider and base_url it was sealed for: a row
            # pointed elsewhere (or another master key) must not send it anywhere.
            unusable = AccountUnusable(
                f"{account.account_id}: its sealed key does not open for "
                f"{account.provider} at {account.base_url} (the account was changed "
                "since its key was sealed, or the master key differs); register the "
                "account again")
            logger.error("model account refused to serve: %s", unusable.detail,
                         extra={"account": account.account_id})
            raise unusable from None
    if account.secret_name is not None:
        if vault is None or account.tenant is None:
            raise AccountUnusable(f"{account.account_id}: no vault to read its key from")
        try:
            return await vault.get(TenantId(account.tenant), account.secret_name)
        except TenantryError as exc:  # the secret was deleted, or the vault is locked
            raise AccountUnusable(
                f"{account.account_id}: cannot read secret {account.secret_name!r}: "
                f"{exc.detail}") from None
    return None
