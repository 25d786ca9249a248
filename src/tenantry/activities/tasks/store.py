"""``ActivityStore``: tenants' activities through the library (ADR 0013).

Publish an immutable version (``publish``), enqueue tasks of it (``enqueue`` answers the
store's admission values), read a task (``get``), list activities and tasks
(``activities``, ``tasks``), read a task's attempt log (``attempts``), requeue a dead letter
(``requeue``) and cancel a task (``cancel``).
A task is a run of kind ``'activity'`` pinned to its version's agent version, so admission,
the fair claim and the event log are the runs'; the dispatcher (``dispatcher.py``) runs
its attempts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from tenantry import errors
from tenantry.activities.code import versions
from tenantry.activities.code.attempt import MAX_INPUT_BYTES
from tenantry.activities.code.bundle import Bundle
from tenantry.activities.code.versions import ActivitySettings, ActivityVersion
from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound, ValidationFailed
from tenantry.ids import RunId, TenantId
from tenantry.runs import activity_calls, log
from tenantry.runs.activity_step import activity_request
from tenantry.runs.events import (
    ActivityAttempted,
    ActivityStarted,
    CancelRequested,
    RunCancelled,
    RunResumed,
    RunStatus,
)
from tenantry.runs.service import create_run
from tenantry.sandbox.egress import EgressRefusal
from tenantry.scheduler.admission import CellCapacity
from tenantry.scheduler.shedding import CellLoad, ShedThresholds
from tenantry.store.results import Admitted, EnqueueResult, refusal
from tenantry.store.values import PRIORITIES, check_json, check_name
from tenantry.store.workflow import DEFAULT_MAX_QUEUED_RUNS

Q = load(__package__)

NOT_FOUND = "No activity task with this id."
#: What a requeue writes: attempts and sandbox deaths are counted after the last one.
REQUEUED_AFTER = "dead_letter"
MAX_ACTIVITY_SLOTS = 100_000


@dataclass(frozen=True, slots=True)
class ActivityTask:
    """A task as stored now. ``attempts``: every attempt in its log; ``last_error`` the
    last attempt's error; ``dead_lettered``: its attempts killed their sandbox
    ``max_sandbox_deaths`` times — it is never dispatched again until ``requeue`` (its
    status is ``waiting`` meanwhile, and ``error`` says why)."""

    task_id: RunId
    tenant: TenantId
    name: str
    version: int
    status: RunStatus
    input: Any
    result: Any
    error: Any
    attempts: int
    last_error: str | None
    dead_lettered: bool
    created_at: datetime
    finished_at: datetime | None
    #: A cancel was asked while an attempt ran: no further attempt starts (ADR 0013).
    cancel_requested: bool = False
    #: Egress attempts the proxy refused, over all its attempts (each attempt says which).
    egress_refused: int = 0


@dataclass(frozen=True, slots=True)
class ActivitySummary:
    """One activity in a list: its latest version and when versions 1 and latest were
    published."""

    name: str
    latest_version: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Attempt:
    """One ``ActivityAttempted`` of a task's log, as the attempt log shows it.
    ``egress_refused``: the first egress attempts the proxy refused during it (what the
    code asked for, and why), ``egress_refused_more`` how many more, and all of them
    counted by reason code."""

    seq: int
    attempt: int
    status: str
    error: str | None
    exit_code: int | None
    killed_sandbox: bool
    stdout: str
    stderr: str
    duration_ms: float
    at: datetime
    egress_refused: tuple[EgressRefusal, ...] = ()
    egress_refused_more: int = 0
    egress_refused_by_reason: dict[str, int] = field(default_factory=dict)


class ActivityStore:
    def __init__(self, db: Database, *,
                 max_queued_runs: int | None = DEFAULT_MAX_QUEUED_RUNS,
                 cell: CellCapacity | None = None) -> None:
        """``cell``: an admission view to share (the API's, from its settings); without
        it, one derived from ``max_queued_runs`` (None: no cell-wide shedding)."""
        self.db = db
        self._cell = cell if cell is not None else None if max_queued_runs is None \
            else CellCapacity(CellLoad(db, ShedThresholds.derive(max_queued_runs)))

    async def publish(self, tenant: TenantId, name: str, bundle: Bundle,
                      settings: ActivitySettings | None = None) -> ActivityVersion:
        """The activity's next version (1 creates it). A secret name the tenant does not
        hold, or an internal egress entry, is a ``ValidationFailed``; nothing is written."""
        check_name(name, "name")
        return await versions.publish(self.db, tenant, name, bundle,
                                      settings or ActivitySettings())

    async def version(self, tenant: TenantId, name: str,
                      version: int | None = None) -> ActivityVersion:
        return await versions.get(self.db, tenant, name, version)

    async def set_activity_slots(self, tenant: TenantId, slots: int) -> int:
        """The tenant's cap on concurrent attempts (``max_activity_slots``, default 2)."""
        if isinstance(slots, bool) or not isinstance(slots, int) \
                or not 1 <= slots <= MAX_ACTIVITY_SLOTS:
            raise ValidationFailed(f"max_activity_slots must be an integer from 1 to "
                                   f"{MAX_ACTIVITY_SLOTS}", field="max_activity_slots")
        async with self.db.tenant_tx(tenant) as conn:
            stored = await conn.fetchval(Q.set_activity_slots, tenant.value, slots)
        if stored is None:
            raise NotFound("No tenant with this id.")
        return int(stored)

    async def enqueue(self, tenant: TenantId, name: str, input: Any = None, *,
                      version: int | None = None, idempotency_key: str | None = None,
                      priority: str = "interactive") -> EnqueueResult:
        """Queue a task of the version (the latest when None, pinned now): ``Admitted``,
        or the admission refusal as a value. The same ``idempotency_key`` answers the first
        task; with a different task it is a ``Conflict``."""
        if idempotency_key is not None and not 1 <= len(idempotency_key) <= 255:
            raise ValidationFailed("idempotency_key must be 1-255 characters",
                                   field="idempotency_key")
        if priority not in PRIORITIES:
            raise ValidationFailed(f"priority must be one of {PRIORITIES}", field="priority")
        if input is None:
            input = {}
        check_json(input, "input", MAX_INPUT_BYTES)
        found = await versions.get(self.db, tenant, name, version)
        request = activity_request(found, input, idempotency_key=idempotency_key,
                                   priority=priority)
        try:
            created = await create_run(self.db, tenant, request, cell=self._cell,
                                       kind="activity")
        except (errors.QuotaExceeded, errors.BudgetExhausted, errors.Overloaded) as exc:
            return refusal(exc)
        return Admitted(created.run_id, created.status, created.created)

    async def get(self, tenant: TenantId, task_id: RunId) -> ActivityTask:
        async with self.db.tenant_tx(tenant) as conn:
            row = await task_row(conn, tenant, task_id)
        if row is None:
            raise NotFound(NOT_FOUND)
        return _task(tenant, row)

    async def activities(self, tenant: TenantId, *, after: str | None = None,
                         limit: int = 50) -> list[ActivitySummary]:
        """By name; ``after``: the last name of the previous page."""
        async with self.db.tenant_tx(tenant) as conn:
            rows = await conn.fetch(Q.list_activities, tenant.value, after, limit)
        return [ActivitySummary(r["name"], r["latest_version"], r["created_at"],
                                r["updated_at"]) for r in rows]

    async def tasks(self, tenant: TenantId, *, before: RunId | None = None,
                    status: RunStatus | None = None, dead_lettered: bool | None = None,
                    activity: str | None = None, limit: int = 50) -> list[ActivityTask]:
        """Newest first; ``before``: the last task id of the previous page. Filters left
        None do not filter; ``dead_lettered=False`` leaves dead letters out."""
        async with self.db.tenant_tx(tenant) as conn:
            rows = await conn.fetch(
                Q.list_tasks, tenant.value, before.uuid if before else None,
                status.value if status else None, dead_lettered, activity,
                ActivityAttempted.TYPE.value, limit)
        return [_task(tenant, r) for r in rows]

    async def attempts(self, tenant: TenantId, task_id: RunId, *, after: int = 0,
                       limit: int = 50) -> list[Attempt]:
        """The task's attempts in order, after log seq ``after`` (the previous page's
        last ``seq``). Another tenant's task, or none, is ``NotFound``."""
        async with self.db.tenant_tx(tenant) as conn:
            if await conn.fetchval(Q.task_exists, tenant.value, task_id.uuid) is None:
                raise NotFound(NOT_FOUND)
            rows = await conn.fetch(Q.attempts, tenant.value, task_id.uuid,
                                    ActivityAttempted.TYPE.value, after, limit)
        return [_attempt(r["seq"], r["data"], r["created_at"]) for r in rows]

    async def cancel(self, tenant: TenantId, task_id: RunId) -> ActivityTask:
        """Cancel a task. One no dispatcher holds (queued, waiting for its backoff, or
        dead-lettered) ends ``cancelled`` at once. A running one keeps its attempt (it is
        not killed mid-step): the cancel is recorded, no further attempt starts, and the
        dispatcher ends it ``cancelled`` — unless that attempt completes, whose result is
        kept. Asking again while it runs changes nothing; an ended task is a ``Conflict``;
        another tenant's is ``NotFound``."""
        async with self.db.tenant_tx(tenant) as conn:
            row = await conn.fetchrow(Q.lock_for_cancel, tenant.value, task_id.uuid)
            if row is None:
                raise NotFound(NOT_FOUND)
            status = RunStatus(row["status"])
            if status.terminal:
                raise Conflict(f"The task already ended as {status.value}.",
                               task_status=status.value)
            if not row["cancel_requested"]:
                await log.append(conn, tenant, task_id, CancelRequested(), epoch=None)
                await conn.execute(Q.mark_cancel_requested, tenant.value, task_id.uuid)
            if status is not RunStatus.RUNNING:
                await log.append(conn, tenant, task_id, RunCancelled("cancel_requested"),
                                 epoch=None)
                # A tool call's task: the calling run hears of it now (ADR 0015), before
                # the task's status changes (the lock order of activity_calls).
                await activity_calls.task_ended(conn, tenant, task_id, "cancelled")
                await conn.execute(Q.cancel_unheld, tenant.value, task_id.uuid)
        return await self.get(tenant, task_id)

    async def requeue(self, tenant: TenantId, task_id: RunId) -> None:
        """Send a dead-lettered task back to the queue with a fresh count of attempts and
        sandbox deaths. Anything else is a ``Conflict``; another tenant's is ``NotFound``."""
        async with self.db.tenant_tx(tenant) as conn:
            row = await conn.fetchrow(Q.lock_dead_letter, tenant.value, task_id.uuid)
            if row is None:
                raise NotFound(NOT_FOUND)
            if not (row["status"] == RunStatus.WAITING.value and row["dead_lettered"]):
                raise Conflict(f"Only a dead-lettered task is requeued; this one is "
                               f"{row['status']}.", task_status=row["status"])
            await log.append(conn, tenant, task_id, RunResumed(REQUEUED_AFTER), epoch=None)
            await conn.execute(Q.requeue_activity, tenant.value, task_id.uuid)


async def task_row(conn: Connection, tenant: TenantId, task_id: RunId) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await conn.fetchrow(
        Q.activity_task, tenant.value, task_id.uuid, ActivityAttempted.TYPE.value,
        RunResumed.TYPE.value, ActivityStarted.TYPE.value)
    return row


def _attempt(seq: int, data: dict[str, Any], at: datetime) -> Attempt:
    shown = tuple(EgressRefusal(str(r["host"]), int(r["port"]), str(r["reason_code"]))
                  for r in data.get("egress_refused") or ())
    return Attempt(seq=seq, attempt=data["attempt"], status=data["status"],
                   error=data.get("error"), exit_code=data.get("exit_code"),
                   killed_sandbox=bool(data.get("killed_sandbox")),
                   stdout=data.get("stdout", ""), stderr=data.get("stderr", ""),
                   duration_ms=float(data.get("duration_ms", 0.0)), at=at,
                   egress_refused=shown,
                   egress_refused_more=int(data.get("egress_refused_count", 0)) - len(shown),
                   egress_refused_by_reason=dict(data.get("egress_refused_by_reason") or {}))


def _task(tenant: TenantId, row: asyncpg.Record) -> ActivityTask:
    error = row["error"]
    return ActivityTask(
        task_id=RunId(row["run_id"]), tenant=tenant, name=row["name"],
        version=row["agent_version"], status=RunStatus(row["status"]), input=row["input"],
        result=row["answer"], error=error, attempts=row["attempts"],
        last_error=row["last_error"], dead_lettered=is_dead_letter(row["status"], error),
        created_at=row["created_at"], finished_at=row["finished_at"],
        cancel_requested=row["cancel_requested"], egress_refused=int(row["egress_refused"]))


def is_dead_letter(status: str, error: Any) -> bool:
    return status == RunStatus.WAITING.value and isinstance(error, dict) \
        and error.get("dead_lettered") is True
