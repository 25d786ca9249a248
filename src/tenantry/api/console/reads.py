"""What the console pages read: one or two statements per page, every page bounded."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import asyncpg

from tenantry.api.console import find
from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.ids import AgentId, ApprovalId, RunId, TenantId
from tenantry.retention.policy import DEFAULT_RUNS_DAYS
from tenantry.runs import approval_context, log
from tenantry.runs.approval_context import ApprovalContext
from tenantry.runs.events import Event
from tenantry.runs.trace import build_trace
from tenantry.scheduler.policy import TenantLoad, TenantPolicy
from tenantry.tools.oauth.connections import OAuthState

Q = load(__package__)
logger = logging.getLogger(__name__)

PAGE = 50
INBOX_TENANTS = 100  # tenants grouped on the inbox's first page, the longest waiting first
INBOX_EACH = 5  # approvals shown per tenant there; the tenant's own page shows the rest
RUN_EVENTS_SHOWN = 200  # the run page renders the latest ones; the stream brings the rest
RUN_APPROVALS_SHOWN = 20


@dataclass(frozen=True, slots=True)
class RunRow:
    tenant: TenantId
    run_id: RunId
    agent_id: AgentId
    agent_version: int
    status: str
    priority: str
    steps: int
    input_tokens: int
    output_tokens: int
    cost_micros: int
    cancel_requested: bool
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None

    @classmethod
    def from_row(cls, r: asyncpg.Record) -> RunRow:
        return cls(TenantId(r["tenant_id"]), RunId(r["run_id"]), AgentId(r["agent_id"]),
                   r["agent_version"], r["status"], r["priority"], r["steps"],
                   r["input_tokens"], r["output_tokens"], r["cost_micros"],
                   r["cancel_requested"], r["created_at"], r["updated_at"], r["finished_at"])


@dataclass(frozen=True, slots=True)
class PendingApproval:
    tenant: TenantId
    approval_id: ApprovalId
    run_id: RunId
    key: str
    tool: str
    arguments: dict[str, Any]
    requested_at: datetime
    expires_at: datetime
    context: ApprovalContext = approval_context.NONE  # agent, run input, what the model said


@dataclass(frozen=True, slots=True)
class TenantInbox:
    """One tenant's share of the inbox: how many approvals wait, since when, the first."""

    tenant: TenantId
    pending: int
    oldest: datetime
    first: list[PendingApproval]


@dataclass(frozen=True, slots=True)
class TenantRow:
    tenant: TenantId
    name: str
    plan: str
    region: str
    policy: TenantPolicy
    load: TenantLoad
    pending_approvals: int
    policy_updated_at: datetime
    # Agent versions flagged for review (agents/flags.py), most recently flagged first.
    flagged: tuple[FlaggedVersionRow, ...] = ()
    # Retention (ADR 0017): days runs are kept; tombstones' days (None: forever).
    runs_days: int = DEFAULT_RUNS_DAYS
    tombstones_days: int | None = None
    erased: bool = False
    # Of its waiting runs, those waiting for its monthly spend cap (ADR 0035).
    spend_capped: int = 0


@dataclass(frozen=True, slots=True)
class FlaggedVersionRow:
    agent_id: AgentId
    name: str
    version: int
    reason: str
    since: datetime
    refused_egress: int


@dataclass(frozen=True, slots=True)
class ToolServerRow:
    """One of a tenant's tool servers as its page shows it."""

    name: str
    url: str
    tools: int  # how many are pinned (none before an OAuth server's first connection)
    created_at: datetime
    registered_by: str  # 'operator' or 'tenant' (migration 0045)
    oauth: OAuthState | None  # None: not an OAuth server
    authorization_endpoint: str | None  # where its Connect button sends the browser
    waiting_runs: int  # the tenant's runs waiting for its connection

    @property
    def needs_authorization(self) -> bool:
        return self.oauth is not None and self.oauth.status != "connected"


async def runs_page(
    db: Database, *, tenant: TenantId | None, status: str | None, agent: AgentId | None,
    before: RunId | None, limit: int = PAGE,
) -> list[RunRow]:
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.runs_page, tenant.value if tenant else None, status,
                                agent.uuid if agent else None, before.uuid if before else None,
                                limit)
    return [RunRow.from_row(r) for r in rows]


def _pending(r: asyncpg.Record) -> PendingApproval:
    return PendingApproval(TenantId(r["tenant_id"]), ApprovalId(r["approval_id"]),
                           RunId(r["run_id"]), r["key"], r["tool"], r["arguments"],
                           r["requested_at"], r["expires_at"])


async def pending_approvals_of(
    db: Database, tenant: TenantId, *, after: ApprovalId | None, limit: int = PAGE,
    context_from: Database,
) -> list[PendingApproval]:
    """One tenant's pending approvals, oldest first (the inbox filtered by tenant);
    ``context_from``: the tenants' pool, which reads each one's context."""
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.pending_approvals_of, tenant.value,
                                after.uuid if after else None, limit)
    return await _with_context(context_from, [_pending(r) for r in rows])


async def _with_context(db: Database, shown: list[PendingApproval]) -> list[PendingApproval]:
    """``shown`` with what an approver reads besides the call, read in each tenant's own
    transaction (one statement per tenant shown, all on one connection of ``db``, the
    tenants' pool: the console's role reads no table)."""
    by_tenant: dict[TenantId, list[ApprovalId]] = {}
    for a in shown:
        by_tenant.setdefault(a.tenant, []).append(a.approval_id)
    found: dict[ApprovalId, ApprovalContext] = {}
    if by_tenant:
        async with db.unscoped() as conn:
            for tenant, ids in by_tenant.items():
                found.update(approval_context.parse(await find.in_tenant(
                    conn, tenant.value, approval_context.Q.approval_context,
                    *approval_context.arguments(ids))))
    return [replace(a, context=found.get(a.approval_id, approval_context.NONE)) for a in shown]


async def pending_by_tenant(
    db: Database, *, tenants: int = INBOX_TENANTS, each: int = INBOX_EACH,
    context_from: Database,
) -> list[TenantInbox]:
    """The inbox grouped by tenant, the longest-waiting tenant first: each tenant's count
    and its first ``each`` approvals, so no tenant's volume hides another's (each with its
    context, read through ``context_from`` as pending_approvals_of does)."""
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.pending_by_tenant, tenants, each)
    shown = iter(await _with_context(context_from, [_pending(r) for r in rows]))
    grouped: dict[str, TenantInbox] = {}
    for r in rows:
        inbox = grouped.get(r["tenant_id"])
        if inbox is None:
            inbox = grouped[r["tenant_id"]] = TenantInbox(
                TenantId(r["tenant_id"]), r["pending"], r["oldest"], [])
        inbox.first.append(next(shown))
    return list(grouped.values())  # the rows come in the tenants' order


async def tenants_page(
    db: Database, *, after: TenantId | None, limit: int = PAGE,
) -> tuple[list[TenantRow], int]:
    """A page of tenants with policy and load, and the cell's whole queue depth."""
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.tenants_page, after.value if after else None, limit)
        depth = await conn.fetchval(Q.queue_depth)
        shown = [r["tenant_id"] for r in rows]
        flagged_rows = await conn.fetch(Q.flagged_versions, shown)
        retention = {r["tenant_id"]: r for r in await conn.fetch(Q.retention, shown)}
        capped = {r["tenant_id"]: int(r["runs"])
                  for r in await conn.fetch(Q.spend_capped, shown)}
    flagged: dict[str, list[FlaggedVersionRow]] = {}
    for f in flagged_rows:
        flagged.setdefault(f["tenant_id"], []).append(FlaggedVersionRow(
            AgentId(f["agent_id"]), f["name"], f["version"], f["reason"], f["flagged_at"],
            f["refused_egress"]))
    tenants = []
    for r in rows:
        bucket = r["bucket_tokens"]
        kept = retention.get(r["tenant_id"])
        tenants.append(TenantRow(
            tenant=TenantId(r["tenant_id"]), name=r["name"], plan=r["plan"], region=r["region"],
            policy=TenantPolicy(
                weight=r["weight"], max_running=r["max_running"], max_queued=r["max_queued"],
                tokens_per_minute=r["tokens_per_minute"],
                monthly_spend_cap_micros=r["monthly_spend_cap_micros"],
                approval_ttl_seconds=r["approval_ttl_seconds"]),
            load=TenantLoad(
                queued=r["queued"], running=r["running"], waiting=r["waiting"],
                month_spend_micros=r["month_spend_micros"],
                reserved_micros=r["reserved_micros"],
                bucket_tokens=None if bucket is None else float(bucket)),
            pending_approvals=r["pending_approvals"], policy_updated_at=r["policy_updated_at"],
            flagged=tuple(flagged.get(r["tenant_id"], ())),
            runs_days=DEFAULT_RUNS_DAYS if kept is None or kept["runs_days"] is None
            else kept["runs_days"],
            tombstones_days=None if kept is None else kept["tombstones_days"],
            erased=kept is not None and kept["erased_at"] is not None,
            spend_capped=capped.get(r["tenant_id"], 0)))
    return tenants, int(depth or 0)


@dataclass(frozen=True, slots=True)
class RunDetails:
    agent_name: str | None
    events: list[Event]
    approvals: list[dict[str, Any]]
    trace: dict[str, Any] | None
    trace_note: str | None  # why there is no trace, when there is none
    tenant_name: str | None = None


async def run_details(db: Database, tenant: TenantId, run: RunId, agent: AgentId,
                      last_seq: int) -> RunDetails:
    """Everything on a run's page besides the run row, in one transaction of its tenant."""
    async with db.tenant_tx(tenant) as conn:
        events = await log.read(conn, tenant, run, after=max(0, last_seq - RUN_EVENTS_SHOWN),
                                limit=RUN_EVENTS_SHOWN)
        approvals = [dict(r) for r in await conn.fetch(Q.run_approvals, tenant.value, run.uuid,
                                                        RUN_APPROVALS_SHOWN)]
        names = {r["agent_id"]: r["name"]
                 for r in await conn.fetch(find.Q.names_in_tenant, tenant.value, [agent.uuid])}
        context = await approval_context.context_of(
            conn, tenant, [ApprovalId(a["approval_id"]) for a in approvals])
        trace, note = await _trace(conn, tenant, run)
    for a in approvals:
        approval = ApprovalId(a["approval_id"])
        a["approval_id"] = str(approval)
        # Who decided (the run page shows it beside when and the comment).
        a["decided_by"] = context.get(approval, approval_context.NONE).decided_by
    return RunDetails(names.get(agent.uuid), events, approvals, trace, note,
                      tenant_name=names.get(None))


async def _trace(conn: Connection, tenant: TenantId,
                 run: RunId) -> tuple[dict[str, Any] | None, str | None]:
    try:
        async with conn.transaction():  # a savepoint: a failed trace leaves the page intact
            trace = await build_trace(conn, tenant, run)
    except (asyncpg.PostgresError, KeyError, ValueError, TypeError):
        logger.exception("could not build the run's trace", extra={"run_id": str(run)})
        return None, "The trace could not be built (see the API log)."
    if trace is None:
        return None, "No trace for this run yet."
    return trace, None


async def event_at(db: Database, tenant: TenantId, run: RunId, seq: int) -> Event | None:
    """One event of a run's log, read in its tenant's transaction; None if there is none."""
    async with db.tenant_tx(tenant) as conn:
        found = await log.read(conn, tenant, run, after=seq - 1, limit=1)
    return found[0] if found and found[0].seq == seq else None


async def tool_servers_of(db: Database, tenant: TenantId, *, after: str | None,
                          limit: int = PAGE) -> list[ToolServerRow]:
    """A page of the tenant's tool servers by name, in the tenant's own transaction."""
    async with db.tenant_tx(tenant) as conn:
        rows = await conn.fetch(Q.tool_servers_of, tenant.value, after, limit)
    return [ToolServerRow(
        r["name"], r["url"], r["tools"], r["created_at"], r["registered_by"],
        OAuthState(r["status"], r["reason"], r["grant_type"], r["scope"], r["issuer"],
                   r["access_expires_at"], r["connected_at"]) if r["oauth"] else None,
        r["authorization_endpoint"], int(r["waiting_runs"])) for r in rows]
