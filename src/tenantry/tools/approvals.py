"""Approvals: a person decides on one exact tool call before it happens.

A run that needs one appends ApprovalRequested, goes to ``waiting`` and gives its slot back;
nothing waits in memory. The decision (approve, deny, or expiry) is appended to the run's
log and re-queues it (runs/approvals.py); any worker continues from the log. An approval is
bound to the call's idempotency key and arguments: approving one refund cannot authorize
another. This module touches the approvals table only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import NotFound
from tenantry.ids import ApprovalId, RunId, TenantId
from tenantry.jsonutil import digest

Q = load(__package__, "approvals_queries.sql")

NOT_FOUND = "No approval with this id."


@dataclass(frozen=True, slots=True)
class ApprovalView:
    """An approval as the API and console show it: the one call it covers, and its decision."""

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


async def is_approved(
    db: Database, tenant: TenantId, key: str, arguments: dict[str, Any]
) -> bool:
    """An approved row for this very key, over these very arguments."""
    async with db.tenant_tx(tenant) as conn:
        sha = await conn.fetchval(Q.approved_call, tenant.value, key)
    return sha is not None and bytes(sha) == digest(arguments)


async def view(conn: Connection, tenant: TenantId, approval: ApprovalId) -> ApprovalView | None:
    row = await conn.fetchrow(Q.get_approval, tenant.value, approval.uuid)
    return None if row is None else ApprovalView.from_row(row)


async def get(db: Database, tenant: TenantId, approval: ApprovalId) -> ApprovalView:
    async with db.tenant_tx(tenant) as conn:
        found = await view(conn, tenant, approval)
    if found is None:
        raise NotFound(NOT_FOUND)
    return found


async def list_approvals(
    db: Database, tenant: TenantId, *, status: str | None, before: ApprovalId | None, limit: int
) -> list[ApprovalView]:
    async with db.tenant_tx(tenant) as conn:
        rows = await conn.fetch(Q.list_approvals, tenant.value, status,
                                before.uuid if before else None, limit)
    return [ApprovalView.from_row(r) for r in rows]
