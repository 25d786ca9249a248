"""Operator API for model provider accounts: the platform's own, and tenants' own keys."""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from tenantry.api.admin import TENANT_NOT_FOUND, VAULT_ERROR
from tenantry.api.auth import PlatformDep, operator
from tenantry.api.fields import INT4_MAX, SPACE_OR_CONTROL, Body, HttpUrl, Label, SecretName, Text
from tenantry.api.links import links, to
from tenantry.api.pagination import PageRequest, keyed_by
from tenantry.api.params import parse_or_404
from tenantry.api.platform import Platform
from tenantry.errors import Conflict, NotFound, ValidationFailed
from tenantry.ids import TenantId
from tenantry.ledger.prices import PriceBook
from tenantry.ledger.pricing import SANDBOX
from tenantry.models import accounts
from tenantry.models.accounts import ModelAccount, NewAccount
from tenantry.tenants import service

router = APIRouter(prefix="/admin/v1", tags=["operator"], dependencies=[Depends(operator)])
NOT_FOUND = "No model account with this id."
AccountPage = Annotated[PageRequest, Depends(keyed_by(accounts.ACCOUNT_ID_RE))]

# No whitespace or control characters (a NUL cannot be stored); `*` only as a wildcard
# (another name with a `*` is one no price can name). Not `sandbox`: the sandbox's price.
ModelName = Annotated[str, Field(min_length=1, max_length=200,
                                 pattern=rf"^[^{SPACE_OR_CONTROL}]+$",
                                 json_schema_extra={"not": {"const": SANDBOX}})]


class AccountFields(Body):
    account_id: Label | None = Field(
        default=None, description="A slug naming the account; generated when omitted.")
    provider: Literal["openai", "anthropic", "scripted"] = Field(
        description="Wire format: `openai` (chat completions: OpenAI, Azure-style, vLLM, "
                    "Ollama, ...), `anthropic` (messages), `scripted` (the test model).")
    base_url: HttpUrl = Field(description="OpenAI style ends in /v1; Anthropic style is the "
                                      "origin (https://api.anthropic.com).")
    models: list[ModelName] = Field(
        min_length=1, max_length=100,
        description="Models this account serves (`*` any, `family/*` a family). Each named "
                    "model needs a price in force (built-in, or the operator's: PUT "
                    "/admin/v1/prices/{model}), so calls are billed exactly; through a "
                    "wildcard, a call to a model with no price fails its run before it "
                    "is sent.")
    region: Label = Field(description="Where the provider processes data, e.g. `us`, "
                                      "`eu-west-1`. Tenants outside `default` only use "
                                      "accounts in their region.")
    rpm: int | None = Field(default=None, ge=1, le=10_000_000)
    # The column is an `integer`: ~2.1 billion tokens a minute is the most it holds.
    tpm: int | None = Field(default=None, ge=1, le=INT4_MAX)
    priority: int = Field(default=0, ge=-1000, le=1000,
                          description="Lower is preferred; runs spread over equal ones.")


class CreatePlatformAccount(AccountFields):
    secret: Text | None = Field(
        default=None, min_length=1, max_length=16384,
        description="The provider API key. Write-only: sealed with the master key, never "
                    "returned.")


class CreateTenantAccount(AccountFields):
    secret_name: SecretName = Field(
        description="Name of the tenant's vault secret (PUT .../secrets/{name}) holding "
                    "the tenant's own provider key.")


class ModelAccountOut(BaseModel):
    account_id: str
    provider: str
    base_url: str
    models: list[str]
    region: str
    rpm: int | None
    tpm: int | None
    priority: int
    tenant_id: str | None
    secret: str | None = Field(description="The vault secret a tenant's account reads.")
    has_secret: bool
    created_at: datetime | None
    enabled: bool = Field(description="False once disabled (DELETE): no longer routed to.")
    registered_by: Literal["operator", "tenant"] = Field(
        description="`tenant`: the tenant registered it itself (POST /v1/model-accounts), "
                    "held to the operator's rules for where it may be.")


class ModelAccountList(BaseModel):
    data: list[ModelAccountOut]
    next_cursor: str | None


def account_out(account: ModelAccount) -> ModelAccountOut:
    return ModelAccountOut.model_validate(account.to_json())


def _new(
    body: AccountFields, *, secret: str | None = None, tenant: TenantId | None = None,
    secret_name: str | None = None,
) -> NewAccount:
    account_id = body.account_id or f"{body.provider}-{secrets.token_hex(4)}"
    return NewAccount(
        account_id=account_id, provider=body.provider, base_url=body.base_url.rstrip("/"),
        models=tuple(dict.fromkeys(body.models)), region=body.region, rpm=body.rpm,
        tpm=body.tpm, priority=body.priority, tenant=tenant, secret=secret,
        secret_name=secret_name,
    )


_THE_ACCOUNT = {"account_id": "$response.body#/account_id"}


@router.post("/model-accounts", status_code=201, response_model=ModelAccountOut,
             responses={201: links(
                 GetAccount=to("GET", "/admin/v1/model-accounts/{account_id}", "The account "
                               "just registered.", parameters=_THE_ACCOUNT),
                 DisableAccount=to("DELETE", "/admin/v1/model-accounts/{account_id}",
                                   "Stop routing to it.", parameters=_THE_ACCOUNT))})
async def register_account(body: CreatePlatformAccount, p: PlatformDep) -> ModelAccountOut:
    """Register a provider account every tenant's runs may use (within their region)."""
    account = await accounts.register(p.db, _new(body, secret=body.secret),
                                      prices=PriceBook(p.db), master=p.master)
    return account_out(account)


@router.get("/model-accounts", response_model=ModelAccountList)
async def list_accounts(page: AccountPage, p: PlatformDep) -> ModelAccountList:
    """Every account, the platform's and tenants' own, disabled ones included; by id."""
    return await page_of(p, page, None)


def enabled_out(account: ModelAccount) -> ModelAccountOut:
    """An account its URL still names: a disabled one (DELETE) answers 404 there, as a
    deleted resource does; it stays in the lists, `enabled: false`."""
    if not account.enabled:
        raise NotFound(NOT_FOUND)
    return account_out(account)


@router.get("/model-accounts/{account_id}", response_model=ModelAccountOut)
async def get_account(account_id: str, p: PlatformDep) -> ModelAccountOut:
    """Any enabled account by id, the platform's or a tenant's own."""
    return enabled_out(await accounts.get_account(p.db, account_id))


async def page_of(p: Platform, page: PageRequest,
                  tenant: TenantId | None) -> ModelAccountList:
    """A page of every account (``tenant`` None) or one tenant's own."""
    found = await accounts.accounts_page(
        p.db, tenant=tenant, after=page.position(accounts.parse_account_id), limit=page.limit)
    return page.answer(ModelAccountList, found, account_out, key=lambda a: a.account_id)


@router.delete("/model-accounts/{account_id}", response_model=ModelAccountOut)
async def disable_account(account_id: str, p: PlatformDep) -> ModelAccountOut:
    """Stop routing to an account (runs on it move to another on their next step)."""
    return account_out(await accounts.disable(p.db, account_id))


@router.post("/tenants/{tenant_id}/model-accounts", status_code=201,
             response_model=ModelAccountOut, responses={201: links(
                 GetTenantAccount=to(
                     "GET", "/admin/v1/tenants/{tenant_id}/model-accounts/{account_id}",
                     "The account just registered.", parameters={
                         "tenant_id": "$request.path.tenant_id", **_THE_ACCOUNT}),
                 DisableAccount=to("DELETE", "/admin/v1/model-accounts/{account_id}",
                                   "Stop routing to it.", parameters=_THE_ACCOUNT)),
                 **VAULT_ERROR})
async def register_tenant_account(
    tenant_id: str, body: CreateTenantAccount, p: PlatformDep,
) -> ModelAccountOut:
    """A tenant's own provider key (bring your own key): serves only this tenant's runs,
    which then use only their own accounts for the models these serve."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    await service.get_tenant(p.db, tenant)
    if p.vault is None:
        raise ValidationFailed("secret_name: the vault is not configured (TENANTRY_MASTER_KEY)")
    try:
        await p.vault.get(tenant, body.secret_name)
    except NotFound:
        raise Conflict(f"secret_name: no secret named {body.secret_name!r} for this tenant",
                       field="secret_name") from None
    account = await accounts.register(
        p.db, _new(body, tenant=tenant, secret_name=body.secret_name),
        prices=PriceBook(p.db), master=p.master)
    return account_out(account)


@router.get("/tenants/{tenant_id}/model-accounts", response_model=ModelAccountList)
async def list_tenant_accounts(
    tenant_id: str, page: AccountPage, p: PlatformDep,
) -> ModelAccountList:
    """The tenant's own accounts (bring your own key), by id."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    page.position(accounts.parse_account_id)  # a bad cursor is a 400 before anything else
    await service.get_tenant(p.db, tenant)
    return await page_of(p, page, tenant)


@router.get("/tenants/{tenant_id}/model-accounts/{account_id}", response_model=ModelAccountOut)
async def get_tenant_account(tenant_id: str, account_id: str, p: PlatformDep) -> ModelAccountOut:
    """One of the tenant's own enabled accounts; another tenant's, or a platform one, is a
    404."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    return enabled_out(await accounts.get_account(p.db, account_id, tenant))
