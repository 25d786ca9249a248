"""Tenant API: the approvals inbox. The approver sees the exact arguments that will be sent,
the agent, the run's input and what the model said before asking; a decision re-queues the
run, which continues from its log on any worker, and the approval says who decided."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from tenantry.api.auth import Caller, PlatformDep, RunsReader, caller_may
from tenantry.api.fields import Body, Text
from tenantry.api.pagination import PageRequest, keyed_by
from tenantry.api.params import parse_or_404
from tenantry.api.platform import Platform
from tenantry.ids import ApprovalId, TenantId
from tenantry.runs import approval_context
from tenantry.runs import approvals as decisions
from tenantry.runs.approval_context import ApprovalContext
from tenantry.tenants.scopes import Scope
from tenantry.tools import approvals

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])
_ApprovalPage = Annotated[PageRequest, Depends(keyed_by(ApprovalId.pattern()))]
_Decider = Annotated[Caller, Depends(caller_may(Scope.APPROVALS_DECIDE))]


class AgentRef(BaseModel):
    id: str
    name: str | None


class AskedOut(BaseModel):
    """What an approver reads besides the call (the operator's inbox shows it too)."""

    agent: AgentRef | None = Field(description="The run's agent (null if the run is gone).")
    run_input: Any = Field(description="The input the run was started with.")
    model_said: str | None = Field(
        description=f"What the model said in the reply that asked for the call, at most "
                    f"{approval_context.MODEL_SAID_CHARS} characters; null if it said "
                    f"nothing.")
    model_said_truncated: bool = Field(description="The model's text went on past that.")


class ApprovalOut(AskedOut):
    approval_id: str
    run_id: str
    key: str = Field(description="The idempotency key of the one call this approves.")
    tool: str
    arguments: dict[str, Any] = Field(description="Exactly what will be sent if approved.")
    status: str
    comment: str | None = Field(description="The decider's comment.")
    requested_at: datetime
    expires_at: datetime
    decided_at: datetime | None
    decided_by: str | None = Field(
        description="Who decided: `key:<key id>` (an API key), `user:<user id>` (a person "
                    "in the tenant console) or `operator` (the platform's operator); null "
                    "while pending, for an expiry, and for decisions made before this was "
                    "recorded.")


class ApprovalList(BaseModel):
    data: list[ApprovalOut]
    next_cursor: str | None


class Decide(Body):
    decision: Literal["approve", "deny"]
    comment: Text | None = Field(default=None, max_length=2000,
                                description="Shown to the model when the call is denied.")


def asked(c: ApprovalContext) -> dict[str, Any]:
    """The :class:`AskedOut` fields of an approval's context."""
    return {"agent": AgentRef(id=str(c.agent_id), name=c.agent_name) if c.agent_id else None,
            "run_input": c.run_input, "model_said": c.model_said,
            "model_said_truncated": c.model_said_cut}


def _out(a: approvals.ApprovalView, c: ApprovalContext) -> ApprovalOut:
    return ApprovalOut(approval_id=str(a.approval_id), run_id=str(a.run_id), key=a.key,
                       tool=a.tool, arguments=a.arguments, status=a.status, comment=a.comment,
                       requested_at=a.requested_at, expires_at=a.expires_at,
                       decided_at=a.decided_at, decided_by=c.decided_by, **asked(c))


async def _with_context(p: Platform, tenant: TenantId,
                        found: list[approvals.ApprovalView]) -> list[ApprovalOut]:
    context = await approval_context.contexts(p.db, tenant, [a.approval_id for a in found])
    return [_out(a, context.get(a.approval_id, approval_context.NONE)) for a in found]


Status = Literal["pending", "approved", "denied", "expired", "cancelled"]


@router.get("", response_model=ApprovalList)
async def list_approvals(
    *, status: Status | None = Query(None), page: _ApprovalPage, tenant: RunsReader,
    p: PlatformDep,
) -> ApprovalList:
    """List approvals.

    The tenant's approvals, newest first, optionally by `status` (`pending` is the inbox):
    each one's tool, exact arguments and the call's idempotency key."""
    return await page_of(p, tenant, status, page)


@router.get("/{approval_id}", response_model=ApprovalOut)
async def get_approval(approval_id: str, tenant: RunsReader, p: PlatformDep) -> ApprovalOut:
    """Get an approval.

    The tool call waiting on a person (or decided): its arguments, key, status, comment and
    expiry."""
    return await one(p, tenant, approval_id)


@router.post("/{approval_id}", response_model=ApprovalOut)
async def decide(
    approval_id: str, body: Decide, caller: _Decider, p: PlatformDep,
) -> ApprovalOut:
    """Approve or deny. Deciding twice, or after the run ended, is a 409. The approval and
    the run's log name the deciding API key."""
    return await decided(p, caller.tenant, approval_id, body, decided_by=f"key:{caller.key}")


# What the tenant's routes answer, for the operator's of one tenant too
# (api/operator_runs.py).
async def page_of(p: Platform, tenant: TenantId, status: Status | None,
                  page: PageRequest) -> ApprovalList:
    found = await approvals.list_approvals(p.db, tenant, status=status,
                                           before=page.position(ApprovalId.parse),
                                           limit=page.limit)
    shown = await _with_context(p, tenant, found)
    return page.answer(ApprovalList, shown, lambda a: a, key=lambda a: a.approval_id)


async def one(p: Platform, tenant: TenantId, approval_id: str) -> ApprovalOut:
    approval = parse_or_404(ApprovalId, approval_id, approvals.NOT_FOUND)
    return (await _with_context(p, tenant, [await approvals.get(p.db, tenant, approval)]))[0]


async def decided(p: Platform, tenant: TenantId, approval_id: str, body: Decide, *,
                  decided_by: str) -> ApprovalOut:
    approval = parse_or_404(ApprovalId, approval_id, approvals.NOT_FOUND)
    done = await decisions.decide(p.db, tenant, approval, body.decision, body.comment,
                                  decided_by=decided_by)
    return (await _with_context(p, tenant, [done]))[0]
