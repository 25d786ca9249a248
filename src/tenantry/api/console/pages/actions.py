"""The console's actions: cancel a run, decide approvals in bulk, revoke a tenant's API key,
pause or resume its admissions — and the Actions page, the log of every one of them.

Each is a POST form carrying the session's CSRF token, done through the same service call
as the tenant or operator API (the same checks, the same events in the run's log), then
recorded in the action log as the session that did it (console/action_log.py). A refusal
(a run that already ended, an approval decided meanwhile) is recorded with its reason."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from tenantry.api.console import action_log as actions
from tenantry.api.console.action_log import Action
from tenantry.api.console.pages.approvals import MAX_COMMENT
from tenantry.api.console.view import (
    HEADERS,
    PREFIX,
    AdminForm,
    SignedInPage,
    SupportForm,
    parse_id,
    tenant_filter,
    text,
)
from tenantry.errors import Conflict, NotFound
from tenantry.ids import ApiKeyId, ApprovalId, RunId, TenantId
from tenantry.runs import approvals, service
from tenantry.tenants import service as tenants

router = APIRouter()
#: Decisions one bulk form may carry: each is its own transaction, and a page shows fewer.
MAX_BULK = 100


def _refused(exc: Conflict | NotFound) -> str:
    return f"refused: {exc.detail}"


@router.post("/runs/{tenant_id}/{run_id}/cancel")
async def cancel(tenant_id: str, run_id: str, v: SupportForm) -> Response:
    try:
        tenant, run = TenantId.parse(tenant_id), RunId.parse(run_id)
    except ValueError:
        return v.not_found("No run with this id.")
    try:
        # The tenant API's cancel: CancelRequested in the run's log, and a run no worker
        # holds ends at once.
        await service.cancel_run(v.db, tenant, run)
    except NotFound:
        return v.not_found("No run with this id.")
    except Conflict as exc:
        await actions.record(v.console_db, actor=v.actor, action=Action.CANCEL_RUN,
                             tenant=tenant, target=str(run), outcome=_refused(exc))
        return v.render("error.html", status=409, title="Not cancelled", message=exc.detail)
    await actions.record(v.console_db, actor=v.actor, action=Action.CANCEL_RUN,
                         tenant=tenant, target=str(run))
    return RedirectResponse(f"{PREFIX}/runs/{tenant}/{run}", status_code=303, headers=HEADERS)


def _picked(value: str) -> tuple[TenantId, ApprovalId] | None:
    tenant, _, approval = value.partition("/")
    try:
        return TenantId.parse(tenant), ApprovalId.parse(approval)
    except ValueError:
        return None


@router.post("/approvals/bulk")
async def decide_bulk(v: SupportForm) -> Response:
    """One decision and comment for every approval ticked in the inbox, each through the
    approvals service as a single decision would be (its own ApprovalDecided and re-queue);
    one decided meanwhile is refused alone, the others still decided."""
    form = await v.request.form()
    decision = text(form.get("decision"))
    comment = text(form.get("comment")).strip()[:MAX_COMMENT] or None
    picks = [p for p in (_picked(text(x)) for x in form.getlist("pick")) if p is not None]
    back = f"{PREFIX}/approvals"
    if decision not in approvals.DECISIONS or not picks or len(picks) > MAX_BULK:
        why = ("Choose approve or deny." if decision not in approvals.DECISIONS else
               "Tick at least one approval." if not picks else
               f"At most {MAX_BULK} approvals at once.")
        return v.render("error.html", status=400, title="Nothing decided", message=why)
    action = Action.APPROVE if decision == "approve" else Action.DENY
    done = refused = 0
    for tenant, approval in dict.fromkeys(picks):  # a value sent twice is decided once
        try:
            await approvals.decide(v.db, tenant, approval, decision, comment,
                                   decided_by="operator")
        except (NotFound, Conflict) as exc:
            refused += 1
            outcome = _refused(exc)
        else:
            done += 1
            outcome = actions.DONE
        await actions.record(v.console_db, actor=v.actor, action=action, tenant=tenant,
                             target=str(approval), outcome=outcome, detail=comment)
    shown = {"bulk": decision, "done": done, "refused": refused}
    return RedirectResponse(f"{back}?{urlencode(shown)}", status_code=303, headers=HEADERS)


@router.get("/tenants/{tenant_id}/access")
async def access(tenant_id: str, v: SignedInPage) -> Response:
    """A tenant's API keys (each revocable) and whether it admits new runs."""
    try:
        tenant = TenantId.parse(tenant_id)
        before = parse_id(ApiKeyId, v.request.query_params.get("before"))
    except ValueError:
        return v.not_found("No tenant with this id.")
    try:
        found = await tenants.get_tenant(v.db, tenant)
        keys = await tenants.api_keys_page(v.db, tenant, before=before, limit=actions.PAGE)
    except NotFound:
        return v.not_found("No tenant with this id.")
    paused_at = await tenants.admissions_paused_at(v.db, tenant)
    older = (f"{PREFIX}/tenants/{tenant}/access?{urlencode({'before': str(keys[-1].key_id)})}"
             if len(keys) == actions.PAGE else None)
    q = v.request.query_params
    return v.render("tenant_access.html", title=f"Tenant {found.name}: keys and admissions",
                    tenant=found, keys=keys, paused_at=paused_at, older=older,
                    revoked=q.get("revoked"), admissions=q.get("admissions"))


@router.post("/tenants/{tenant_id}/keys/{key_id}/revoke")
async def revoke_key(tenant_id: str, key_id: str, v: AdminForm) -> Response:
    try:
        tenant, key = TenantId.parse(tenant_id), ApiKeyId.parse(key_id)
        # The operator API's revoke: every API process drops its cached keys at commit.
        await tenants.revoke_api_key(v.db, tenant, key, v.platform.auth_cache)
    except (ValueError, NotFound):
        return v.not_found("No API key with this id.")
    await actions.record(v.console_db, actor=v.actor, action=Action.REVOKE_API_KEY,
                         tenant=tenant, target=str(key))
    return RedirectResponse(f"{PREFIX}/tenants/{tenant}/access?{urlencode({'revoked': str(key)})}",
                            status_code=303, headers=HEADERS)


@router.post("/tenants/{tenant_id}/admissions")
async def admissions(tenant_id: str, v: SupportForm) -> Response:
    form = await v.request.form()
    paused = text(form.get("paused"))
    if paused not in ("true", "false"):
        return v.render("error.html", status=400, title="Nothing changed",
                        message="Choose pause or resume.")
    try:
        tenant = TenantId.parse(tenant_id)
        await tenants.set_admissions_paused(v.db, tenant, paused == "true")
    except (ValueError, NotFound):
        return v.not_found("No tenant with this id.")
    action = Action.PAUSE_ADMISSIONS if paused == "true" else Action.RESUME_ADMISSIONS
    await actions.record(v.console_db, actor=v.actor, action=action, tenant=tenant,
                         target=str(tenant))
    shown = {"admissions": "paused" if paused == "true" else "resumed"}
    return RedirectResponse(f"{PREFIX}/tenants/{tenant}/access?{urlencode(shown)}",
                            status_code=303, headers=HEADERS)


@router.get("/actions")
async def action_log(v: SignedInPage) -> Response:
    q = v.request.query_params
    tenant, error = tenant_filter(q.get("tenant", "").strip())
    before_text = q.get("before", "")
    before = int(before_text) if before_text.isascii() and before_text.isdigit() \
        and len(before_text) < 19 else None
    rows = await actions.entries(v.console_db, tenant=tenant, before=before)
    kept = {"tenant": tenant.value} if tenant else {}
    older = (f"{PREFIX}/actions?{urlencode({**kept, 'before': rows[-1].action_id})}"
             if len(rows) == actions.PAGE else None)
    return v.render("actions.html", title="Actions", rows=rows, tenant=tenant, older=older,
                    error=error)
