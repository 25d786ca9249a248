"""The activity dispatcher (ADR 0013): claims activity tasks fairly under each
tenant's ``max_activity_slots``, runs one attempt of each in a fresh sandbox, and records
what happened in the task's log under the lease's epoch.

For each task: the version's scoped secrets only, fetched from the vault for that tenant
(one missing makes the attempt retryable before any sandbox: ``missing_secret``);
attempt number = the attempts in the log + 1 (the guest's key stays ``"{task}:{activity}"``);
a heartbeat that renews the lease and raises ``LeaseLost`` when another holder has it (the
attempt ends, its sandbox is destroyed, nothing is written). Then, in one fenced
transaction, ``ActivityAttempted`` and the decision (``recording.py``: finished, retried,
dead-lettered or failed). ``ActivityStarted{attempt, sandbox_id}`` is written once
the attempt's sandbox is bound, before tenant code runs: if its dispatcher dies mid-attempt,
the task's next holder (after the lease expires) records that attempt as ``abandoned`` and
numbers the next one after it.

Egress attempts the proxy refused during an attempt are taken from it when the attempt
ends and recorded with it: on its ``ActivityAttempted`` (the first 20, and counts), against
its version's review flag and in the process's counter; what no attempt records (a lost
lease, a fault of ours, a stop, stragglers) is taken once the sandbox is gone and counted
the same way (``attempt_egress.py``). Nothing stays in the proxy.

A cancel (``ActivityStore.cancel``) never kills a running attempt: it takes effect between
attempts. A task whose cancel is recorded before its attempt starts ends ``cancelled``
without one; after an attempt, a completed attempt wins (its result is kept) and any other
outcome ends the task ``cancelled`` instead of a retry, a dead letter or a failure.

A version with ``batch`` or ``warm`` settings (ADR 0014) has its tasks served by reusable
sandboxes (``code/warm.py``): after a task, the same sandbox, scrubbed, serves the
tenant's next queued task of that version (``batches.claim_next``), up to the
batch's ``max_tasks`` and ``max_seconds``; then, with ``warm``, it is kept paused for the
next claim of that tenant and version. Each task still has its own lease, attempt record,
key, input and secrets.

It sits above the engine, beside ``ActivityStore``: it writes the runs' log and leases. A
tenant's failure never ends the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from tenantry.activities.code import versions, warm
from tenantry.activities.code.attempt import (
    AttemptOutcome,
    AttemptRequest,
    run_attempt,
    run_attempt_in,
)
from tenantry.activities.code.versions import ActivitySettings, ActivityVersion
from tenantry.activities.tasks import attempt_egress, batches, recording
from tenantry.activities.tasks.attempt_egress import RefusedCounts, SandboxEgress
from tenantry.activities.tasks.recording import Recorder
from tenantry.activities.tasks.store import task_row
from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.errors import LeaseLost, NotFound
from tenantry.ids import AgentId, RunId, TenantId
from tenantry.ledger.prices import PriceBook
from tenantry.runs import lease as run_leases
from tenantry.runs import liveness, log
from tenantry.runs.events import ActivityStarted
from tenantry.runs.lease import Lease
from tenantry.sandbox import Limits, Sandbox, SandboxDriver
from tenantry.sandbox.egress import EgressProxy, TakenRefusals
from tenantry.vault import Vault

logger = logging.getLogger(__name__)
Q = load(__package__)

#: After a failure of ours (the database, the vault), the task waits this long.
OURS_RETRY_S = 5.0


@dataclass(frozen=True, slots=True)
class _Prepared:
    row: Any
    version: ActivityVersion
    request: AttemptRequest

    def egress(self, proxy: EgressProxy | None, sandbox_run: str) -> SandboxEgress:
        """Where the refusals of an attempt in the sandbox bound to ``sandbox_run`` are."""
        return SandboxEgress(proxy, self.version.tenant, sandbox_run, self.version,
                             self.row["plan"] or "unknown")


class Dispatcher:
    """``start()`` the loop, ``await stop()`` it. ``slots`` bounds the attempts of this
    process (every tenant); each tenant's ``max_activity_slots`` bounds its own across all
    dispatchers (the claim counts them)."""

    def __init__(self, db: Database, vault: Vault, driver: SandboxDriver, *,
                 worker_id: str | None = None, slots: int = 4, claim_batch: int = 4,
                 lease_seconds: float = 30.0, poll_seconds: float = 0.5,
                 heartbeat_every: float | None = None, limits: Limits | None = None,
                 warm_max: int = 32, warm_per_tenant: int = 8,
                 prices: PriceBook | None = None, session_dsn: str | None = None,
                 session_role: str | None = "tenantry_app", egress: EgressProxy | None = None,
                 egress_flag_threshold: int = 20) -> None:
        self.db = db
        self.vault = vault
        self.driver = driver
        self.worker_id = worker_id or run_leases.worker_id("activities")
        #: With ``session_dsn``, this dispatcher holds a session lock (ADR 0018): if its
        #: process dies, another dispatcher takes its tasks at its next claim instead of
        #: after the lease; it claims nothing while that connection is down. Without it,
        #: only lease expiry moves its tasks.
        self._session = (liveness.SessionConnection(
            session_dsn, self.worker_id, role=session_role,
            new_id=lambda: run_leases.worker_id("activities"))
            if session_dsn is not None else None)
        self.slots = slots
        self._batch = claim_batch
        self._lease_seconds = lease_seconds
        self._poll = poll_seconds
        self._every = heartbeat_every or max(0.1, min(5.0, lease_seconds / 3))
        self._limits = limits or Limits()
        #: Reusable sandboxes of versions with batch or warm settings (ADR 0014); at most
        #: ``warm_max`` kept here, each tenant at most its max_activity_slots and at most
        #: ``warm_per_tenant``.
        self.warm = warm.WarmSandboxes(driver, kept_max=warm_max,
                                       kept_per_tenant=warm_per_tenant)
        self._active: dict[asyncio.Task[None], Lease] = {}
        #: Sandbox destructions handed off by attempts (``reap``): ``stop()`` waits for
        #: them, so a stopped dispatcher leaves no sandbox behind, even one whose attempt
        #: was cancelled while it waited for the destroy.
        self._destroying: set[asyncio.Future[None]] = set()
        self._stop = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        #: How each lease ended here ("completed", "retried", "failed", "dead_lettered",
        #: "cancelled", "lease_lost", "error"): what an operator's metrics (and the tests)
        #: read.
        self.outcomes: Counter[str] = Counter()
        #: The proxy the driver's sandboxes reach out through (default: the driver's own):
        #: each attempt's refused egress is taken from it when the attempt ends.
        self.egress = egress if egress is not None else attempt_egress.proxy_of(driver)
        #: Refused egress attempts past which an activity version is flagged for review
        #: (TENANTRY_EGRESS_FLAG_THRESHOLD, as for agent versions).
        self.egress_flag_threshold = egress_flag_threshold
        self._recorder = Recorder(db, prices or PriceBook(db), threshold=egress_flag_threshold)
        #: Refused egress attempts of this process's attempts by (tenant class, reason),
        #: counted once recorded (the metrics read it at scrape time).
        self.egress_refused: RefusedCounts = Counter()

    def start(self) -> None:
        if self._loop is None:
            self._stop.clear()
            self._loop = asyncio.create_task(self._run(), name="activity-dispatcher")

    @property
    def alive(self) -> bool:
        """The loop is running: started and not ended (a tenant's failure never ends it)."""
        return self._loop is not None and not self._loop.done()

    async def stop(self) -> None:
        """Stop claiming, cancel attempts in flight (their sandboxes are destroyed) and
        give their tasks back to the queue. An attempt cut short after its sandbox was
        bound is recorded by the task's next holder as ``abandoned`` (retryable, not a
        sandbox death), as for a dispatcher that died."""
        self._stop.set()
        if self._loop is not None:
            await self._loop
            self._loop = None

    async def _run(self) -> None:
        try:
            while not self._stop.is_set():
                free = self.slots - len(self._active)
                claimed = 0
                if free > 0 and await self._registered():
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
            await self.warm.close()
            if self._session is not None:
                await self._session.close()

    async def _registered(self) -> bool:
        """May claim: no session is wanted, or its lock is held (under which id: a taken
        id is replaced at the first registration, before any claim)."""
        if self._session is None:
            return True
        if not await self._session.ensure():
            return False
        self.worker_id = self._session.worker
        return True

    async def _drain(self) -> None:
        attempts = dict(self._active)
        for task in attempts:
            task.cancel()
        for task, lease in attempts.items():
            with contextlib.suppress(BaseException):
                await task
            with contextlib.suppress(Exception):
                await run_leases.release(self.db, lease)
        # The attempts are done, but a cancelled one may have stopped waiting for its
        # sandbox's destruction, which goes on by itself: wait for it here.
        for destroy in list(self._destroying):
            with contextlib.suppress(Exception):
                await asyncio.shield(destroy)

    def _reaping(self, destroying: list[asyncio.Future[None]],
                 ) -> Callable[[asyncio.Future[None]], None]:
        def reap(destroy: asyncio.Future[None]) -> None:
            destroying.append(destroy)
            self._destroying.add(destroy)
            destroy.add_done_callback(self._destroying.discard)
        return reap

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
        used: list[SandboxEgress] = []  # the sandboxes its attempts ran in
        try:
            self.outcomes[await self._dispatch(lease, destroying, used)] += 1
        except LeaseLost:
            lease = self._current(lease)
            logger.info("activity lease lost", extra={"run_id": str(lease.run)})
            await _gone(destroying)  # nothing was recorded: counted once the sandbox is gone
            self.outcomes["lease_lost"] += 1
        except asyncio.CancelledError:
            raise
        except Exception:
            # Ours (the database, the vault): the task goes back after a pause, uncounted.
            lease = self._current(lease)  # a batch moves on to its next task's lease
            logger.exception("activity dispatch failed", extra={"run_id": str(lease.run)})
            await _gone(destroying)
            self.outcomes["error"] += 1
            with contextlib.suppress(Exception):
                await run_leases.release(self.db, lease,
                                         datetime.now(UTC) + timedelta(seconds=OURS_RETRY_S))
        finally:
            await _gone(destroying)  # the slot is free once the sandbox is gone
            # Gone (or paused): no refusal can be added now, so whatever is left is all.
            await attempt_egress.settle_left(self.db, used, self.egress_refused,
                                             task=self._current(lease).run,
                                             threshold=self.egress_flag_threshold)

    def _current(self, lease: Lease) -> Lease:
        task = asyncio.current_task()
        return self._active.get(task, lease) if task is not None else lease

    async def _dispatch(self, lease: Lease, destroying: list[asyncio.Future[None]],
                        used: list[SandboxEgress]) -> str:
        prepared = await self._prepare(lease)
        if isinstance(prepared, str):
            return prepared
        if prepared.version.settings.reuses_sandboxes:
            return await self._serve_reusing(lease, prepared, used)
        # A fresh sandbox is bound to the attempt: its refusals are kept under its id.
        egress = prepared.egress(self.egress, str(prepared.request.id))
        used.append(egress)
        heartbeat = self._heartbeat(lease)
        outcome = await run_attempt(
            self.driver, prepared.request, heartbeat=heartbeat, heartbeat_every=self._every,
            on_started=self._started(lease, prepared.request.attempt),
            # The sandbox is destroyed while the outcome is recorded (off the attempt's
            # path); _guarded waits for it before the slot is free, on every path.
            while_creating=heartbeat, reap=self._reaping(destroying))
        return await self._record_prepared(lease, prepared, outcome, egress)

    async def _prepare(self, lease: Lease) -> _Prepared | str:
        """The task's row, version, secrets and attempt; or how it ended early (recorded)."""
        async with self.db.tenant_tx(lease.tenant) as conn:  # the task and its version
            row = await task_row(conn, lease.tenant, lease.run)
            if row is None or row["lease_epoch"] != lease.epoch:
                raise LeaseLost("the task's lease moved on before its attempt")
            version = await versions.of_agent(conn, lease.tenant, AgentId(row["agent_id"]),
                                              row["agent_version"])
        if row["cancel_requested"]:  # asked while it was held: no attempt starts
            return await self._recorder.cancel_early(lease)
        if row["started"] is not None and row["started"] > row["attempts"]:
            # The last attempt got its sandbox and never reported: its dispatcher died or
            # stopped mid-attempt. Recorded (and decided on) before the next one is run.
            abandoned = recording.abandoned(row["started_sandbox"])
            return await self._record(lease, version, abandoned, row["started"],
                                      row["attempts_since_requeue"] + 1,
                                      row["deaths_since_requeue"])
        try:
            secrets = {name: await self.vault.get(lease.tenant, name)
                       for name in version.settings.secrets}
        except NotFound as exc:
            # Gone since the version was published or the task enqueued (deleted, or
            # mid-replacement): a retryable attempt that never started, recorded with why,
            # so the task runs once the secret is back and still ends after max_attempts.
            return await self._record(lease, version, recording.missing_secret(exc.detail),
                                      row["attempts"] + 1, row["attempts_since_requeue"] + 1,
                                      row["deaths_since_requeue"])
        try:
            request = self._request(lease, version, row, secrets)
        except ValueError as exc:
            return await self._recorder.fail_early(lease, f"invalid_request: {exc}")
        return _Prepared(row, version, request)

    def _heartbeat(self, lease: Lease) -> Callable[[], Awaitable[None]]:
        async def heartbeat() -> None:
            lost = await run_leases.renew(self.db, self.worker_id, [lease],
                                          float(self._lease_seconds))
            if lost:
                raise LeaseLost("another dispatcher holds this task now")
        return heartbeat

    def _started(self, lease: Lease, attempt: int) -> Callable[[Sandbox], Awaitable[None]]:
        """Records ``ActivityStarted`` under the lease once the attempt's sandbox is bound,
        before tenant code runs: a dispatcher that dies mid-attempt leaves it behind."""
        async def started(sandbox: Sandbox) -> None:
            async with self._recorder.fenced(lease) as conn:
                await log.append(conn, lease.tenant, lease.run,
                                 ActivityStarted(attempt, sandbox.id), epoch=lease.epoch)
        return started

    async def _record_prepared(self, lease: Lease, prepared: _Prepared,
                               outcome: AttemptOutcome, egress: SandboxEgress) -> str:
        """Record the attempt with the egress its sandbox had refused since the last take
        (the execution is over: every refusal its code was answered is there)."""
        row = prepared.row
        result = await self._record(
            lease, prepared.version, outcome, prepared.request.attempt,
            row["attempts_since_requeue"] + 1,
            row["deaths_since_requeue"] + int(outcome.killed_sandbox),
            refused=egress.take())
        egress.recorded(self.egress_refused)
        return result

    async def _serve_reusing(self, lease: Lease, prepared: _Prepared,
                             used: list[SandboxEgress]) -> str:
        """ADR 0014: one sandbox (woken, or fresh) serves this task, then — batching — the
        tenant's next queued tasks of the same version, one at a time, each under its own
        lease; then — warm — it is kept paused. Destroyed on a kill, an unclean scrub, any
        error, a lease lost, a stop. Returns the last task's outcome (earlier ones are
        counted here)."""
        version = prepared.version
        settings = version.settings
        key = warm.reuse_key(lease.tenant, version.agent_id, version.version)
        limits = dataclasses.replace(self._limits, timeout_s=settings.timeout_s)
        lived, _ = await self.warm.take(key, settings.egress, limits)
        # Its refusals are kept under its binding (a woken one's: its first attempt's id).
        egress = prepared.egress(self.egress, str(lived.sandbox.binding.run))
        used.append(egress)
        started, served, reusable = time.monotonic(), 0, False
        this = asyncio.current_task()
        try:
            while True:
                outcome = await run_attempt_in(
                    lived.sandbox, prepared.request, heartbeat=self._heartbeat(lease),
                    heartbeat_every=self._every,
                    on_started=self._started(lease, prepared.request.attempt))
                lived.tasks += 1
                served += 1
                result = await self._record_prepared(lease, prepared, outcome, egress)
                # A task that killed its sandbox ends the batch; the rest stay queued.
                if outcome.killed_sandbox or not await warm.scrub(lived.sandbox):
                    return result
                batch = settings.batch
                if batch is None or served >= batch.max_tasks or self._stop.is_set() \
                        or time.monotonic() - started >= batch.max_seconds:
                    reusable = True
                    return result
                while True:
                    following = await batches.claim_next(
                        self.db, self.worker_id, self._lease_seconds, lease.tenant,
                        version.agent_id, version.version)
                    if following is None:
                        reusable = True
                        return result
                    self.outcomes[result] += 1
                    lease = following
                    if this is not None:
                        self._active[this] = lease  # stop() releases the current one
                    next_prepared = await self._prepare(lease)
                    if not isinstance(next_prepared, str):
                        prepared = next_prepared
                        break
                    result = next_prepared  # ended early, the sandbox untouched
        finally:
            await self._after_serving(lived, lease.tenant, settings,
                                      reusable and not self._stop.is_set())

    async def _after_serving(self, lived: warm.Lived, tenant: TenantId,
                             settings: ActivitySettings, reusable: bool) -> None:
        if not reusable or settings.warm is None:
            await self.warm.discard(lived)
            return
        try:
            slots = await batches.activity_slots(self.db, tenant)
        except BaseException:  # the database, or a stop: not kept, so destroyed
            await self.warm.discard(lived)
            raise
        await self.warm.keep(lived, settings.warm.idle_seconds, slots)

    def _request(self, lease: Lease, version: ActivityVersion, row: Any,
                 secrets: dict[str, str]) -> AttemptRequest:
        settings = version.settings
        return AttemptRequest(
            tenant=lease.tenant, task_id=str(lease.run), attempt=row["attempts"] + 1,
            activity=version.name, version=version.version, bundle=version.bundle,
            input=row["input"], timeout_s=settings.timeout_s, limits=self._limits,
            secrets=secrets, heartbeat_timeout_s=settings.heartbeat_timeout_s,
            egress=settings.egress, retryable_exit_codes=settings.retryable_exit_codes,
            # A tool call's task: the guest sees the call's key (ADR 0015).
            key=row["idempotency_key"] if row["parent_run_id"] is not None else None)

    async def _record(self, lease: Lease, version: ActivityVersion, outcome: AttemptOutcome,
                      attempt: int, attempts: int, deaths: int,
                      refused: TakenRefusals | None = None) -> str:
        """Every outcome is recorded through here (benchmarks/activities.py times each)."""
        return await self._recorder.record(lease, version, outcome, attempt, attempts, deaths,
                                           refused)


async def _gone(destroying: list[asyncio.Future[None]]) -> None:
    """Wait for the attempt's sandbox to be destroyed (shielded: it finishes whatever
    happens to the waiter)."""
    for destroy in destroying:
        await asyncio.shield(destroy)
