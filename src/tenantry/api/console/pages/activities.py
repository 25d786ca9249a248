"""The activities page: dead-lettered activity tasks across tenants (or one tenant's),
newest first, each with a requeue button — the tenant API's requeue, done by the operator
(a fresh count of attempts and sandbox deaths, ``RunResumed`` in the task's log)."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from tenantry.api.console import action_log as actions
from tenantry.api.console import dead_letters
from tenantry.api.console.view import (
    HEADERS,
    PREFIX,
    SignedIn,
    SignedInPage,
    SupportForm,
    id_or_none,
    tenant_filter,
)
from tenantry.errors import Conflict, NotFound
from tenantry.ids import RunId, TenantId

router = APIRouter()


@router.get("/activities")
async def activities(v: SignedInPage) -> Response:
    return await _render(v)


async def _render(v: SignedIn, *, status: int = 200, error: str | None = None) -> HTMLResponse:
    q = v.request.query_params
    before = id_or_none(RunId, q.get("before"))
    tenant, note = tenant_filter(q.get("tenant", "").strip())
    error = error or note
    rows = await dead_letters.dead_letters(v.console_db, tenant=tenant, before=before)
    kept = {"tenant": tenant.value} if tenant else {}
    older = (f"{PREFIX}/activities?{urlencode({**kept, 'before': str(rows[-1].task_id)})}"
             if len(rows) == dead_letters.PAGE else None)
    requeued = id_or_none(RunId, q.get("requeued"))
    return v.render("activities.html", status=status, title="Activities", rows=rows,
                    tenant=tenant, older=older, error=error, requeued=requeued)


@router.post("/activities/{tenant_id}/{task_id}/requeue")
async def requeue(tenant_id: str, task_id: str, v: SupportForm) -> Response:
    try:
        tenant, task = TenantId.parse(tenant_id), RunId.parse(task_id)
        # In the tenant's own transaction, as the tenant API's requeue does.
        await v.platform.activities.requeue(tenant, task)
    except (ValueError, NotFound):
        return await _render(v, status=404, error="No such activity task.")
    except Conflict as exc:
        await actions.record(v.console_db, actor=v.actor,
                             action=actions.Action.REQUEUE_TASK, tenant=tenant,
                             target=str(task), outcome=f"refused: {exc.detail}")
        return await _render(v, status=409, error=exc.detail)
    await actions.record(v.console_db, actor=v.actor,
                         action=actions.Action.REQUEUE_TASK, tenant=tenant, target=str(task))
    return RedirectResponse(f"{PREFIX}/activities?{urlencode({'requeued': str(task)})}",
                            status_code=303, headers=HEADERS)
