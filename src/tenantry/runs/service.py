"""Creating, reading, listing and cancelling runs. Every status change commits together with
the event that causes it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from tenantry.agents.service import NOT_FOUND as AGENT_NOT_FOUND
from tenantry.agents.service import get_version
from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound
from tenantry.ids import AgentId, RunId, TenantId
from tenantry.jsonutil import dumps
from tenantry.runs import activity_calls, log
from tenantry.runs.events import (
    ABSENT,
    AUTHORIZATION_REQUIRED,
    MONTHLY_SPEND_CAP,
    CancelRequested,
    Event,
    RunCancelled,
    RunCreated,
    RunStatus,
)
from tenantry.scheduler import admission
from tenantry.scheduler.admission import CellCapacity

Q = load(__package__)

NOT_FOUND = "No run with this id."
#: Inputs up to this size are copied into RunCreated; larger ones stay on the run row and
#: the event refers to them, keeping every event within the 8 KiB cap.
INLINE_INPUT_BYTES = 4096


@dataclass(frozen=True, slots=True)
class RunRequest:
    agent_id: AgentId
    version: int | None
    input: Any
    webhook_url: str | None
    priority: str
    idempotency_key: str | None
    request_sha256: bytes
    # The agent run whose tool call enqueued this activity task (ADR 0015), or started
    # this child run (runs/child_step.py).
    parent: RunId | None = None
    # A child run's depth and the part of its parent's budget it may spend.
    depth: int | None = None
    cost_cap_micros: int | None = None
    stream: bool = False  # stream every model call's text (ADR 0030)
    # A run of an evaluation (ADR 0034), and its candidate's model override.
    evaluation_id: str | None = None
    model_override: str | None = None


@dataclass(frozen=True, slots=True)
class Run:
    run_id: RunId
    agent_id: AgentId
    agent_version: int
    status: RunStatus
    input: Any
    answer: Any
    error: Any
    webhook_url: str | None
    priority: str
    idempotency_key: str | None
    cancel_requested: bool
    input_tokens: int
    output_tokens: int
    cost_micros: int
    steps: int
    last_seq: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    parent_run_id: RunId | None = None  # a child run's parent (runs/child_step.py)
    # Why a waiting run waits, where the run row knows: MONTHLY_SPEND_CAP (ADR 0035) or
    # AUTHORIZATION_REQUIRED (a tool server to connect again).
    waiting_reason: str | None = None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Run:
        return cls(
            run_id=RunId(row["run_id"]),
            agent_id=AgentId(row["agent_id"]),
            agent_version=row["agent_version"],
            status=RunStatus(row["status"]),
            input=row["input"],
            answer=row["answer"],
            error=row["error"],
            webhook_url=row["webhook_url"],
            priority=row["priority"],
            idempotency_key=row["idempotency_key"],
            cancel_requested=row["cancel_requested"],
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            cost_micros=row["cost_micros"],
            steps=row["steps"],
            last_seq=row["last_seq"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            finished_at=row["finished_at"],
            parent_run_id=(RunId(row["parent_run_id"]) if row["parent_run_id"] is not None
                           else None),
            waiting_reason=_waiting_reason(row),
        )


def _waiting_reason(row: asyncpg.Record) -> str | None:
    if row["status"] != RunStatus.WAITING:
        return None
    if row["waiting_cap_micros"] is not None:
        return MONTHLY_SPEND_CAP
    if row["waiting_authorization"]:
        return AUTHORIZATION_REQUIRED
    return None


@dataclass(frozen=True, slots=True)
class Created:
    run_id: RunId
    status: RunStatus
    created: bool  # False when an idempotent retry found the run made the first time


#: What drives a run: the platform's workers ('agent'), a library user's own loop ('task',
#: see tenantry.store) or the activity dispatcher ('activity', tenantry.activities.tasks).
#: All count against the same tenant policy.
RUN_KINDS = ("agent", "task", "activity")


async def create_run(
    db: Database, tenant: TenantId, req: RunRequest, *, cell: CellCapacity | None = None,
    kind: str = "agent",
) -> Created:
    """Admit the run and write its row and RunCreated event in one transaction."""
    if kind not in RUN_KINDS:
        raise ValueError(f"run kind must be one of {RUN_KINDS}, not {kind!r}")
    # Shedding (ADR 0008) looks at this run's priority; an idempotent retry of a run
    # already accepted is answered below even while its class is shed.
    overloaded = await cell.refusal(req.priority) if cell is not None else None
    async with db.tenant_tx(tenant) as conn:
        return await create_run_in(conn, db, tenant, req, kind=kind, overloaded=overloaded)


async def create_run_in(
    conn: Connection, db: Database, tenant: TenantId, req: RunRequest, *, kind: str,
    overloaded: Exception | None = None,
) -> Created:
    """``create_run`` inside the caller's transaction (a run enqueueing an activity task
    for its tool call does it in the transaction that records the call and parks it).
    ``overloaded``: the cell's refusal, raised unless this is an idempotent retry."""
    run_id = RunId.new()
    if req.idempotency_key is not None:
        # A retry is answered before resolving anything else, so it returns the same
        # run even if the agent has published a newer version since — or the tenant is
        # at its limits now.
        existing = await _existing(conn, tenant, req)
        if existing is not None:
            return existing
    if overloaded is not None:
        raise overloaded
    if req.version is None:
        # The live version and its model in one round trip (this is the API's hot path).
        live = await conn.fetchrow(Q.live_version_and_model, tenant.value, req.agent_id.uuid)
        if live is None:
            raise NotFound(AGENT_NOT_FOUND)
        version, model = live["version"], live["model"]
    else:
        pinned = await get_version(db, tenant, req.agent_id, req.version, conn)
        version, model = pinned.version, pinned.spec.model
    if kind == "agent":
        _refuse_what_no_worker_drives(req.model_override or model)
    # Last before the insert: admission locks the tenant's load row until commit, and
    # every admission of this tenant queues on it.
    await admission.admit(conn, tenant, child=req.parent is not None)
    created_at = await conn.fetchval(
        Q.insert_run, tenant.value, run_id.uuid, req.agent_id.uuid, version, req.input,
        req.idempotency_key, req.request_sha256, req.webhook_url, req.priority, kind,
        req.parent.uuid if req.parent is not None else None,
    )
    if created_at is None:
        # Another request with the same key committed between our check and insert.
        found = await _existing(conn, tenant, req)
        assert found is not None
        return found
    encoded = dumps(req.input)
    inline = len(encoded) <= INLINE_INPUT_BYTES
    created = RunCreated(
        agent_id=str(req.agent_id), version=version, priority=req.priority,
        input=req.input if inline else ABSENT,
        input_ref=None if inline else "run.input",
        input_bytes=None if inline else len(encoded),
        webhook_url=req.webhook_url or None,
        # agent runs' RunCreated stays as it was (the replay corpus)
        kind=kind if kind != "agent" else None,
        stream=req.stream, evaluation_id=req.evaluation_id, model=req.model_override,
        **_child_fields(req, kind),
    )
    await conn.execute(Q.insert_first_event, tenant.value, run_id.uuid, created.TYPE,
                       created.to_data(), created.FORMAT)
    return Created(run_id, RunStatus.QUEUED, True)


def _child_fields(req: RunRequest, kind: str) -> dict[str, Any]:
    """A child run's RunCreated says whose call started it, how deep it is and its cap."""
    if kind != "agent" or req.parent is None:
        return {}
    return {"parent_run_id": str(req.parent), "parent_key": req.idempotency_key,
            "depth": req.depth, "cost_cap_micros": req.cost_cap_micros}


#: The models of agent versions that stand for something else: an activity (its versions
#: are published through /v1/activities) or a library task type (tenantry.store).
NOT_RUNNABLE_MODELS = {"activity": "an activity: enqueue it with POST /v1/activity-tasks",
                       "task": "a library task type: enqueue it through tenantry.store"}


def _refuse_what_no_worker_drives(model: str | None) -> None:
    """An agent run of an activity or a task type would be claimed by a platform worker
    with nothing to drive: refused (409) before anything is written."""
    what = NOT_RUNNABLE_MODELS.get(model or "")
    if what is not None:
        raise not_runnable(what, model)


def not_runnable(what: str, model: str | None) -> Conflict:
    return Conflict(f"This agent is {what}, not an agent that runs.", agent_model=model)


async def _existing(conn: Connection, tenant: TenantId, req: RunRequest) -> Created | None:
    row = await conn.fetchrow(Q.run_by_idempotency_key, tenant.value, req.idempotency_key)
    if row is None:
        return None
    if row["deleted"]:
        raise key_tombstoned(RunId(row["run_id"]))
    if bytes(row["request_sha256"]) != req.request_sha256:
        raise key_reused(RunId(row["run_id"]))
    return Created(RunId(row["run_id"]), RunStatus(row["status"]), False)


def key_tombstoned(run: RunId) -> Conflict:
    return Conflict(
        "This Idempotency-Key belonged to a run that retention has deleted; a key is not "
        "reusable while the run's tombstone lives (GET /v1/tombstones/{run_id}).",
        run_id=str(run), tombstoned=True)


def key_reused(run: RunId) -> Conflict:
    return Conflict("This Idempotency-Key was already used with a different request body.",
                    run_id=str(run))


async def get_run(db: Database, tenant: TenantId, run: RunId) -> Run:
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.get_run, tenant.value, run.uuid)
    if row is None:
        raise NotFound(NOT_FOUND)
    return Run.from_row(row)


async def list_runs(
    db: Database, tenant: TenantId, *, before: RunId | None, status: RunStatus | None, limit: int
) -> list[Run]:
    """Newest first; ``before`` is the cursor (the last run id of the previous page)."""
    async with db.tenant_tx(tenant) as conn:
        rows = await conn.fetch(
            Q.list_runs, tenant.value, before.uuid if before else None,
            status.value if status else None, limit,
        )
    return [Run.from_row(r) for r in rows]


async def list_children(
    db: Database, tenant: TenantId, run: RunId, *, after: RunId | None, limit: int
) -> list[Run]:
    """The child runs ``run`` started, oldest first; 404 if ``run`` is not this tenant's."""
    async with db.tenant_tx(tenant) as conn:
        if await conn.fetchval(Q.run_exists, tenant.value, run.uuid) is None:
            raise NotFound(NOT_FOUND)
        rows = await conn.fetch(Q.list_children, tenant.value, run.uuid,
                                after.uuid if after else None, limit)
    return [Run.from_row(r) for r in rows]


async def cancel_run(db: Database, tenant: TenantId, run: RunId) -> Run:
    """Record CancelRequested. A run no worker holds (queued or waiting) ends at once; a
    running one is stopped by its worker between steps."""
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.lock_run, tenant.value, run.uuid)
        if row is None:
            raise NotFound(NOT_FOUND)
        status = RunStatus(row["status"])
        unheld = status in (RunStatus.QUEUED, RunStatus.WAITING)  # no worker holds it
        if unheld and await conn.fetchval(Q.has_live_children, tenant.value, run.uuid):
            # Its children are cancelled by a worker driving the cancel (child_step.py),
            # which repeats the cascade after a crash: the run goes back to the queue.
            unheld = False
            await conn.execute(Q.wake_to_cancel, tenant.value, run.uuid)
        if status is RunStatus.CANCELLED or (row["cancel_requested"] and not unheld
                                             and not status.terminal):
            pass  # asking twice changes nothing: its worker stops it between steps
        elif status.terminal:
            raise Conflict(f"The run already ended as {status.value}.", run_status=status.value)
        else:
            if not row["cancel_requested"]:
                await log.append(conn, tenant, run, CancelRequested(), epoch=None)
                await conn.execute(Q.mark_cancel_requested, tenant.value, run.uuid)
            if unheld:
                # A tool call's activity task: the calling run hears of it (ADR 0015),
                # before this row's status changes (the lock order of activity_calls).
                await activity_calls.task_ended(conn, tenant, run, "cancelled")
                await conn.execute(Q.close_pending_approvals, tenant.value, run.uuid)
                await log.append(conn, tenant, run, RunCancelled(reason="cancel_requested"),
                                 epoch=None)
                await conn.execute(
                    Q.set_terminal_status, tenant.value, run.uuid, RunStatus.CANCELLED.value,
                    None, None,
                )
        updated = await conn.fetchrow(Q.get_run, tenant.value, run.uuid)
    assert updated is not None  # locked above, in this transaction
    return Run.from_row(updated)


async def read_events(
    db: Database, tenant: TenantId, run: RunId, *, after: int, limit: int
) -> list[Event]:
    """Events after ``after``; 404 if the run is not this tenant's."""
    # One round trip for a stream that has news; a second only to tell "nothing new"
    # from "no such run".
    events = await log.read_now(db, tenant, run, after=after, limit=limit)
    if not events:
        async with db.tenant_tx(tenant) as conn:
            if await conn.fetchval(Q.run_exists, tenant.value, run.uuid) is None:
                raise NotFound(NOT_FOUND)
    return events
