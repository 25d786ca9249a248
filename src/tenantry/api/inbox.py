"""Operator API for the approvals inbox: pending approvals grouped by tenant, and one
tenant's page by page, so one tenant filing thousands cannot bury another tenant's one (the
console's approvals page reads the same)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from tenantry.api.approvals import AskedOut, asked
from tenantry.api.auth import PlatformDep, operator
from tenantry.api.console import reads
from tenantry.api.pagination import PageRequest, keyed_by
from tenantry.api.params import FewLimit, parse_or_404
from tenantry.ids import ApprovalId, TenantId
from tenantry.tenants import service

router = APIRouter(prefix="/admin/v1", tags=["operator"], dependencies=[Depends(operator)])
_ApprovalPage = Annotated[PageRequest, Depends(keyed_by(ApprovalId.pattern()))]

class PendingApprovalOut(AskedOut):
    tenant_id: str
    approval_id: str
    run_id: str
    key: str = Field(description="The idempotency key of the one call this approves.")
    tool: str
    arguments: dict[str, Any] = Field(description="Exactly what will be sent if approved.")
    requested_at: datetime
    expires_at: datetime


class TenantPendingOut(BaseModel):
    tenant_id: str
    pending: int = Field(description="The tenant's pending approvals, all of them.")
    oldest_requested_at: datetime
    first: list[PendingApprovalOut] = Field(description="Its oldest `each`, oldest first.")


class PendingByTenant(BaseModel):
    tenants: list[TenantPendingOut] = Field(
        description=f"Every tenant with pending approvals, the longest waiting first (at "
                    f"most {reads.INBOX_TENANTS}; the others by their own list).")


class PendingList(BaseModel):
    data: list[PendingApprovalOut]
    next_cursor: str | None


def _out(a: reads.PendingApproval) -> PendingApprovalOut:
    return PendingApprovalOut(
        tenant_id=a.tenant.value, approval_id=str(a.approval_id), run_id=str(a.run_id),
        key=a.key, tool=a.tool, arguments=a.arguments, requested_at=a.requested_at,
        expires_at=a.expires_at, **asked(a.context))


@router.get("/approvals/pending", response_model=PendingByTenant)
async def pending_by_tenant(
    p: PlatformDep,
    each: Annotated[FewLimit, Query(description="How many of each tenant's to show.")]
    = reads.INBOX_EACH,
) -> PendingByTenant:
    """The approvals inbox grouped by tenant: each tenant's count, how long it has waited,
    and its oldest `each`, so no tenant's volume hides another tenant's approvals."""
    groups = await reads.pending_by_tenant(p.cross_tenant_db, each=each, context_from=p.db)
    return PendingByTenant(tenants=[TenantPendingOut(
        tenant_id=g.tenant.value, pending=g.pending, oldest_requested_at=g.oldest,
        first=[_out(a) for a in g.first]) for g in groups])


@router.get("/tenants/{tenant_id}/approvals/pending", response_model=PendingList)
async def pending_of_tenant(tenant_id: str, page: _ApprovalPage, p: PlatformDep) -> PendingList:
    """One tenant's pending approvals, oldest first (the inbox filtered by tenant)."""
    tenant = parse_or_404(TenantId, tenant_id, service.TENANT_NOT_FOUND)
    found = await reads.pending_approvals_of(p.cross_tenant_db, tenant,
                                             after=page.position(ApprovalId.parse),
                                             limit=page.limit, context_from=p.db)
    return page.answer(PendingList, found, _out, key=lambda a: str(a.approval_id))
