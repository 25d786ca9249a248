"""Operator API (``/admin/v1``): tenants and their API keys."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, Field

from tenantry.api.auth import operator, platform
from tenantry.api.fields import (
    LABEL_RE,
    SECRET_NAME_RE,
    Body,
    HttpUrl,
    Label,
    SecretName,
    Slug,
    Text,
)
from tenantry.api.params import name_or_404, parse_or_404
from tenantry.api.platform import Platform
from tenantry.errors import NotFound, ValidationFailed
from tenantry.ids import ApiKeyId, TenantId
from tenantry.tenants import service
from tenantry.tools import servers

router = APIRouter(prefix="/admin/v1", tags=["operator"], dependencies=[Depends(operator)])

TENANT_NOT_FOUND = "No tenant with this id."
_SECRET_NAME = re.compile(SECRET_NAME_RE)
_LABEL = re.compile(LABEL_RE)
__all__ = ["TENANT_NOT_FOUND", "VAULT_ERROR", "Label", "SecretName", "Slug", "router"]
#: Routes that read or write the vault can meet a data key wrapped by another master key.
VAULT_ERROR: dict[int | str, dict[str, Any]] = {500: {
    "description": "`vault_error`: the tenant's data key is wrapped by another master key, "
                   "or a ciphertext did not authenticate"}}
_UNREACHABLE: dict[int | str, dict[str, Any]] = {502: {
    "description": "`tool_unavailable`: the server did not answer tools/list"}}


class PutSecret(Body):
    value: Text = Field(min_length=1, max_length=16384)


class SecretOut(BaseModel):
    name: str
    created_at: datetime | None = None
    updated_at: datetime | None = None


class CreateTenant(Body):
    name: Text = Field(min_length=1, max_length=200)
    tenant_id: Slug | None = Field(
        default=None, description="Bring your own id (a slug); generated when omitted."
    )
    region: Label = "default"
    plan: Label = "standard"


class TenantOut(BaseModel):
    tenant_id: str
    name: str
    region: str
    plan: str
    home_cell: str
    created_at: datetime


class CreatedTenantOut(TenantOut):
    webhook_secret: str = Field(
        description="Signs this tenant's run webhooks (HMAC-SHA256). Shown once; rotate "
                    "with POST /admin/v1/tenants/{id}/webhook-secret.")


class WebhookSecretOut(BaseModel):
    webhook_secret: str


class CreateKey(Body):
    name: Text = Field(default="", max_length=200)


class KeyOut(BaseModel):
    key_id: str
    api_key: str = Field(description="Shown once; only its SHA-256 is stored.")
    prefix: str
    created_at: datetime


class RegisterToolServer(Body):
    name: Label
    url: HttpUrl = Field(description="The MCP server's streamable-HTTP endpoint.")
    honours_idempotency_keys: bool = Field(
        description="Whether the server performs a call once per Idempotency-Key. Calls to "
                    "servers that do not are never retried after an ambiguous crash.")
    secret: SecretName | None = Field(
        default=None,
        description="Name of a vault secret (PUT .../secrets/{name}) sent as "
                    "`Authorization: Bearer <value>` on each call to this server only.")


class ToolServerOut(BaseModel):
    server_id: str
    name: str
    url: str
    honours_idempotency_keys: bool
    secret: str | None
    tools: list[str]
    tools_sha256: str
    created_at: datetime


class RevokedOut(BaseModel):
    key_id: str
    revoked_at: datetime


def _tenant_out(t: service.Tenant) -> TenantOut:
    return TenantOut(
        tenant_id=t.tenant_id.value, name=t.name, region=t.region, plan=t.plan,
        home_cell=t.home_cell, created_at=t.created_at,
    )


@router.post("/tenants", status_code=201, response_model=CreatedTenantOut)
async def create_tenant(body: CreateTenant, p: Platform = Depends(platform)) -> CreatedTenantOut:
    tenant_id = TenantId.parse(body.tenant_id) if body.tenant_id else None
    created = await service.create_tenant(
        p.db, body.name, region=body.region, plan=body.plan, tenant_id=tenant_id
    )
    return CreatedTenantOut(**_tenant_out(created.tenant).model_dump(),
                            webhook_secret=created.webhook_secret)


@router.post("/tenants/{tenant_id}/webhook-secret", response_model=WebhookSecretOut)
async def rotate_webhook_secret(
    tenant_id: str, p: Platform = Depends(platform)
) -> WebhookSecretOut:
    """Replace the tenant's webhook signing secret; the new one is shown once."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    return WebhookSecretOut(webhook_secret=await service.rotate_webhook_secret(p.db, tenant))


@router.get("/tenants/{tenant_id}", response_model=TenantOut)
async def get_tenant(tenant_id: str, p: Platform = Depends(platform)) -> TenantOut:
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    return _tenant_out(await service.get_tenant(p.db, tenant))


@router.post("/tenants/{tenant_id}/api-keys", status_code=201, response_model=KeyOut)
async def create_api_key(
    tenant_id: str, body: CreateKey | None = None, p: Platform = Depends(platform)
) -> KeyOut:
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    issued = await service.issue_api_key(p.db, tenant, body.name if body else "")
    return KeyOut(
        key_id=str(issued.key_id), api_key=issued.api_key, prefix=issued.prefix,
        created_at=issued.created_at,
    )


@router.delete("/tenants/{tenant_id}/api-keys/{key_id}", response_model=RevokedOut)
async def revoke_api_key(
    tenant_id: str, key_id: str, p: Platform = Depends(platform)
) -> RevokedOut:
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    key = parse_or_404(ApiKeyId, key_id, "No API key with this id.")
    revoked_at = await service.revoke_api_key(p.db, tenant, key, p.auth_cache)
    return RevokedOut(key_id=str(key), revoked_at=revoked_at)


def _server_out(s: servers.ToolServer) -> ToolServerOut:
    return ToolServerOut(
        server_id=str(s.server_id), name=s.name, url=s.url,
        honours_idempotency_keys=s.honours_idempotency_keys, secret=s.secret_ref,
        tools=sorted(s.tool_names()), tools_sha256=s.tools_sha256.hex(), created_at=s.created_at,
    )


@router.post("/tenants/{tenant_id}/tool-servers", status_code=201, response_model=ToolServerOut,
             responses={**_UNREACHABLE, **VAULT_ERROR})
async def register_tool_server(
    tenant_id: str, body: RegisterToolServer, p: Platform = Depends(platform)
) -> ToolServerOut:
    """Register an MCP server for a tenant. Its tool list is read now and pinned."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    await service.get_tenant(p.db, tenant)  # 404 before calling anything
    headers = await _credential(p, tenant, body.secret)
    server = await servers.register(p.db, p.mcp, tenant, name=body.name, url=body.url,
                                    honours_idempotency_keys=body.honours_idempotency_keys,
                                    secret_ref=body.secret, headers=headers)
    return _server_out(server)


@router.post("/tenants/{tenant_id}/tool-servers/{name}/pin", response_model=ToolServerOut,
             responses={**_UNREACHABLE, **VAULT_ERROR})
async def repin_tool_server(
    tenant_id: str, name: str, p: Platform = Depends(platform)
) -> ToolServerOut:
    """Accept the server's current tool list as reviewed (after it changed)."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    name = name_or_404(_LABEL, name, "No tool server with this name.")
    server = await servers.get_server(p.db, tenant, name)
    headers = await _credential(p, tenant, server.secret_ref)
    return _server_out(await servers.repin(p.db, p.mcp, tenant, name, headers))


async def _credential(p: Platform, tenant: TenantId, secret: str | None) -> dict[str, str]:
    if secret is None:
        return {}
    if p.vault is None:
        raise ValidationFailed("secret: the vault is not configured (TENANTRY_MASTER_KEY)")
    try:
        value = await p.vault.get(tenant, secret)
    except NotFound:
        raise ValidationFailed(f"secret: no secret named {secret!r} for this tenant") from None
    return {"Authorization": f"Bearer {value}"}


@router.put("/tenants/{tenant_id}/secrets/{name}", response_model=SecretOut,
            responses={201: {"description": "Created", "model": SecretOut}, **VAULT_ERROR})
async def put_secret(
    tenant_id: str, name: str, body: PutSecret, response: Response,
    p: Platform = Depends(platform),
) -> SecretOut:
    """Store a secret, encrypted with the tenant's data key. Write-only: no API returns it."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    if not _SECRET_NAME.fullmatch(name):
        raise ValidationFailed("name: 1-128 characters of A-Z, a-z, 0-9, '_', '.', '-'")
    await service.get_tenant(p.db, tenant)
    if p.vault is None:
        raise ValidationFailed("the vault is not configured (TENANTRY_MASTER_KEY)")
    stored = await p.vault.put(tenant, name, body.value)
    response.status_code = 201 if stored.created else 200
    return SecretOut(name=name, created_at=stored.created_at, updated_at=stored.updated_at)


@router.get("/tenants/{tenant_id}/secrets", response_model=list[SecretOut])
async def list_secrets(tenant_id: str, p: Platform = Depends(platform)) -> list[SecretOut]:
    """Names and dates only."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    await service.get_tenant(p.db, tenant)
    if p.vault is None:
        return []
    return [SecretOut(name=s.name, created_at=s.created_at, updated_at=s.updated_at)
            for s in await p.vault.names(tenant)]


@router.get("/tenants/{tenant_id}/tool-servers", response_model=list[ToolServerOut])
async def list_tool_servers(tenant_id: str, p: Platform = Depends(platform)) -> list[ToolServerOut]:
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    await service.get_tenant(p.db, tenant)
    return [_server_out(s) for s in await servers.list_servers(p.db, tenant)]
