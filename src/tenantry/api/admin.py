"""Operator API (``/admin/v1``): tenants and their API keys."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from tenantry.api.auth import operator, platform
from tenantry.api.params import parse_or_404
from tenantry.api.platform import Platform
from tenantry.ids import ApiKeyId, TenantId
from tenantry.tenants import service
from tenantry.tools import servers

router = APIRouter(prefix="/admin/v1", tags=["operator"], dependencies=[Depends(operator)])

TENANT_NOT_FOUND = "No tenant with this id."
Slug = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{2,63}$")]
Label = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{1,63}$")]


class CreateTenant(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
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


class CreateKey(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(default="", max_length=200)


class KeyOut(BaseModel):
    key_id: str
    api_key: str = Field(description="Shown once; only its SHA-256 is stored.")
    prefix: str
    created_at: datetime


class RegisterToolServer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Label
    url: str = Field(pattern=r"^https?://", max_length=2048,
                     description="The MCP server's streamable-HTTP endpoint.")
    honours_idempotency_keys: bool = Field(
        description="Whether the server performs a call once per Idempotency-Key. Calls to "
                    "servers that do not are never retried after an ambiguous crash.")


class ToolServerOut(BaseModel):
    server_id: str
    name: str
    url: str
    honours_idempotency_keys: bool
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
    revoked_at = await service.revoke_api_key(p.db, tenant, key)
    return RevokedOut(key_id=str(key), revoked_at=revoked_at)


def _server_out(s: servers.ToolServer) -> ToolServerOut:
    return ToolServerOut(
        server_id=str(s.server_id), name=s.name, url=s.url,
        honours_idempotency_keys=s.honours_idempotency_keys,
        tools=sorted(s.tool_names()), tools_sha256=s.tools_sha256.hex(), created_at=s.created_at,
    )


@router.post("/tenants/{tenant_id}/tool-servers", status_code=201, response_model=ToolServerOut,
             responses={502: {"description": "The server did not answer tools/list"}})
async def register_tool_server(
    tenant_id: str, body: RegisterToolServer, p: Platform = Depends(platform)
) -> ToolServerOut:
    """Register an MCP server for a tenant. Its tool list is read now and pinned."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    await service.get_tenant(p.db, tenant)  # 404 before calling anything
    server = await servers.register(p.db, p.mcp, tenant, name=body.name, url=body.url,
                                    honours_idempotency_keys=body.honours_idempotency_keys)
    return _server_out(server)


@router.get("/tenants/{tenant_id}/tool-servers", response_model=list[ToolServerOut])
async def list_tool_servers(tenant_id: str, p: Platform = Depends(platform)) -> list[ToolServerOut]:
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    await service.get_tenant(p.db, tenant)
    return [_server_out(s) for s in await servers.list_servers(p.db, tenant)]
