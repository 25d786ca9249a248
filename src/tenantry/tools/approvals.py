"""Approvals: a person decides on one exact tool call before it happens.

A run that needs one appends ApprovalRequested, goes to ``waiting`` and gives its slot back;
nothing waits in memory. The decision (approve, deny, or expiry) is appended to the run's
log and re-queues it; any worker continues from the log. An approval is bound to the call's
idempotency key and arguments: approving one refund cannot authorize another."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound
from tenantry.ids import ApprovalId, RunId, TenantId
from tenantry.jsonutil import digest
from tenantry.runs import log
from tenantry.runs.events import EventType, RunStatus

Q = load(__package__, "approvals_queries.sql")

NOT_FOUND = "No approval with this id."
DECISIONS = ("approve", "deny")


@dataclass(frozen=True, slots=True)
class ApprovalView:
    approval_id: ApprovalId
    run_id: RunId
    key: str
    tool: str
    arguments: dict[str, Any]
    status: str
    comment: str | None
    requested_at: datetime
    expires_at: datetime
    decided_at: datetime | None

    @classmethod
    def from_row(cls, r: asyncpg.Record) -> ApprovalView:
        return cls(ApprovalId(r["approval_id"]), RunId(r["run_id"]), r["key"], r["tool"],
                   r["arguments"], r["status"], r["comment"], r["requested_at"],
                   r["expires_at"], r["decided_at"])


async def open_request(
    conn: Connection, tenant: TenantId, run: RunId, key: str, tool: str,
    arguments: dict[str, Any],
) -> tuple[ApprovalId, datetime]:
    """Insert the approval for ``key`` (idempotent: a retried step finds the first one)."""
    approval_id = ApprovalId.new()
    row = await conn.fetchrow(Q.insert_approval, tenant.value, approval_id.uuid, run.uuid, key,
                              tool, arguments, digest(arguments))
    if row is None:
        row = await conn.fetchrow(Q.approval_by_key, tenant.value, key)
        assert row is not None
    return ApprovalId(row["approval_id"]), row["expires_at"]


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
        updated = await conn.fetchrow(Q.get_approval, tenant.value, approval.uuid)
    assert updated is not None
    return ApprovalView.from_row(updated)


async def _record(
    conn: Connection, tenant: TenantId, run: RunId, approval: ApprovalId, key: str,
    status: str, comment: str | None, decided_by: str | None = None,
) -> None:
    await conn.execute(Q.set_decision, tenant.value, approval.uuid, status, comment)
    data: dict[str, Any] = {"approval_id": str(approval), "key": key, "decision": status}
    if comment:
        data["comment"] = comment
    if decided_by:
        data["decided_by"] = decided_by
    await log.append(conn, tenant, run, EventType.APPROVAL_DECIDED, data, epoch=None)
    await conn.execute(Q.requeue_waiting_run, tenant.value, run.uuid)


async def expire_due(db: Database, now: datetime, batch: int = 100) -> int:
    """Expire pending approvals whose time is up (``now`` is injectable for tests)."""
    async with db.unscoped() as conn:
        due = await conn.fetch(Q.expired_approvals, now, batch)
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


async def is_approved(
    db: Database, tenant: TenantId, key: str, arguments: dict[str, Any]
) -> bool:
    """An approved row for this very key, over these very arguments."""
    async with db.tenant_tx(tenant) as conn:
        sha = await conn.fetchval(Q.approved_call, tenant.value, key)
    return sha is not None and bytes(sha) == digest(arguments)


async def get(db: Database, tenant: TenantId, approval: ApprovalId) -> ApprovalView:
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.get_approval, tenant.value, approval.uuid)
    if row is None:
        raise NotFound(NOT_FOUND)
    return ApprovalView.from_row(row)


async def list_approvals(
    db: Database, tenant: TenantId, *, status: str | None, before: ApprovalId | None, limit: int
) -> list[ApprovalView]:
    async with db.tenant_tx(tenant) as conn:
        rows = await conn.fetch(Q.list_approvals, tenant.value, status,
                                before.uuid if before else None, limit)
    return [ApprovalView.from_row(r) for r in rows]
