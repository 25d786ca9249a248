"""``ActivityStore``: tenants' activities through the library (ADR 0013, DESIGN §11).

Publish an immutable version (``publish``), enqueue tasks of it (``enqueue`` answers the
store's admission values), read a task (``get``) and requeue a dead letter (``requeue``).
A task is a run of kind ``'activity'`` pinned to its version's agent version, so admission,
the fair claim and the event log are the runs'; the dispatcher (``store/dispatcher.py``)
runs its attempts.

It lives in ``store`` and not in ``activities`` because enqueueing creates a run
(``tenantry.runs`` sits above ``activities`` in the layers).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from tenantry import errors
from tenantry.activities import versions
from tenantry.activities.attempt import MAX_INPUT_BYTES
from tenantry.activities.bundle import Bundle
from tenantry.activities.versions import ActivitySettings, ActivityVersion
from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound, ValidationFailed
from tenantry.ids import RunId, TenantId
from tenantry.jsonutil import digest
from tenantry.runs import log
from tenantry.runs.events import ActivityAttempted, ActivityStarted, RunResumed, RunStatus
from tenantry.runs.service import RunRequest, create_run
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
        request = RunRequest(
            agent_id=found.agent_id, version=found.version, input=input, webhook_url=None,
            priority=priority, idempotency_key=idempotency_key,
            request_sha256=digest({"kind": "activity", "name": name, "version": found.version,
                                   "priority": priority, "input": input}))
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
        error = row["error"]
        return ActivityTask(
            task_id=task_id, tenant=tenant, name=row["name"], version=row["agent_version"],
            status=RunStatus(row["status"]), input=row["input"], result=row["answer"],
            error=error, attempts=row["attempts"], last_error=row["last_error"],
            dead_lettered=is_dead_letter(row["status"], error),
            created_at=row["created_at"], finished_at=row["finished_at"])

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


def is_dead_letter(status: str, error: Any) -> bool:
    return status == RunStatus.WAITING.value and isinstance(error, dict) \
        and error.get("dead_lettered") is True
