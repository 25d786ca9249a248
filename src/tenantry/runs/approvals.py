"""Approvals' effect on runs: a person's decision (or expiry) is appended to the run's log
as ApprovalDecided and puts the waiting run back in the queue, in one transaction; any
worker continues from the log. The approvals table itself (requests, the gateway's
is-this-call-approved check, listings) is the tool gateway's: tools/approvals.py."""

from __future__ import annotations

from datetime import datetime

from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound
from tenantry.ids import ApprovalId, RunId, TenantId
from tenantry.runs import log
from tenantry.runs.events import ApprovalDecided, RunStatus
from tenantry.tools.approvals import NOT_FOUND, ApprovalView, view

Q = load(__package__, "approvals.sql")

DECISIONS = ("approve", "deny")


async def decide(
    db: Database, tenant: TenantId, approval: ApprovalId, decision: str, comment: str | None,
    *, decided_by: str | None = None,
) -> ApprovalView:
    """Record a person's decision and put the run back in the queue. ``decided_by`` names
    who decided when it was not the tenant itself (``"operator"``: the console); it is kept
    in the ApprovalDecided event, so the run's log says who let the call through."""
    status = {"approve": "approved", "deny": "denied"}[decision]
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.lock_approval, tenant.value, approval.uuid)
        if row is None:
            raise NotFound(NOT_FOUND)
        if row["status"] != "pending":
            raise Conflict(f"This approval was already {row['status']}.",
                           approval_status=row["status"])
        if RunStatus(row["run_status"]).terminal:
            raise Conflict(f"The run already ended as {row['run_status']}.",
                           run_status=row["run_status"])
        await _record(conn, tenant, RunId(row["run_id"]), approval, row["key"], status, comment,
                      decided_by)
        updated = await view(conn, tenant, approval)
    assert updated is not None
    return updated


async def _record(
    conn: Connection, tenant: TenantId, run: RunId, approval: ApprovalId, key: str,
    status: str, comment: str | None, decided_by: str | None = None,
) -> None:
    await conn.execute(Q.set_decision, tenant.value, approval.uuid, status, comment)
    decided = ApprovalDecided(str(approval), key, status, comment or None, decided_by or None)
    await log.append(conn, tenant, run, decided, epoch=None)
    await conn.execute(Q.requeue_waiting_run, tenant.value, run.uuid)


async def expire_due(db: Database, now: datetime, batch: int = 100) -> int:
    """Expire pending approvals whose time is up (``now`` is injectable for tests)."""
    due = await db.statement_rows(Q.expired_approvals, now, batch)  # no reset: sets nothing
    expired = 0
    for item in due:
        tenant = TenantId(item["tenant_id"])
        async with db.tenant_tx(tenant) as conn:
            row = await conn.fetchrow(Q.lock_approval, tenant.value, item["approval_id"])
            if row is None or row["status"] != "pending":
                continue  # decided meanwhile
            await _record(conn, tenant, RunId(row["run_id"]), ApprovalId(row["approval_id"]),
                          row["key"], "expired", None)
            expired += 1
    return expired
