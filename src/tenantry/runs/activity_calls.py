"""Activity tasks and the agent runs that called them as tools (ADR 0015): the task's
ending handed to the run that waits for it.

``task_ended`` runs in the transaction that ends the task (the dispatcher's, or a
cancellation's), *before* the task's own status changes: the lock order is task row →
parent run row → the tenant's load row, the same order a run's enqueue takes (parent run
row → load row), so the two never deadlock. The parent and its task are always one
tenant's (the parent enqueued it under its own tenant's row-level security)."""

from __future__ import annotations

from typing import Any

from tenantry.db import Connection
from tenantry.db.queries import load
from tenantry.ids import RunId, TenantId
from tenantry.runs import log
from tenantry.runs.events import ActivityReturned, RunStatus

Q = load(__package__, "activity_calls.sql")

#: How each ending reads to the model (the error of the call's ToolCompleted).
MAX_ERROR_CHARS = 1000


async def task_ended(conn: Connection, tenant: TenantId, task: RunId, status: str, *,
                     result: Any = None, error: Any = None) -> bool:
    """If an agent run's tool call enqueued ``task``, append ``ActivityReturned`` to that
    run and queue it again (waiting → queued), in the caller's transaction. ``status``:
    finished, failed, dead_lettered or cancelled. A parent that has ended, or has this
    task's ending already (a requeued dead letter that ended again), is left alone.
    True when the parent was told."""
    row = await conn.fetchrow(Q.task_parent, tenant.value, task.uuid)
    if row is None or row["parent_run_id"] is None:
        return False
    parent = RunId(row["parent_run_id"])
    parent_status = await conn.fetchval(Q.lock_parent, tenant.value, parent.uuid)
    if parent_status is None or RunStatus(parent_status).terminal:
        return False
    if await conn.fetchval(Q.already_returned, tenant.value, parent.uuid,
                           ActivityReturned.TYPE.value, str(task)) is not None:
        return False
    returned = ActivityReturned(row["idempotency_key"], str(task), status,
                                result=result if status == "finished" else None,
                                error=None if status == "finished" else _told(status, error))
    await log.append(conn, tenant, parent, returned, epoch=None)
    await conn.execute(Q.wake_parent, tenant.value, parent.uuid)
    return True


def _told(status: str, error: Any) -> str:
    message = error.get("message") if isinstance(error, dict) else error
    detail = f": {message}" if message else ""
    if status == "dead_lettered":
        text = (f"the activity was dead-lettered (its attempts kept killing their sandbox) "
                f"and will not run again unless the tenant requeues it{detail}")
    elif status == "cancelled":
        text = "the activity task was cancelled before it finished"
    else:
        text = f"the activity failed{detail}"
    return text[:MAX_ERROR_CHARS]
