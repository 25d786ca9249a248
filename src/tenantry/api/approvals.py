"""Tenant API: the approvals inbox. The approver sees the exact arguments that will be sent;
a decision re-queues the run, which continues from its log on any worker."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from tenantry.api.auth import ApprovalsDecider, PlatformDep, RunsReader
from tenantry.api.fields import Body, Text
from tenantry.api.pagination import PageRequest, keyed_by
from tenantry.api.params import parse_or_404
from tenantry.ids import ApprovalId
from tenantry.runs import approvals as decisions
from tenantry.tools import approvals

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])
_ApprovalPage = Annotated[PageRequest, Depends(keyed_by(ApprovalId.pattern()))]


class ApprovalOut(BaseModel):
    approval_id: str
    run_id: str
    key: str = Field(description="The idempotency key of the one call this approves.")
    tool: str
    arguments: dict[str, Any] = Field(description="Exactly what will be sent if approved.")
    status: str
    comment: str | None
    requested_at: datetime
    expires_at: datetime
    decided_at: datetime | None


class ApprovalList(BaseModel):
    data: list[ApprovalOut]
    next_cursor: str | None


class Decide(Body):
    decision: Literal["approve", "deny"]
    comment: Text | None = Field(default=None, max_length=2000,
                                description="Shown to the model when the call is denied.")


def _out(a: approvals.ApprovalView) -> ApprovalOut:
    return ApprovalOut(approval_id=str(a.approval_id), run_id=str(a.run_id), key=a.key,
                       tool=a.tool, arguments=a.arguments, status=a.status, comment=a.comment,
                       requested_at=a.requested_at, expires_at=a.expires_at,
                       decided_at=a.decided_at)


@router.get("", response_model=ApprovalList)
async def list_approvals(
    *,
    status: Literal["pending", "approved", "denied", "expired", "cancelled"] | None = Query(None),
    page: _ApprovalPage, tenant: RunsReader, p: PlatformDep,
) -> ApprovalList:
    """List approvals.

    The tenant's approvals, newest first, optionally by `status` (`pending` is the inbox):
    each one's tool, exact arguments and the call's idempotency key."""
    found = await approvals.list_approvals(p.db, tenant, status=status,
                                           before=page.position(ApprovalId.parse),
                                           limit=page.limit)
    return page.answer(ApprovalList, found, _out, key=lambda a: str(a.approval_id))


@router.get("/{approval_id}", response_model=ApprovalOut)
async def get_approval(approval_id: str, tenant: RunsReader, p: PlatformDep) -> ApprovalOut:
    """Get an approval.

    The tool call waiting on a person (or decided): its arguments, key, status, comment and
    expiry."""
    approval = parse_or_404(ApprovalId, approval_id, approvals.NOT_FOUND)
    return _out(await approvals.get(p.db, tenant, approval))


@router.post("/{approval_id}", response_model=ApprovalOut)
async def decide(
    approval_id: str, body: Decide, tenant: ApprovalsDecider, p: PlatformDep,
) -> ApprovalOut:
    """Approve or deny. Deciding twice, or after the run ended, is a 409."""
    approval = parse_or_404(ApprovalId, approval_id, approvals.NOT_FOUND)
    return _out(await decisions.decide(p.db, tenant, approval, body.decision, body.comment))
