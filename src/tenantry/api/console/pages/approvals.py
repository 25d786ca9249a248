"""The approvals inbox across tenants (grouped by tenant, or one tenant's), and the
operator's decision on one approval."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from tenantry.api.console import action_log as actions
from tenantry.api.console import find, reads
from tenantry.api.console.view import (
    HEADERS,
    PREFIX,
    SignedIn,
    SignedInPage,
    SupportForm,
    id_or_none,
    tenant_filter,
    text,
)
from tenantry.errors import Conflict, NotFound
from tenantry.ids import ApprovalId, TenantId
from tenantry.runs import approvals

router = APIRouter()
MAX_COMMENT = 2000
_ACTION = {"approve": actions.Action.APPROVE, "deny": actions.Action.DENY}


@router.get("/approvals")
async def inbox(v: SignedInPage) -> Response:
    return await _render_inbox(v)


async def _render_inbox(v: SignedIn, *, status: int = 200,
                        error: str | None = None) -> HTMLResponse:
    q = v.request.query_params
    after = id_or_none(ApprovalId, q.get("after"))
    tenant, note = tenant_filter(q.get("tenant"))
    error = error or note
    groups: list[reads.TenantInbox] = []
    pending: list[reads.PendingApproval] = []
    more = None
    if tenant is not None:
        pending = await reads.pending_approvals_of(v.console_db, tenant, after=after,
                                                   context_from=v.db)
        if len(pending) == reads.PAGE:
            more = f"{PREFIX}/approvals?" + urlencode(
                {"tenant": tenant.value, "after": str(pending[-1].approval_id)})
    else:
        # Grouped, never one list oldest first: a tenant filing thousands of approvals
        # would fill every page of that, and bury every other tenant's behind them.
        groups = await reads.pending_by_tenant(v.console_db, context_from=v.db)
    shown = [g.tenant for g in groups] if tenant is None else [tenant]
    names = await find.names_of(v.db, [(t, None) for t in shown])
    decided = None
    decided_id = id_or_none(ApprovalId, q.get("decided"))
    if decided_id is not None and q.get("decision") in ("approved", "denied"):
        decided = (str(decided_id), q["decision"])
    bulk = None  # what a bulk decision (pages/actions.py) did: (decision, done, refused)
    if q.get("bulk") in approvals.DECISIONS and q.get("done", "").isdigit() \
            and q.get("refused", "").isdigit() and len(q["done"] + q["refused"]) < 10:
        bulk = (q["bulk"], int(q["done"]), int(q["refused"]))
    return v.render("approvals.html", status=status, title="Approvals", tenant=tenant,
                    groups=groups, pending=pending, names=names, decided=decided, bulk=bulk,
                    error=error,
                    more=more,
                    each=reads.INBOX_EACH, max_tenants=reads.INBOX_TENANTS)


@router.post("/approvals/{tenant_id}/{approval_id}")
async def decide(tenant_id: str, approval_id: str, v: SupportForm) -> Response:
    form = await v.request.form()
    decision = text(form.get("decision"))
    comment = text(form.get("comment")).strip()[:MAX_COMMENT] or None
    if decision not in approvals.DECISIONS:
        return await _render_inbox(v, status=400, error="Choose approve or deny.")
    try:
        tenant, approval = TenantId.parse(tenant_id), ApprovalId.parse(approval_id)
        # The tenant API's decision path: the same checks, the same ApprovalDecided
        # event and re-queue, marked as the operator's decision.
        done = await approvals.decide(v.db, tenant, approval, decision, comment,
                                      decided_by="operator")
    except (ValueError, NotFound):
        return await _render_inbox(v, status=404,
                                   error="No such approval (it may have been removed).")
    except Conflict as exc:
        await actions.record(v.console_db, actor=v.actor,
                             action=_ACTION[decision], tenant=tenant, target=str(approval),
                             outcome=f"refused: {exc.detail}", detail=comment)
        return await _render_inbox(v, status=409, error=exc.detail)
    await actions.record(v.console_db, actor=v.actor,
                         action=_ACTION[decision], tenant=tenant, target=str(approval),
                         detail=comment)
    shown = {"decided": str(done.approval_id), "decision": done.status}
    target = f"{PREFIX}/approvals?{urlencode(shown)}"
    if text(form.get("back")) == "run":
        target = f"{PREFIX}/runs/{tenant}/{done.run_id}"
    return RedirectResponse(target, status_code=303, headers=HEADERS)
