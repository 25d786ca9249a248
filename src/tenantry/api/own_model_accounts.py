"""Tenant API: the tenant's own model provider accounts (bring your own key), with its own
key (``/v1/model-accounts``).

The same accounts an operator can register for a tenant (``api/model_accounts.py``): they
serve only this tenant's runs, which then use only them for the models they serve, with
the tenant's own rpm/tpm. The tenant sends the provider key itself (``api_key``,
write-only): it is stored in the tenant's vault with the account, in one transaction
(models/own_accounts.py), and no route returns it. The base URL is held to the operator's
rules for tenants' own destinations (tools/destinations.py, the tool servers' rules): at
registration here and at every connection the gateway makes. The region must be the
tenant's or inside it. Another tenant's account, or a platform one, answers as a missing
one does."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import Field

from tenantry.api.admin import VAULT_ERROR
from tenantry.api.auth import IntegrationsManager, PlatformDep, RunsReader
from tenantry.api.fields import INT4_MAX, Body, HttpUrl, Label, Text
from tenantry.api.links import links, to
from tenantry.api.model_accounts import (
    AccountPage,
    ModelAccountList,
    ModelAccountOut,
    ModelName,
    account_out,
    enabled_out,
    page_of,
)
from tenantry.api.platform import Platform
from tenantry.errors import ValidationFailed
from tenantry.ledger.prices import PriceBook
from tenantry.models import accounts, own_accounts
from tenantry.models.accounts import NewAccount
from tenantry.tenants import service
from tenantry.vault import Vault

router = APIRouter(prefix="/v1", tags=["model accounts"])

_URL_REFUSED: dict[int | str, dict[str, Any]] = {422: {
    "description": "`model_account_url_refused`: the operator's rules refuse `base_url` "
                   "(not https, a host not allowed, or a name that resolves to a loopback, "
                   "private, link-local or metadata address)"}}
_CONFLICT: dict[int | str, dict[str, Any]] = {409: {
    "description": "`conflict`: a model named has no price in force (`models` lists them), "
                   f"or you have {own_accounts.MAX_OWN_ACCOUNTS} enabled accounts already"}}
_THE_ACCOUNT = {"account_id": "$response.body#/account_id"}


class RegisterOwnAccount(Body):
    provider: Literal["openai", "anthropic"] = Field(
        description="Wire format: `openai` (chat completions: OpenAI, Azure-style, vLLM, "
                    "Ollama, ...), `anthropic` (messages).")
    base_url: HttpUrl = Field(
        description="OpenAI style ends in /v1; Anthropic style is the origin "
                    "(https://api.anthropic.com). Held to the operator's rules for where "
                    "your own servers may be: https, a host the operator allows, never a "
                    "loopback, private, link-local or metadata address.")
    models: list[ModelName] = Field(
        min_length=1, max_length=100,
        description="Models this account serves for your runs (`*` any, `family/*` a "
                    "family). Each named model needs a price in force; your runs on these "
                    "models then use only your own accounts.")
    region: Label = Field(description="Where the provider processes your data: your "
                                      "tenant's region or one inside it (`eu` allows "
                                      "`eu-west-1`).")
    rpm: int | None = Field(default=None, ge=1, le=10_000_000,
                            description="Your own requests-per-minute limit for it.")
    tpm: int | None = Field(default=None, ge=1, le=INT4_MAX,
                            description="Your own tokens-per-minute limit for it.")
    priority: int = Field(default=0, ge=-1000, le=1000,
                          description="Lower is preferred among your accounts; runs spread "
                                      "over equal ones.")
    # Text: storable (never a NUL); 16 KiB, as the operator's `secret`: room to spare.
    api_key: Text = Field(
        min_length=1, max_length=16384,
        description="The provider API key. Write-only: stored encrypted in your vault "
                    "(as the secret the account's `secret` names), never returned.")


class PutApiKey(Body):
    api_key: Text = Field(min_length=1, max_length=16384,
                            description="The new provider API key (write-only).")


def _vault(p: Platform) -> Vault:
    if p.vault is None:
        raise ValidationFailed("api_key: the vault is not configured (TENANTRY_MASTER_KEY)",
                               field="api_key")
    return p.vault


@router.post("/model-accounts", status_code=201, response_model=ModelAccountOut,
             responses={201: links(
                 GetOwnAccount=to("GET", "/v1/model-accounts/{account_id}",
                                  "The account just registered.", parameters=_THE_ACCOUNT),
                 RotateKey=to("PUT", "/v1/model-accounts/{account_id}/api-key",
                              "Replace its provider key.", parameters=_THE_ACCOUNT),
                 DisableOwnAccount=to("DELETE", "/v1/model-accounts/{account_id}",
                                      "Stop routing to it.", parameters=_THE_ACCOUNT)),
                 **_URL_REFUSED, **_CONFLICT, **VAULT_ERROR})
async def register_own_account(
    body: RegisterOwnAccount, tenant: IntegrationsManager, p: PlatformDep,
) -> ModelAccountOut:
    """Register one of your own provider accounts (bring your own key): it serves only your
    runs, with your own limits; budgets and prices apply as to any call, and usage shows
    the calls that went through it (`own_accounts`)."""
    vault = _vault(p)
    home = await service.get_tenant(p.db, tenant)
    if not accounts.region_allows(home.region, body.region):
        raise ValidationFailed(f"region: must be your tenant's region ({home.region}) or "
                               "inside it", field="region")
    await p.model_destinations.vet_url(body.base_url)  # before anything is sent
    account_id = own_accounts.new_account_id()
    account = NewAccount(
        account_id=account_id, provider=body.provider, base_url=body.base_url.rstrip("/"),
        models=tuple(dict.fromkeys(body.models)), region=body.region, rpm=body.rpm,
        tpm=body.tpm, priority=body.priority, tenant=tenant,
        secret_name=own_accounts.secret_name_for(account_id))
    created = await own_accounts.register(p.db, vault, account, body.api_key,
                                          prices=PriceBook(p.db))
    return account_out(created)


@router.get("/model-accounts", response_model=ModelAccountList)
async def list_own_accounts(
    page: AccountPage, tenant: RunsReader, p: PlatformDep,
) -> ModelAccountList:
    """Your own accounts (the operator's registrations for you too), disabled ones
    included; by id."""
    return await page_of(p, page, tenant)


@router.get("/model-accounts/{account_id}", response_model=ModelAccountOut)
async def get_own_account(account_id: str, tenant: RunsReader, p: PlatformDep) -> ModelAccountOut:
    """One of your own enabled accounts; any other id (another tenant's, a platform
    account's, a disabled one's) is a 404."""
    return enabled_out(await own_accounts.get(p.db, tenant, account_id))


@router.put("/model-accounts/{account_id}/api-key", response_model=ModelAccountOut,
            responses={**VAULT_ERROR})
async def rotate_own_account_key(
    account_id: str, body: PutApiKey, tenant: IntegrationsManager, p: PlatformDep,
) -> ModelAccountOut:
    """Replace the account's provider key (write-only). Workers use the new key within
    five minutes, at once if the provider refuses the old one."""
    vault = _vault(p)
    return account_out(await own_accounts.rotate_key(p.db, vault, tenant, account_id,
                                                     body.api_key))


@router.delete("/model-accounts/{account_id}", response_model=ModelAccountOut)
async def disable_own_account(
    account_id: str, tenant: IntegrationsManager, p: PlatformDep,
) -> ModelAccountOut:
    """Stop routing your calls to the account (runs on it move to another on their next
    step). The key it was registered with is deleted from your vault."""
    return account_out(await own_accounts.disable(p.db, tenant, account_id))
