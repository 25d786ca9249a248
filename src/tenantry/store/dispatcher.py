"""The activity dispatcher (ADR 0013, DESIGN §11): claims activity tasks fairly under each
tenant's ``max_activity_slots``, runs one attempt of each in a fresh sandbox, and records
what happened in the task's log under the lease's epoch.

For each task: the version's scoped secrets only, fetched from the vault for that tenant;
attempt number = the attempts in the log + 1 (the guest's key stays ``"{task}:{activity}"``);
a heartbeat that renews the lease and raises ``LeaseLost`` when another holder has it (the
attempt ends, its sandbox is destroyed, nothing is written). Then, in one fenced
transaction, ``ActivityAttempted`` and the decision: completed → finished with the result;
a kill or crash that makes ``max_sandbox_deaths`` → dead-lettered (status ``waiting`` with
``error.dead_lettered``: no claim takes it until ``ActivityStore.requeue``); retryable →
back to the queue after the backoff, unless it made ``max_attempts`` → failed; failed → the
tenant's error (``ours: false``).

It lives in ``store`` beside ``ActivityStore``: it writes the runs' log and leases, which
sit above ``activities`` in the layers. A tenant's failure never ends the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from tenantry.activities import versions
from tenantry.activities.attempt import AttemptOutcome, AttemptRequest, run_attempt
from tenantry.activities.versions import ActivityVersion
from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.errors import LeaseLost, NotFound
from tenantry.ids import AgentId, RunId, TenantId
from tenantry.runs import lease as run_leases
from tenantry.runs import log
from tenantry.runs.events import (
    ActivityAttempted,
    Payload,
    RunFailed,
    RunFinished,
    RunParked,
    RunStatus,
)
from tenantry.runs.lease import Lease
from tenantry.sandbox import Limits, SandboxDriver
from tenantry.store.activities import task_row
from tenantry.vault import Vault

logger = logging.getLogger(__name__)
Q = load(__package__)

#: The step's output kept in the log per stream; the attempt itself caps it at 64 KiB.
LOG_OUTPUT_CHARS = 2048
MAX_ERROR_CHARS = 1000
MAX_BACKOFF_S = 3600.0
#: After a failure of ours (the database, the vault), the task waits this long.
OURS_RETRY_S = 5.0


class Dispatcher:
    """``start()`` the loop, ``await stop()`` it. ``slots`` bounds the attempts of this
    process (every tenant); each tenant's ``max_activity_slots`` bounds its own across all
    dispatchers (the claim counts them)."""

    def __init__(self, db: Database, vault: Vault, driver: SandboxDriver, *,
                 worker_id: str | None = None, slots: int = 4, claim_batch: int = 4,
                 lease_seconds: float = 30.0, poll_seconds: float = 0.5,
                 heartbeat_every: float | None = None, limits: Limits | None = None) -> None:
        self.db = db
        self.vault = vault
        self.driver = driver
        self.worker_id = worker_id or run_leases.worker_id("activities")
        self.slots = slots
        self._batch = claim_batch
        self._lease_seconds = lease_seconds
        self._poll = poll_seconds
        self._every = heartbeat_every or max(0.1, min(5.0, lease_seconds / 3))
        self._limits = limits or Limits()
        self._active: dict[asyncio.Task[None], Lease] = {}
        self._stop = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        #: How each lease ended here ("completed", "retried", "failed", "dead_lettered",
        #: "lease_lost", "error"): what an operator's metrics (and the tests) read.
        self.outcomes: Counter[str] = Counter()

    def start(self) -> None:
        if self._loop is None:
            self._stop.clear()
            self._loop = asyncio.create_task(self._run(), name="activity-dispatcher")

    async def stop(self) -> None:
        """Stop claiming, cancel attempts in flight (their sandboxes are destroyed) and
        give their tasks back to the queue: an attempt cut short by us is not counted."""
        self._stop.set()
        if self._loop is not None:
            await self._loop
            self._loop = None

    async def _run(self) -> None:
        try:
            while not self._stop.is_set():
                free = self.slots - len(self._active)
                claimed = 0
                if free > 0:
                    try:
                        claimed = await self._claim(min(free, self._batch))
                    except Exception:  # the database: try again after the poll
                        logger.exception("activity claim failed")
                if claimed and claimed == min(free, self._batch):
                    continue  # more may be queued: claim again at once
                waiting: set[asyncio.Future[Any]] = {asyncio.ensure_future(self._stop.wait())}
                waiting.update(self._active)
                await asyncio.wait(waiting, timeout=self._poll,
                                             return_when=asyncio.FIRST_COMPLETED)
                for future in waiting:
                    if future not in self._active and not future.done():
                        future.cancel()
        finally:
            await self._drain()

    async def _drain(self) -> None:
        attempts = dict(self._active)
        for task in attempts:
            task.cancel()
        for task, lease in attempts.items():
            with contextlib.suppress(BaseException):
                await task
            with contextlib.suppress(Exception):
                await run_leases.release(self.db, lease)

    async def _claim(self, batch: int) -> int:
        async with self.db.unscoped() as conn:
            rows = await conn.fetch(Q.claim_activities, self.worker_id, batch,
                                    float(self._lease_seconds))
        for r in rows:
            lease = Lease(TenantId(r["tenant_id"]), RunId(r["run_id"]), r["lease_epoch"])
            task = asyncio.create_task(self._guarded(lease), name=f"activity-{lease.run}")
            self._active[task] = lease
            task.add_done_callback(self._active.pop)
        return len(rows)

    async def _guarded(self, lease: Lease) -> None:
        destroying: list[asyncio.Future[None]] = []  # the attempt's sandbox, once it ends
        try:
            self.outcomes[await self._dispatch(lease, destroying)] += 1
        except LeaseLost:
            logger.info("activity lease lost", extra={"run_id": str(lease.run)})
            await _gone(destroying)  # nothing was recorded: counted once the sandbox is gone
            self.outcomes["lease_lost"] += 1
        except asyncio.CancelledError:
            raise
        except Exception:
            # Ours (the database, the vault): the task goes back after a pause, uncounted.
            logger.exception("activity dispatch failed", extra={"run_id": str(lease.run)})
            await _gone(destroying)
            self.outcomes["error"] += 1
            with contextlib.suppress(Exception):
                await run_leases.release(self.db, lease,
                                         datetime.now(UTC) + timedelta(seconds=OURS_RETRY_S))
        finally:
            await _gone(destroying)  # the slot is free once the sandbox is gone

    async def _dispatch(self, lease: Lease, destroying: list[asyncio.Future[None]]) -> str:
        async with self.db.tenant_tx(lease.tenant) as conn:  # the task and its version
            row = await task_row(conn, lease.tenant, lease.run)
            if row is None or row["lease_epoch"] != lease.epoch:
                raise LeaseLost("the task's lease moved on before its attempt")
            version = await versions.of_agent(conn, lease.tenant, AgentId(row["agent_id"]),
                                              row["agent_version"])
        try:
            secrets = {name: await self.vault.get(lease.tenant, name)
                       for name in version.settings.secrets}
        except NotFound as exc:  # deleted since the version was published
            return await self._fail_early(lease, f"missing_secret: {exc.detail}")
        try:
            request = self._request(lease, version, row, secrets)
        except ValueError as exc:
            return await self._fail_early(lease, f"invalid_request: {exc}")

        async def heartbeat() -> None:
            lost = await run_leases.renew(self.db, self.worker_id, [lease],
                                          float(self._lease_seconds))
            if lost:
                raise LeaseLost("another dispatcher holds this task now")

        # The sandbox is destroyed while the outcome is recorded (off the attempt's path);
        # _guarded waits for it before the slot is free, on every path.
        outcome = await run_attempt(self.driver, request, heartbeat=heartbeat,
                                    heartbeat_every=self._every, reap=destroying.append)
        return await self._record(lease, version, outcome, request.attempt,
                                  row["attempts_since_requeue"] + 1,
                                  row["deaths_since_requeue"] + int(outcome.killed_sandbox))

    def _request(self, lease: Lease, version: ActivityVersion, row: Any,
                 secrets: dict[str, str]) -> AttemptRequest:
        settings = version.settings
        return AttemptRequest(
            tenant=lease.tenant, task_id=str(lease.run), attempt=row["attempts"] + 1,
            activity=version.name, version=version.version, bundle=version.bundle,
            input=row["input"], timeout_s=settings.timeout_s, limits=self._limits,
            secrets=secrets, heartbeat_timeout_s=settings.heartbeat_timeout_s,
            egress=settings.egress, retryable_exit_codes=settings.retryable_exit_codes)

    async def _record(self, lease: Lease, version: ActivityVersion, outcome: AttemptOutcome,
                      attempt: int, attempts: int, deaths: int) -> str:
        settings = version.settings
        error = None if outcome.error is None else outcome.error[:MAX_ERROR_CHARS]
        attempted = ActivityAttempted(
            attempt=attempt, status=outcome.status, error=error, exit_code=outcome.exit_code,
            killed_sandbox=outcome.killed_sandbox, stdout=outcome.stdout[:LOG_OUTPUT_CHARS],
            stderr=outcome.stderr[:LOG_OUTPUT_CHARS], duration_ms=outcome.duration_ms,
            sandbox_id=outcome.sandbox_id)
        stored: dict[str, Any] = {"message": error or "", "ours": False, "attempts": attempts}
        async with self._fenced(lease) as conn:
            await log.append(conn, lease.tenant, lease.run, attempted, epoch=lease.epoch)
            if outcome.status == "completed":
                await self._end(conn, lease, RunFinished(outcome.result), RunStatus.FINISHED,
                                answer=outcome.result)
                return "completed"
            if outcome.killed_sandbox and deaths >= settings.max_sandbox_deaths:
                stored.update(dead_lettered=True, sandbox_deaths=deaths,
                              message=f"dead_lettered: {deaths} attempts killed their "
                                      f"sandbox (last: {error})")
                await log.append(conn, lease.tenant, lease.run, RunParked("dead_lettered"),
                                 epoch=lease.epoch)
                await conn.execute(Q.dead_letter_activity, lease.tenant.value,
                                   lease.run.uuid, lease.epoch, stored)
                return "dead_lettered"
            if outcome.status == "retryable" and attempts < settings.max_attempts:
                delay = min(MAX_BACKOFF_S, settings.backoff_s * 2 ** (attempts - 1))
                at = datetime.now(UTC) + timedelta(seconds=delay) if delay else None
                await conn.execute(Q.retry_activity, lease.tenant.value, lease.run.uuid,
                                   lease.epoch, at, stored)
                return "retried"
            if outcome.status == "retryable":
                stored["message"] = f"{error} (after {attempts} attempts)"
            await self._end(conn, lease, RunFailed(stored["message"], ours=False,
                                                   details={"attempts": attempts}),
                            RunStatus.FAILED, error=stored)
            return "failed"

    async def _fail_early(self, lease: Lease, message: str) -> str:
        stored = {"message": message, "ours": False}
        async with self._fenced(lease) as conn:
            await self._end(conn, lease, RunFailed(message, ours=False), RunStatus.FAILED,
                            error=stored)
        return "failed"

    @contextlib.asynccontextmanager
    async def _fenced(self, lease: Lease) -> Any:
        async with self.db.tenant_tx(lease.tenant) as conn:
            if await conn.fetchval(Q.lock_leased_activity, lease.tenant.value, lease.run.uuid,
                                   lease.epoch) is None:
                raise LeaseLost("This lease is no longer the task's; nothing was written.")
            yield conn

    async def _end(self, conn: Any, lease: Lease, event: Payload, status: RunStatus, *,
                   answer: Any = None, error: Any = None) -> None:
        await log.append(conn, lease.tenant, lease.run, event, epoch=lease.epoch)
        done = await conn.execute(Q.end_activity, lease.tenant.value, lease.run.uuid,
                                  lease.epoch, status.value, answer, error)
        assert done.endswith(" 1"), "the row is locked under this epoch"


async def _gone(destroying: list[asyncio.Future[None]]) -> None:
    """Wait for the attempt's sandbox to be destroyed (shielded: it finishes whatever
    happens to the waiter)."""
    for destroy in destroying:
        await asyncio.shield(destroy)
