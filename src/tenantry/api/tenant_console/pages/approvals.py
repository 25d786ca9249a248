"""The approvals inbox of the signed-in person's tenant, and deciding one.

A decision takes the tenant API's path (``runs.approvals.decide``: the same checks, the
same ApprovalDecided event and re-queue), named as the person's (``user:<id>``), and is
recorded in the tenant's audit trail as an account change. Only a role holding
``approvals:decide`` sees the forms, and the POST checks the scope again: a form forged by
a viewer changes nothing."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from tenantry.api.console.view import HEADERS, id_or_none
from tenantry.api.tenant_console import changes
from tenantry.api.tenant_console.view import PREFIX, ApprovalsForm, RunsPage, text
from tenantry.errors import Conflict, NotFound
from tenantry.ids import ApprovalId
from tenantry.runs import approval_context, approvals
from tenantry.runs.approval_context import ApprovalContext
from tenantry.tenants.scopes import Scope
from tenantry.tools import approvals as requests
from tenantry.tools.approvals import ApprovalView

router = APIRouter()
PAGE = 50
MAX_COMMENT = 2000
ROUTE = f"POST {PREFIX}/approvals/{{approval_id}}"  # the audit trail's action


@router.get("/approvals")
async def inbox(v: RunsPage) -> Response:
    q = v.request.query_params
    before = id_or_none(ApprovalId, q.get("before"))
    pending = await requests.list_approvals(v.db, v.member.tenant, status="pending",
                                            before=before, limit=PAGE)
    older = (f"{PREFIX}/approvals?before={pending[-1].approval_id}"
             if len(pending) == PAGE else None)
    decided = None
    if q.get("decision") in ("approved", "denied"):
        try:
            decided = (str(ApprovalId.parse(q.get("decided", ""))), q["decision"])
        except ValueError:
            decided = None
    return v.render("approvals.html", title="Approvals", pending=pending, older=older,
                    decided=decided, decide=v.may(Scope.APPROVALS_DECIDE),
                    contexts=await _contexts(v, pending))


@router.get("/approvals/{approval_id}")
async def approval_page(approval_id: str, v: RunsPage) -> Response:
    """One approval, whatever its status (the form only while it is pending)."""
    try:
        found = await requests.get(v.db, v.member.tenant, ApprovalId.parse(approval_id))
    except (ValueError, NotFound):  # another tenant's too: nothing says it exists
        return v.not_found("No approval with this id.")
    return v.render("approval.html", title=f"Approval {found.approval_id}", a=found,
                    decide=v.may(Scope.APPROVALS_DECIDE), contexts=await _contexts(v, [found]))


async def _contexts(v: RunsPage, shown: list[ApprovalView]) -> dict[str, ApprovalContext]:
    """What the person reads beside each call (agent, run input, what the model said, who
    decided), by approval id."""
    found = await approval_context.contexts(v.db, v.member.tenant,
                                            [a.approval_id for a in shown])
    return {str(approval): context for approval, context in found.items()}


@router.post("/approvals/{approval_id}")
async def decide(approval_id: str, v: ApprovalsForm) -> Response:
    form = await v.request.form()
    decision = text(form.get("decision"))
    if decision not in approvals.DECISIONS:
        return v.error(400, "Choose approve or deny", "The form named no decision.")
    comment = text(form.get("comment")).replace("\x00", "").strip()[:MAX_COMMENT] or None
    tenant = v.member.tenant
    try:
        done = await approvals.decide(v.db, tenant, ApprovalId.parse(approval_id), decision,
                                      comment, decided_by=v.member.actor)
    except (ValueError, NotFound):
        return v.not_found("No approval with this id.")
    except Conflict as exc:
        return v.error(409, "Already decided", exc.detail)
    await changes.record(v, ROUTE)
    if text(form.get("back")) == "run":
        target = f"{PREFIX}/runs/{done.run_id}"
    else:
        target = f"{PREFIX}/approvals?" + urlencode(
            {"decided": str(done.approval_id), "decision": done.status})
    return RedirectResponse(target, status_code=303, headers=HEADERS)
