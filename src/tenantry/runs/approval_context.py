"""What a person deciding an approval sees besides the call: the run's agent and input,
what the model said before asking for the call, and — once decided — who decided. Read
from the run's row and log, where it already is (approval_context.sql)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg

from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.ids import AgentId, ApprovalId, TenantId

Q = load(__package__, "approval_context.sql")

#: The most of the model's text shown beside a call: enough to read why it asked, bounded
#: so a list of approvals stays small.
MODEL_SAID_CHARS = 2000


@dataclass(frozen=True, slots=True)
class ApprovalContext:
    agent_id: AgentId | None  # None only if the run is gone
    agent_name: str | None
    run_input: Any
    model_said: str | None  # None: the reply said nothing before the call (or is gone)
    model_said_cut: bool  # the text went on past MODEL_SAID_CHARS
    decided_by: str | None  # "operator", "user:<id>", "key:<id>"; None while pending,
    #                         for an expiry, and for decisions recorded before it was named


NONE = ApprovalContext(None, None, None, None, False, None)


async def context_of(
    conn: Connection, tenant: TenantId, approvals: Sequence[ApprovalId],
) -> dict[ApprovalId, ApprovalContext]:
    """The context of each of ``approvals`` of ``tenant``, in the caller's transaction."""
    if not approvals:
        return {}
    return parse(await conn.fetch(Q.approval_context, tenant.value, *arguments(approvals)))


def arguments(approvals: Sequence[ApprovalId]) -> tuple[list[UUID], int]:
    """The query's arguments after the tenant's id (for a caller that runs it itself)."""
    return [a.uuid for a in approvals], MODEL_SAID_CHARS


def parse(rows: Iterable[asyncpg.Record]) -> dict[ApprovalId, ApprovalContext]:
    return {ApprovalId(r["approval_id"]): ApprovalContext(
        AgentId(r["agent_id"]) if r["agent_id"] is not None else None, r["agent_name"],
        r["run_input"], r["model_said"] or None, bool(r["model_said_cut"]), r["decided_by"])
        for r in rows}


async def contexts(
    db: Database, tenant: TenantId, approvals: Sequence[ApprovalId],
) -> dict[ApprovalId, ApprovalContext]:
    """As :func:`context_of`, in a transaction of the tenant's own."""
    if not approvals:
        return {}
    async with db.tenant_tx(tenant) as conn:
        return await context_of(conn, tenant, approvals)
