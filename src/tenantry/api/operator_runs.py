"""Operator API: one tenant's run read without its key — the run, its trace and its event
log (a JSON page or the live stream) — and its approvals listed, read and decided, each
with the tenant's own route's body (``api/runs.py``, ``api/approvals.py``), so the
operator's CLI (``tenantry runs show|tail|trace --tenant``, ``tenantry approvals --tenant``)
reads what the tenant's does. Reads only, but for a decision, which is the console's: the
same checks and event as the tenant's, marked as the operator's.

An unknown tenant is a 404 naming the tenant, before the run or approval is looked up, so
a mistyped tenant is not mistaken for a missing run."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from tenantry.api import approvals as tenant_approvals
from tenantry.api.approvals import ApprovalList, ApprovalOut, Decide, Status
from tenantry.api.auth import PlatformDep, operator
from tenantry.api.pagination import PageRequest, keyed_by
from tenantry.api.params import parse_or_404
from tenantry.api.platform import Platform
from tenantry.api.run_bodies import RunOut, TraceOut, run_out
from tenantry.api.runs import (
    EVENTS_RESPONSES,
    NOT_FOUND,
    After,
    EventsLimit,
    LastEventId,
    events_answer,
    trace_answer,
)
from tenantry.ids import ApprovalId, RunId, TenantId
from tenantry.runs import service as runs
from tenantry.tenants import service

router = APIRouter(prefix="/admin/v1/tenants/{tenant_id}", tags=["operator"],
                   dependencies=[Depends(operator)])
_ApprovalPage = Annotated[PageRequest, Depends(keyed_by(ApprovalId.pattern()))]


async def _tenant(p: Platform, tenant_id: str) -> TenantId:
    tenant = parse_or_404(TenantId, tenant_id, service.TENANT_NOT_FOUND)
    await service.get_tenant(p.db, tenant)  # NotFound: no such tenant
    return tenant


@router.get("/runs/{run_id}", response_model=RunOut)
async def get_run(tenant_id: str, run_id: str, p: PlatformDep) -> RunOut:
    """Get a tenant's run.

    As `GET /v1/runs/{run_id}` answers it, read with the operator token."""
    tenant = await _tenant(p, tenant_id)
    return run_out(await runs.get_run(p.db, tenant, parse_or_404(RunId, run_id, NOT_FOUND)))


@router.get("/runs/{run_id}/trace", response_model=TraceOut)
async def get_trace(tenant_id: str, run_id: str, p: PlatformDep) -> Response:
    """Get a tenant's run's trace.

    As `GET /v1/runs/{run_id}/trace` answers it: where the run's wall time went."""
    tenant = await _tenant(p, tenant_id)
    return await trace_answer(p, tenant, parse_or_404(RunId, run_id, NOT_FOUND))


@router.get("/runs/{run_id}/events", response_model=None, responses=EVENTS_RESPONSES)
async def run_events(
    tenant_id: str, run_id: str, request: Request, p: PlatformDep, after: After = None,
    limit: EventsLimit = 500, last_event_id: LastEventId = None,
) -> Response:
    """Read or stream a tenant's run's events.

    As `GET /v1/runs/{run_id}/events` answers them (a JSON page, or Server-Sent Events until
    the run ends); a live stream counts among the operator's (the console's), not the
    tenant's."""
    tenant = await _tenant(p, tenant_id)
    run = parse_or_404(RunId, run_id, NOT_FOUND)
    start = after if after is not None else (last_event_id or 0)
    return await events_answer(request, p, tenant, run, start, limit, stream_of=None)


@router.get("/approvals", response_model=ApprovalList)
async def list_approvals(
    *, tenant_id: str, page: _ApprovalPage, p: PlatformDep,
    status: Status | None = Query(None),
) -> ApprovalList:
    """List a tenant's approvals.

    Newest first, optionally by `status`, as `GET /v1/approvals` answers them (the inbox of
    pending ones alone, oldest first: `…/approvals/pending`)."""
    return await tenant_approvals.page_of(p, await _tenant(p, tenant_id), status, page)


@router.get("/approvals/{approval_id}", response_model=ApprovalOut)
async def get_approval(tenant_id: str, approval_id: str, p: PlatformDep) -> ApprovalOut:
    """Get a tenant's approval.

    As `GET /v1/approvals/{approval_id}` answers it: the call, its context, and who decided
    it, when and why."""
    return await tenant_approvals.one(p, await _tenant(p, tenant_id), approval_id)


# `…/decision`, not a POST to `…/approvals/{approval_id}` as the tenant's: that path would
# also match the inbox's `…/approvals/pending`.
@router.post("/approvals/{approval_id}/decision", response_model=ApprovalOut)
async def decide(tenant_id: str, approval_id: str, body: Decide, p: PlatformDep) -> ApprovalOut:
    """Approve or deny a tenant's approval.

    As the console does, with the body of `POST /v1/approvals/{approval_id}`: the approval
    and the run's log name the operator as who decided. Deciding twice, or after the run
    ended, is a 409."""
    return await tenant_approvals.decided(p, await _tenant(p, tenant_id), approval_id, body,
                                          decided_by="operator")
