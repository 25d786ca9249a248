"""``WorkflowStore``: Tenantry's store as a library, for platforms that keep their own loop
(docs/how-to/library.md).

A task is a run of kind ``'task'`` (see ``task_types`` for why a task type is an agent), so
it lives in the same tables as agent runs: admission counts both against the tenant's one
policy, the fair claim shares workers between tenants the same way, and every change is an
event in the run's log, committed with the status change it causes.

Fencing (invariant 2): every write under a lease — ``complete``, ``fail``, ``signals``
(consuming), ``wait``, ``release`` — first locks the task's row *if and only if* its epoch is
still the lease's and it is still running, then writes in that transaction. A holder whose
lease expired and was claimed again (epoch moved on) gets ``LeaseLost`` and has changed
nothing. A lease that expired but was not claimed again still fences correctly: nobody else
can hold that epoch, so its holder may still finish.

Tenant first: signals, reads and policy take the tenant explicitly; lease operations carry
it in the lease. Another tenant's task answers exactly like a missing one (``NotFound``).

Left to the caller: waking claimers (poll ``claim``, or LISTEN on ``tenantry_runnable``),
retry policy (``lease.epoch`` counts attempts; ``fail`` or ``release`` as you see fit).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from tenantry import errors
from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, LeaseLost, NotFound, ValidationFailed
from tenantry.ids import RunId, TenantId
from tenantry.jsonutil import digest
from tenantry.runs import lease as run_leases
from tenantry.runs import log
from tenantry.runs.events import (
    Event,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunParked,
    RunStatus,
    SignalConsumed,
    Signalled,
)
from tenantry.runs.service import RunRequest, create_run
from tenantry.scheduler import policy as scheduler_policy
from tenantry.scheduler.admission import CellCapacity
from tenantry.scheduler.shedding import CellLoad, ShedThresholds
from tenantry.store.results import Admitted, EnqueueResult, refusal
from tenantry.store.task_types import TaskType, TaskTypes
from tenantry.store.values import (
    MAX_PAYLOAD_BYTES,
    MAX_SIGNAL_BYTES,
    Signal,
    Task,
    TaskLease,
    TaskRecord,
    TenantPolicy,
    check_json,
    check_name,
)
from tenantry.tenants import service as tenants

Q = load(__package__)

NOT_FOUND = "No task with this id."
#: Bounded everything (invariant 10): claims, signal reads and event pages.
MAX_BATCH = 100
MAX_SIGNALS = 100
MAX_EVENTS = 1000
MAX_LEASE_SECONDS = 3600.0
MAX_WORKER_ID = 200
#: The platform's default for the whole cell's queue (TENANTRY_MAX_QUEUED_RUNS).
DEFAULT_MAX_QUEUED_RUNS = 100_000


class WorkflowStore:
    """Tasks, leases and signals over one Tenantry database.

    ``WorkflowStore(db)`` uses a :class:`~tenantry.db.Database` you own;
    ``async with WorkflowStore.connect(dsn) as store`` opens and closes one.
    ``max_queued_runs`` bounds the whole cell's queue (every tenant, agents and tasks):
    past it ``enqueue`` answers ``Overloaded``; None turns that check off. From 80% of it
    new ``batch`` tasks are refused already (the platform's shedding levels, ADR 0008).
    """

    def __init__(self, db: Database, *,
                 max_queued_runs: int | None = DEFAULT_MAX_QUEUED_RUNS) -> None:
        self.db = db
        self._types = TaskTypes(db)
        self._cell = None if max_queued_runs is None else CellCapacity(
            CellLoad(db, ShedThresholds.derive(max_queued_runs)))

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, dsn: str, *, max_queued_runs: int | None = DEFAULT_MAX_QUEUED_RUNS,
        min_size: int = 1, max_size: int = 10,
    ) -> AsyncIterator[WorkflowStore]:
        """A store with its own connection pool, closed on exit. The DSN's user must be
        allowed to act as the ``tenantry_app`` role (as the platform's own user is)."""
        db = await Database.connect(dsn, min_size=min_size, max_size=max_size)
        try:
            yield cls(db, max_queued_runs=max_queued_runs)
        finally:
            await db.close()

    # -- tenants ----------------------------------------------------------------------

    async def ensure_tenant(self, tenant: TenantId, *, name: str | None = None) -> None:
        """Create the tenant (with the default policy) unless it exists. Library users
        bring their own tenant ids; this is where one becomes known to the store."""
        with contextlib.suppress(Conflict):  # it exists: nothing to do
            await tenants.create_tenant(self.db, name or tenant.value, tenant_id=tenant)

    async def set_tenant_policy(self, tenant: TenantId, policy: TenantPolicy) -> TenantPolicy:
        """Set the tenant's limits (creating the tenant first if it is new). Applies to the
        next enqueue and the next claim; tasks already admitted stay admitted."""
        try:
            state = await scheduler_policy.get_policy(self.db, tenant)
        except NotFound:
            await self.ensure_tenant(tenant)
            state = await scheduler_policy.get_policy(self.db, tenant)
        stored = await scheduler_policy.set_policy(self.db, tenant,
                                                   policy.apply_to(state.policy))
        return TenantPolicy.from_scheduler(stored.policy)

    async def get_tenant_policy(self, tenant: TenantId) -> TenantPolicy:
        state = await scheduler_policy.get_policy(self.db, tenant)
        return TenantPolicy.from_scheduler(state.policy)

    # -- enqueue ----------------------------------------------------------------------

    async def register_task(self, tenant: TenantId, name: str, version: int = 1) -> TaskType:
        """Create the task type (version 1) or publish its next version ahead of time;
        ``enqueue`` does this by itself on first use."""
        task = Task.new(name, version)
        return await self._types.resolve(tenant, task.name, task.version)

    async def enqueue(self, task: Task, *, idempotency_key: str | None = None) -> EnqueueResult:
        """Store the task, queued, or say why not: ``Admitted``, ``QuotaExceeded``,
        ``BudgetExhausted`` or ``Overloaded`` — values, never raised. A refusal writes
        nothing (the task type may have been registered: that is not a task).

        With ``idempotency_key``, enqueueing the same task again answers the first one
        (``Admitted(created=False)``), even if the tenant is at its limits by then; the same
        key with a different task raises ``Conflict``."""
        if task.tenant is None:
            raise ValidationFailed("The task has no tenant: Task.with_tenant(tenant).",
                                   field="tenant")
        if idempotency_key is not None and not 1 <= len(idempotency_key) <= 255:
            raise ValidationFailed("idempotency_key must be 1-255 characters",
                                   field="idempotency_key")
        tenant = task.tenant
        task_type = await self._types.resolve(tenant, task.name, task.version)
        request = RunRequest(
            agent_id=task_type.agent_id, version=task.version, input=task.input,
            webhook_url=None, priority=task.priority, idempotency_key=idempotency_key,
            request_sha256=digest({"kind": "task", "name": task.name, "version": task.version,
                                   "priority": task.priority, "input": task.input}),
        )
        try:
            created = await create_run(self.db, tenant, request, cell=self._cell, kind="task")
        except (errors.QuotaExceeded, errors.BudgetExhausted, errors.Overloaded) as exc:
            return refusal(exc)
        return Admitted(created.run_id, created.status, created.created)

    # -- leases -----------------------------------------------------------------------

    async def claim(self, worker_id: str, batch: int = 8,
                    lease_seconds: float = 30.0) -> list[TaskLease]:
        """Up to ``batch`` tasks (1-100) for this worker, fair across tenants: each next
        task goes to the tenant using the smallest share of its weight, under its
        ``max_leases``. Tasks whose lease expired come first, under a new epoch.

        The claim commits first, then each tenant's tasks are read under that tenant's
        row-level security; if that read fails the tasks stay leased until the lease
        expires and the next claim takes them (no task is lost, one attempt is)."""
        if not isinstance(worker_id, str) or not 1 <= len(worker_id) <= MAX_WORKER_ID:
            raise ValidationFailed(f"worker_id must be 1-{MAX_WORKER_ID} characters",
                                   field="worker_id")
        if isinstance(batch, bool) or not isinstance(batch, int) \
                or not 1 <= batch <= MAX_BATCH:
            raise ValidationFailed(f"batch must be an integer from 1 to {MAX_BATCH}",
                                   field="batch")
        _check_lease_seconds(lease_seconds)
        async with self.db.unscoped() as conn:
            rows = await conn.fetch(Q.claim_tasks, worker_id, batch, float(lease_seconds))
        by_tenant: dict[str, dict[Any, int]] = defaultdict(dict)
        for r in rows:
            by_tenant[r["tenant_id"]][r["run_id"]] = r["lease_epoch"]
        # The claim has committed: read each tenant's tasks under its own RLS scope.
        loaded = await asyncio.gather(*(
            self._leased(TenantId(t), epochs, worker_id) for t, epochs in by_tenant.items()
        ))
        leases = {(x.tenant.value, x.task_id.uuid): x for group in loaded for x in group}
        keys = [(r["tenant_id"], r["run_id"]) for r in rows]
        return [leases[k] for k in keys if k in leases]  # claim order: fair order

    async def _leased(self, tenant: TenantId, epochs: dict[Any, int],
                      worker_id: str) -> list[TaskLease]:
        async with self.db.tenant_tx(tenant) as conn:
            rows = await conn.fetch(Q.leased_tasks, tenant.value, list(epochs))
        return [
            TaskLease(tenant, RunId(r["run_id"]), epochs[r["run_id"]], worker_id, r["name"],
                      r["agent_version"], r["input"])
            for r in rows
        ]

    async def renew(self, leases: list[TaskLease],
                    lease_seconds: float = 30.0) -> set[TaskLease]:
        """Extend every lease still held; return the ones that were lost (stop working on
        those: their writes would raise ``LeaseLost``)."""
        _check_lease_seconds(lease_seconds)
        by_worker: dict[str, list[TaskLease]] = defaultdict(list)
        for held in leases:
            by_worker[held.worker_id].append(held)
        lost: set[TaskLease] = set()
        for worker, group in by_worker.items():
            gone = await run_leases.renew(self.db, worker, [_run_lease(x) for x in group],
                                          float(lease_seconds))
            lost.update(x for x in group if _run_lease(x) in gone)
        return lost

    async def complete(self, lease: TaskLease, result: Any = None) -> None:
        """Finish the task with ``result`` (JSON): ``RunFinished`` and status ``finished``
        in one transaction, under the lease's epoch."""
        check_json(result, "result", MAX_PAYLOAD_BYTES)
        async with self._fenced(lease) as (conn, _):
            await log.append(conn, lease.tenant, lease.task_id, RunFinished(result),
                             epoch=lease.epoch)
            await self._end(conn, lease, RunStatus.FINISHED, answer=result)

    async def fail(self, lease: TaskLease, error: str, *, details: Any = None) -> None:
        """End the task as failed (``RunFailed{error, ours: false}``): the task's own
        failure, not the platform's. Retrying is the caller's choice: enqueue again."""
        if not isinstance(error, str) or not 1 <= len(error) <= 2000:
            raise ValidationFailed("error must be a message of 1-2000 characters",
                                   field="error")
        check_json(details, "details", MAX_PAYLOAD_BYTES)
        stored: dict[str, Any] = {"message": error, "ours": False}
        if details is not None:
            stored["details"] = details
        async with self._fenced(lease) as (conn, _):
            await log.append(conn, lease.tenant, lease.task_id,
                             RunFailed(error, ours=False, details=details), epoch=lease.epoch)
            await self._end(conn, lease, RunStatus.FAILED, error=stored)

    async def release(self, lease: TaskLease, *, delay_seconds: float = 0.0) -> None:
        """Give the task back to the queue (a worker shutting down, or a retry later):
        another claim may take it after ``delay_seconds``."""
        if not 0 <= delay_seconds <= 7 * 24 * 3600:
            raise ValidationFailed("delay_seconds must be from 0 to 7 days",
                                   field="delay_seconds")
        available_at = (datetime.now(UTC) + timedelta(seconds=delay_seconds)
                        if delay_seconds else None)
        if not await run_leases.release(self.db, _run_lease(lease), available_at):
            raise LeaseLost("This lease is no longer the task's; it was not released.")

    async def wait(self, lease: TaskLease) -> bool:
        """Give up the lease until a signal arrives (then the task is queued again and the
        next claim takes it — this is how a task waits days for a human without holding a
        worker). Returns False, keeping the lease, if signals are already waiting to be
        read: read them with ``signals`` first. A task whose cancellation was requested
        is ended as cancelled instead (False), as the platform's workers do between steps.
        """
        async with self._fenced(lease) as (conn, cancel_requested):
            if cancel_requested:
                await log.append(conn, lease.tenant, lease.task_id,
                                 RunCancelled("cancel_requested"), epoch=lease.epoch)
                await self._end(conn, lease, RunStatus.CANCELLED)
                return False
            if await self._pending(conn, lease.tenant, lease.task_id, 1):
                return False
            await log.append(conn, lease.tenant, lease.task_id,
                             RunParked("waiting_for_signal"), epoch=lease.epoch)
            await conn.execute(Q.park_task, lease.tenant.value, lease.task_id.uuid,
                               lease.epoch)
        return True

    # -- signals ----------------------------------------------------------------------

    async def signal(self, tenant: TenantId, task_id: RunId, name: str,
                     data: Any = None) -> int:
        """Append a signal to the tenant's task and return its seq. A waiting task is
        queued again in the same transaction. Another tenant's task, or an agent run,
        is ``NotFound``; a task that has ended is a ``Conflict``. Nothing is written then.
        """
        check_name(name, "signal name")
        check_json(data, "signal data", MAX_SIGNAL_BYTES)
        async with self.db.tenant_tx(tenant) as conn:
            status = await conn.fetchval(Q.lock_task, tenant.value, task_id.uuid)
            if status is None:
                raise NotFound(NOT_FOUND)
            status = RunStatus(status)
            if status.terminal:
                raise Conflict(f"The task already ended as {status.value}.",
                               task_status=status.value)
            seq = await log.append(conn, tenant, task_id, Signalled(name, data),
                                   epoch=None)
            if status is RunStatus.WAITING:
                await conn.execute(Q.wake_task, tenant.value, task_id.uuid)
        return seq

    async def signals(self, lease: TaskLease, *, limit: int = MAX_SIGNALS) -> list[Signal]:
        """Signals not yet consumed, oldest first (at most ``limit``), recorded as
        consumed (``SignalConsumed``) under the lease's epoch: each signal is handed out
        once. A stale lease raises ``LeaseLost`` and consumes nothing."""
        if not 1 <= limit <= MAX_SIGNALS:
            raise ValidationFailed(f"limit must be from 1 to {MAX_SIGNALS}", field="limit")
        async with self._fenced(lease) as (conn, _):
            pending = await self._pending(conn, lease.tenant, lease.task_id, limit)
            for signal in pending:
                await log.append(conn, lease.tenant, lease.task_id,
                                 SignalConsumed(signal.seq, signal.name), epoch=lease.epoch)
        return pending

    # -- reads ------------------------------------------------------------------------

    async def get(self, tenant: TenantId, task_id: RunId) -> TaskRecord:
        async with self.db.tenant_tx(tenant) as conn:
            row = await conn.fetchrow(Q.get_task, tenant.value, task_id.uuid)
        if row is None:
            raise NotFound(NOT_FOUND)
        return _record(tenant, row)

    async def events(self, tenant: TenantId, task_id: RunId, *, after: int = 0,
                     limit: int = 500) -> list[Event]:
        """The task's event log after seq ``after`` (at most ``limit``, 1-1000): the same
        log the HTTP API streams for runs."""
        if not 1 <= limit <= MAX_EVENTS:
            raise ValidationFailed(f"limit must be from 1 to {MAX_EVENTS}", field="limit")
        async with self.db.tenant_tx(tenant) as conn:
            if await conn.fetchval(Q.task_exists, tenant.value, task_id.uuid) is None:
                raise NotFound(NOT_FOUND)
            return await log.read(conn, tenant, task_id, after=after, limit=limit)

    # -- internals --------------------------------------------------------------------

    @asynccontextmanager
    async def _fenced(self, lease: TaskLease) -> AsyncIterator[tuple[Connection, bool]]:
        """A tenant transaction that holds the task's row lock under the lease's epoch,
        with whether a cancel was requested; ``LeaseLost`` (nothing written) if the epoch
        moved on or the task is no longer running."""
        async with self.db.tenant_tx(lease.tenant) as conn:
            row = await conn.fetchrow(Q.lock_leased_task, lease.tenant.value,
                                      lease.task_id.uuid, lease.epoch)
            if row is None:
                raise LeaseLost("This lease is no longer the task's (its epoch moved on or "
                                "the task is no longer running); nothing was written.")
            yield conn, bool(row["cancel_requested"])

    async def _end(self, conn: Connection, lease: TaskLease, status: RunStatus, *,
                   answer: Any = None, error: Any = None) -> None:
        done = await conn.execute(Q.end_task, lease.tenant.value, lease.task_id.uuid,
                                  lease.epoch, status.value, answer, error)
        assert done.endswith(" 1"), "the row is locked under this epoch"

    async def _pending(self, conn: Connection, tenant: TenantId, task: RunId,
                       limit: int) -> list[Signal]:
        rows = await conn.fetch(Q.pending_signals, tenant.value, task.uuid,
                                Signalled.TYPE.value, SignalConsumed.TYPE.value,
                                limit)
        signals = [(r, Signalled.from_data(r["data"])) for r in rows]
        return [Signal(r["seq"], sent.name, sent.data, r["created_at"]) for r, sent in signals]


def _check_lease_seconds(seconds: float) -> None:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) \
            or not 1 <= seconds <= MAX_LEASE_SECONDS:
        raise ValidationFailed(f"lease_seconds must be from 1 to {MAX_LEASE_SECONDS:g}",
                               field="lease_seconds")


def _run_lease(lease: TaskLease) -> run_leases.Lease:
    return run_leases.Lease(lease.tenant, lease.task_id, lease.epoch)


def _record(tenant: TenantId, row: asyncpg.Record) -> TaskRecord:
    return TaskRecord(
        task_id=RunId(row["run_id"]), tenant=tenant, name=row["name"],
        version=row["agent_version"], status=RunStatus(row["status"]), input=row["input"],
        result=row["answer"], error=row["error"], priority=row["priority"],
        idempotency_key=row["idempotency_key"], cancel_requested=row["cancel_requested"],
        epoch=row["lease_epoch"], last_seq=row["last_seq"],
        created_at=row["created_at"], updated_at=row["updated_at"],
        started_at=row["started_at"], finished_at=row["finished_at"],
    )
