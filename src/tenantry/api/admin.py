"""Operator API (``/admin/v1``): tenants, their API keys and secrets (their tool servers:
``tool_servers.py``). Each is listed (a keyset page, see :mod:`tenantry.api.pagination`) and
fetched as well as created.
Also the operator's console sessions: revoked all at once (the console's session epoch)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import BaseModel, Field

from tenantry.api.auth import PlatformDep, operator
from tenantry.api.console import epoch
from tenantry.api.fields import (
    SECRET_NAME_RE,
    SLUG_RE,
    Body,
    Label,
    SecretName,
    Slug,
    Text,
)
from tenantry.api.key_bodies import (
    ApiKeyList,
    ApiKeyOut,
    CreateKey,
    KeyOut,
    issued_out,
    key_out,
)
from tenantry.api.links import links, to
from tenantry.api.operator_actions import names_tenant
from tenantry.api.pagination import PageRequest, keyed_by, matching
from tenantry.api.params import parse_or_404
from tenantry.api.platform import Platform
from tenantry.config import ANY_REGION, Settings
from tenantry.errors import NotFound, RegionNotServed, ValidationFailed
from tenantry.ids import ApiKeyId, TenantId
from tenantry.tenants import service
from tenantry.vault import store as vault_store

router = APIRouter(prefix="/admin/v1", tags=["operator"], dependencies=[Depends(operator)])

TENANT_NOT_FOUND = service.TENANT_NOT_FOUND
_SECRET_NAME = re.compile(SECRET_NAME_RE)
SECRET_CURSOR = matching(SECRET_NAME_RE)
__all__ = ["TENANT_NOT_FOUND", "VAULT_ERROR", "Label", "SecretName", "Slug", "router"]
#: Routes that read or write the vault can meet a data key wrapped by another master key.
VAULT_ERROR: dict[int | str, dict[str, Any]] = {500: {
    "description": "`vault_error`: the tenant's data key is wrapped by another master key, "
                   "or a ciphertext did not authenticate"}}


class PutSecret(Body):
    value: Text = Field(min_length=1, max_length=16384)


class SecretOut(BaseModel):
    """A secret's name and dates: its value is never returned."""

    name: str
    created_at: datetime
    updated_at: datetime


class SecretList(BaseModel):
    data: list[SecretOut]
    next_cursor: str | None


class CreateTenant(Body):
    name: Text = Field(min_length=1, max_length=200)
    tenant_id: Slug | None = Field(
        default=None, description="Bring your own id (a slug); generated when omitted."
    )
    region: Label | None = Field(
        default=None,
        description="Where the tenant's data and model calls must stay. Omitted: this "
                    "cell's region (TENANTRY_REGION). A cell outside `default` creates only "
                    "tenants of its own region (422 `region_not_served`).")
    plan: Label = "standard"


class TenantOut(BaseModel):
    tenant_id: str
    name: str
    region: str
    plan: str
    home_cell: str = Field(description="The cell that holds the tenant's rows (TENANTRY_CELL "
                                       "of the cell that created it).")
    created_at: datetime


class TenantList(BaseModel):
    data: list[TenantOut]
    next_cursor: str | None


class CreatedTenantOut(TenantOut):
    webhook_secret: str = Field(
        description="Signs this tenant's run webhooks (HMAC-SHA256). Shown once; rotate "
                    "with POST /admin/v1/tenants/{id}/webhook-secret.")


class WebhookSecretOut(BaseModel):
    webhook_secret: str


class PutAdmissions(Body):
    paused: bool = Field(description="true: refuse the tenant's new runs and tasks (409 "
                                     "`admissions_paused`); false: admit them again.")


class AdmissionsOut(BaseModel):
    tenant_id: str
    paused: bool
    paused_at: datetime | None = Field(description="When the pause began; null when admitting.")


class RevokedOut(BaseModel):
    key_id: str
    revoked_at: datetime


def _tenant_out(t: service.Tenant) -> TenantOut:
    return TenantOut(
        tenant_id=t.tenant_id.value, name=t.name, region=t.region, plan=t.plan,
        home_cell=t.home_cell, created_at=t.created_at,
    )


_REGION_NOT_SERVED: dict[int | str, dict[str, Any]] = {422: {
    "description": "`region_not_served`: this cell serves another region (`region` names "
                   "the one asked for)"}}


def served_region(settings: Settings, asked: str | None) -> str:
    """The tenant's region on this cell: the one asked for, or the cell's own; refused
    when the cell serves one region and it is another (its rows would live outside it)."""
    region = asked or settings.region
    if settings.region != ANY_REGION and region != settings.region:
        raise RegionNotServed(
            f"cell {settings.cell!r} serves region {settings.region!r}, not {region!r}: "
            "create the tenant through the router, or on a cell of that region",
            region=region, cell=settings.cell)
    return region


_THE_TENANT = {"tenant_id": "$response.body#/tenant_id"}
_IN_THE_TENANT = {"tenant_id": "$request.path.tenant_id"}


@router.post("/tenants", status_code=201, response_model=CreatedTenantOut,
             responses={201: links(
                 GetTenant=to("GET", "/admin/v1/tenants/{tenant_id}", "The tenant just "
                              "created.", parameters=_THE_TENANT),
                 IssueKey=to("POST", "/admin/v1/tenants/{tenant_id}/api-keys", "An API key "
                             "for it.", parameters=_THE_TENANT),
                 GetPolicy=to("GET", "/admin/v1/tenants/{tenant_id}/policy", "Its policy.",
                              parameters=_THE_TENANT),
                 GetRetention=to("GET", "/admin/v1/tenants/{tenant_id}/retention",
                                 "Its retention.", parameters=_THE_TENANT),
                 RegisterToolServer=to("POST", "/admin/v1/tenants/{tenant_id}/tool-servers",
                                       "An MCP server for its runs.",
                                       parameters=_THE_TENANT),
                 EraseTenant=to("POST", "/admin/v1/tenants/{tenant_id}/erase", "Erase it.",
                                parameters=_THE_TENANT)),
                 **_REGION_NOT_SERVED})
async def create_tenant(body: CreateTenant, request: Request, p: PlatformDep) -> CreatedTenantOut:
    """Create a tenant.

    A new tenant with its id (yours, or generated), region and plan. The answer holds its
    webhook signing secret, shown only here; give the tenant an API key next (`POST
    /admin/v1/tenants/{tenant_id}/api-keys`)."""
    tenant_id = TenantId.parse(body.tenant_id) if body.tenant_id else None
    # The action log names the tenant made (its path names none), or the one asked for
    # when refused (an id already taken, a region not served here).
    if tenant_id is not None:
        names_tenant(request, tenant_id)
    region = served_region(p.settings, body.region)
    created = await service.create_tenant(
        p.db, body.name, region=region, plan=body.plan, tenant_id=tenant_id,
        home_cell=p.settings.cell,
    )
    names_tenant(request, created.tenant.tenant_id)
    return CreatedTenantOut(**_tenant_out(created.tenant).model_dump(),
                            webhook_secret=created.webhook_secret)


_TenantPage = Annotated[PageRequest, Depends(keyed_by(SLUG_RE))]


@router.get("/tenants", response_model=TenantList)
async def list_tenants(page: _TenantPage, p: PlatformDep) -> TenantList:
    """Every tenant, ordered by id."""
    found = await service.list_tenants(p.cross_tenant_db,
                                       after=page.position(TenantId.parse), limit=page.limit)
    return page.answer(TenantList, found, _tenant_out, key=lambda t: t.tenant_id.value)


@router.post("/tenants/{tenant_id}/webhook-secret", response_model=WebhookSecretOut)
async def rotate_webhook_secret(tenant_id: str, p: PlatformDep) -> WebhookSecretOut:
    """Replace the tenant's webhook signing secret; the new one is shown once. The old one
    stops at once, and so does one a tenant's own rotation left signing (ADR 0045)."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    return WebhookSecretOut(webhook_secret=await service.rotate_webhook_secret(p.db, tenant))


@router.get("/tenants/{tenant_id}", response_model=TenantOut)
async def get_tenant(tenant_id: str, p: PlatformDep) -> TenantOut:
    """Get a tenant.

    Its name, region, plan, home cell and when it was created (never its webhook secret)."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    return _tenant_out(await service.get_tenant(p.db, tenant))


_THE_KEY = {**_IN_THE_TENANT, "key_id": "$response.body#/key_id"}


@router.post("/tenants/{tenant_id}/api-keys", status_code=201, response_model=KeyOut,
             responses={201: links(
                 GetKey=to("GET", "/admin/v1/tenants/{tenant_id}/api-keys/{key_id}",
                           "The key just issued (never its secret again).",
                           parameters=_THE_KEY),
                 RevokeKey=to("DELETE", "/admin/v1/tenants/{tenant_id}/api-keys/{key_id}",
                              "Revoke it.", parameters=_THE_KEY))})
async def create_api_key(tenant_id: str, p: PlatformDep, body: CreateKey | None = None) -> KeyOut:
    """Issue an API key for a tenant.

    The key (`tnt_…`) is in the answer only: store it now. It holds every scope unless
    `scopes` narrows it, and has no expiry unless `expires_at` sets one."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    new = (body or CreateKey()).new_key(created_by="operator")
    return issued_out(await service.issue_api_key(p.db, tenant, new))


_KeyPage = Annotated[PageRequest, Depends(keyed_by(ApiKeyId.pattern()))]


@router.get("/tenants/{tenant_id}/api-keys", response_model=ApiKeyList)
async def list_api_keys(tenant_id: str, page: _KeyPage, p: PlatformDep) -> ApiKeyList:
    """The tenant's keys, revoked ones included, newest first."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    found = await service.api_keys_page(p.db, tenant, before=page.position(ApiKeyId.parse),
                                        limit=page.limit)
    return page.answer(ApiKeyList, found, key_out, key=lambda k: str(k.key_id))


@router.get("/tenants/{tenant_id}/api-keys/{key_id}", response_model=ApiKeyOut)
async def get_api_key(tenant_id: str, key_id: str, p: PlatformDep) -> ApiKeyOut:
    """A key that works: a revoked one (DELETE) answers 404 here, as a deleted resource
    does; the tenant's list still shows it, with `revoked_at`."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    key = parse_or_404(ApiKeyId, key_id, service.KEY_NOT_FOUND)
    found = await service.get_api_key(p.db, tenant, key)
    if found.revoked_at is not None:
        raise NotFound(service.KEY_NOT_FOUND)
    return key_out(found)


@router.delete("/tenants/{tenant_id}/api-keys/{key_id}", response_model=RevokedOut)
async def revoke_api_key(tenant_id: str, key_id: str, p: PlatformDep) -> RevokedOut:
    """Revoke a tenant's API key.

    The key stops authenticating at once."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    key = parse_or_404(ApiKeyId, key_id, service.KEY_NOT_FOUND)
    revoked_at = await service.revoke_api_key(p.db, tenant, key, p.auth_cache)
    return RevokedOut(key_id=str(key), revoked_at=revoked_at)


@router.put("/tenants/{tenant_id}/admissions", response_model=AdmissionsOut)
async def put_admissions(tenant_id: str, body: PutAdmissions, p: PlatformDep) -> AdmissionsOut:
    """Pause or resume the tenant's admissions. Runs already admitted go on (their tool
    calls' tasks too); pausing twice keeps the first pause's time. Recorded in the
    console's action log as the operator API's, as every operator change is
    (api/operator_actions.py)."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    paused_at = await service.set_admissions_paused(p.db, tenant, body.paused)
    return AdmissionsOut(tenant_id=tenant.value, paused=paused_at is not None,
                         paused_at=paused_at)


_STORED = links(GetSecret=to(
    "GET", "/admin/v1/tenants/{tenant_id}/secrets/{name}", "The secret's name and dates.",
    parameters={**_IN_THE_TENANT, "name": "$request.path.name"}))


#: The name a secret is stored under: its rule is the document's (a name that is none is a
#: 400 here, where reading one is a 404 like any lookup).
NewSecretName = Annotated[str, Path(pattern=SECRET_NAME_RE, max_length=128)]


def put_secret_responses(stored: dict[str, Any]) -> dict[int | str, dict[str, Any]]:
    """What a PUT of a secret answers (the operator's route and the tenant's own):
    ``stored`` links to where its name and dates are read."""
    return {200: stored, 201: {"description": "Created", "model": SecretOut, **stored},
            **VAULT_ERROR}


@router.put("/tenants/{tenant_id}/secrets/{name}", response_model=SecretOut,
            responses=put_secret_responses(_STORED))
async def put_secret(
    tenant_id: str, name: NewSecretName, body: PutSecret, response: Response, p: PlatformDep,
) -> SecretOut:
    """Store a secret, encrypted with the tenant's data key. Write-only: no API returns it."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    await service.get_tenant(p.db, tenant)
    return await store_secret(p, tenant, name, body.value, response)


async def store_secret(p: Platform, tenant: TenantId, name: str, value: str,
                       response: Response) -> SecretOut:
    """Store (or replace: 200) the tenant's secret, for the operator's route and the
    tenant's own."""
    if p.vault is None:
        raise ValidationFailed("the vault is not configured (TENANTRY_MASTER_KEY)")
    stored = await p.vault.put(tenant, name, value)
    response.status_code = 201 if stored.created else 200
    return SecretOut(name=name, created_at=stored.created_at, updated_at=stored.updated_at)


SecretPage = Annotated[PageRequest, Depends(keyed_by(SECRET_NAME_RE))]


@router.get("/tenants/{tenant_id}/secrets", response_model=SecretList)
async def list_secrets(tenant_id: str, page: SecretPage, p: PlatformDep) -> SecretList:
    """Names and dates only, ordered by name."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    after = page.position(SECRET_CURSOR)
    await service.get_tenant(p.db, tenant)
    found = await vault_store.secrets_page(p.db, tenant, after=after, limit=page.limit)
    return page.answer(SecretList, found, secret_out, key=lambda s: s.name)


@router.get("/tenants/{tenant_id}/secrets/{name}", response_model=SecretOut)
async def get_secret(tenant_id: str, name: str, p: PlatformDep) -> SecretOut:
    """A secret's name and dates (to check it is there); its value is never returned."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    if not _SECRET_NAME.fullmatch(name):
        raise NotFound(f"No secret named {name!r}.")
    return secret_out(await vault_store.secret_info(p.db, tenant, name))


def secret_out(s: vault_store.SecretInfo) -> SecretOut:
    return SecretOut(name=s.name, created_at=s.created_at, updated_at=s.updated_at)


class SessionsRevokedOut(BaseModel):
    epoch: int = Field(description="The new session epoch; console cookies of any earlier "
                                   "one are refused from now on.")


@router.post("/sessions/revoke", response_model=SessionsRevokedOut)
async def revoke_sessions(p: PlatformDep) -> SessionsRevokedOut:
    """Sign every operator console session out, in every browser and every API process,
    without rotating the operator token: each cookie issued so far is refused at its next
    request (pages redirect to the login page, streams answer 401). Logging in again with
    the operator token starts a session in the new epoch."""
    return SessionsRevokedOut(epoch=await epoch.revoke_all(p.db))
