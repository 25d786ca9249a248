"""What an attempt means for its task, written under the task's lease (ADR 0013): in one
fenced transaction, ``ActivityAttempted`` and the decision. Completed → finished with the
result; a kill or crash that makes ``max_sandbox_deaths`` → dead-lettered (status
``waiting`` with ``error.dead_lettered``: no claim takes it until ``ActivityStore.requeue``);
retryable → back to the queue after the backoff, unless it made ``max_attempts`` → failed;
failed → the tenant's error (``ours: false``). A cancel recorded while the attempt ran ends
the task ``cancelled`` instead of a retry, a dead letter or a failure; a completed attempt
still wins. Every ending tells the run that called the task as a tool, in the same
transaction (ADR 0015); a holder whose epoch moved on writes nothing (``LeaseLost``).

The dispatcher (``dispatcher.py``) runs the attempts and hands each outcome here."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

from tenantry.activities.code.attempt import AttemptOutcome
from tenantry.activities.code.versions import ActivitySettings, ActivityVersion
from tenantry.activities.tasks import attempt_egress
from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.errors import LeaseLost
from tenantry.ledger import attempts as attempt_facts
from tenantry.ledger.prices import PriceBook
from tenantry.runs import activity_calls, log
from tenantry.runs.events import (
    ActivityAttempted,
    Payload,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunParked,
    RunStatus,
)
from tenantry.runs.lease import Lease
from tenantry.sandbox.egress import TakenRefusals

Q = load(__package__)

#: The step's output kept in the log per stream; the attempt itself caps it at 64 KiB.
LOG_OUTPUT_CHARS = 2048
MAX_ERROR_CHARS = 1000
MAX_BACKOFF_S = 3600.0


class Recorder:
    """Writes attempts' outcomes and tasks' early endings, each fenced by its lease's epoch.
    ``threshold``: refused egress attempts past which a version is flagged for review."""

    def __init__(self, db: Database, prices: PriceBook, *, threshold: int) -> None:
        self.db = db
        self.prices = prices  # sandbox seconds, as tool calls pay them
        self.threshold = threshold

    async def record(self, lease: Lease, version: ActivityVersion, outcome: AttemptOutcome,
                     attempt: int, attempts: int, deaths: int,
                     refused: TakenRefusals | None = None) -> str:
        """Append ``ActivityAttempted`` (with the egress it had refused, counted against
        the version's review flag), decide, and record the attempt's usage fact: one
        transaction under the lease. ``attempts`` and ``deaths`` count since the last
        requeue, this attempt included; the answer is the decision's word."""
        settings = version.settings
        error = None if outcome.error is None else outcome.error[:MAX_ERROR_CHARS]
        quote = await self.prices.sandbox()  # before the lock: it may read the database
        sandbox_ms = round(outcome.sandbox_ms)
        attempted = ActivityAttempted(
            attempt=attempt, status=outcome.status, error=error, exit_code=outcome.exit_code,
            killed_sandbox=outcome.killed_sandbox, stdout=outcome.stdout[:LOG_OUTPUT_CHARS],
            stderr=outcome.stderr[:LOG_OUTPUT_CHARS], duration_ms=outcome.duration_ms,
            sandbox_id=outcome.sandbox_id, cpu_s=outcome.cpu_s,
            peak_memory_bytes=outcome.peak_memory_bytes, sandbox_ms=outcome.sandbox_ms,
            cost_micros=quote.cost_micros(sandbox_ms),
            **attempt_egress.event_fields(refused or TakenRefusals()))
        stored: dict[str, Any] = {"message": error or "", "ours": False, "attempts": attempts}
        async with self.fenced(lease) as conn:
            seq = await log.append(conn, lease.tenant, lease.run, attempted, epoch=lease.epoch)
            if refused is not None:  # with the attempt they happened in, once
                await attempt_egress.count_flag(conn, version, refused,
                                                threshold=self.threshold)
            ended = await self._decide(conn, lease, outcome, settings, stored, error,
                                       attempts, deaths)
            # The tenant's budget row last: a run's step locks the tenant's load row (its
            # status) before its budget row, and so must this transaction, whose status
            # changes (the task's, a woken parent's) lock the load row — in the other order
            # the two deadlocked under load (the replay gate's runs caught it).
            if outcome.backend:  # an abandoned attempt's figures died with its dispatcher
                await attempt_facts.record(conn, lease.tenant, lease.run, usage_fact(
                    seq, version, outcome, attempt, sandbox_ms, quote.version,
                    attempted.cost_micros or 0))
            return ended

    async def _decide(self, conn: Any, lease: Lease, outcome: AttemptOutcome,
                      settings: ActivitySettings, stored: dict[str, Any], error: str | None,
                      attempts: int, deaths: int) -> str:
        """What the attempt means for its task, written under the lease: its ending, a
        retry, or a dead letter; the word for it."""
        if outcome.status == "completed":
            await self._end(conn, lease, RunFinished(outcome.result), RunStatus.FINISHED,
                            answer=outcome.result)
            return "completed"
        if await conn.fetchval(Q.cancel_requested, lease.tenant.value, lease.run.uuid):
            # Cancelled while this attempt ran: no retry, no dead letter, no failure.
            await self._end(conn, lease, RunCancelled("cancel_requested"),
                            RunStatus.CANCELLED, error=stored)
            return "cancelled"
        if outcome.killed_sandbox and deaths >= settings.max_sandbox_deaths:
            stored.update(dead_lettered=True, sandbox_deaths=deaths,
                          message=f"dead_lettered: {deaths} attempts killed their "
                                  f"sandbox (last: {error})")
            await log.append(conn, lease.tenant, lease.run, RunParked("dead_lettered"),
                             epoch=lease.epoch)
            await activity_calls.task_ended(conn, lease.tenant, lease.run, "dead_lettered",
                                            error=stored)
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

    async def fail_early(self, lease: Lease, message: str) -> str:
        stored = {"message": message, "ours": False}
        async with self.fenced(lease) as conn:
            await self._end(conn, lease, RunFailed(message, ours=False), RunStatus.FAILED,
                            error=stored)
        return "failed"

    async def cancel_early(self, lease: Lease) -> str:
        async with self.fenced(lease) as conn:
            await self._end(conn, lease, RunCancelled("cancel_requested"),
                            RunStatus.CANCELLED)
        return "cancelled"

    @contextlib.asynccontextmanager
    async def fenced(self, lease: Lease) -> Any:
        async with self.db.tenant_tx(lease.tenant) as conn:
            if await conn.fetchval(Q.lock_leased_activity, lease.tenant.value, lease.run.uuid,
                                   lease.epoch) is None:
                raise LeaseLost("This lease is no longer the task's; nothing was written.")
            yield conn

    async def _end(self, conn: Any, lease: Lease, event: Payload, status: RunStatus, *,
                   answer: Any = None, error: Any = None) -> None:
        await log.append(conn, lease.tenant, lease.run, event, epoch=lease.epoch)
        # The calling run (a tool call's task) hears of it in this transaction (ADR 0015).
        await activity_calls.task_ended(conn, lease.tenant, lease.run, status.value,
                                        result=answer, error=error)
        done = await conn.execute(Q.end_activity, lease.tenant.value, lease.run.uuid,
                                  lease.epoch, status.value, answer, error)
        assert done.endswith(" 1"), "the row is locked under this epoch"


def usage_fact(seq: int, version: ActivityVersion, outcome: AttemptOutcome, attempt: int,
          sandbox_ms: int, price_version: str, cost_micros: int) -> attempt_facts.AttemptFact:
    """The attempt's usage fact (ADR 0016): every attempt that ran has one, failed or
    killed ones too; a figure its backend could not measure stays None."""
    cpu_ns = None if outcome.usage is None else outcome.usage.cpu_ns
    return attempt_facts.AttemptFact(
        seq=seq, agent=version.agent_id, agent_version=version.version, attempt=attempt,
        activity=version.name, activity_version=version.version, backend=outcome.backend,
        sandbox_ms=sandbox_ms, cpu_us=None if cpu_ns is None else cpu_ns // 1000,
        peak_memory_bytes=outcome.peak_memory_bytes, cost_micros=cost_micros,
        price_version=price_version)


def abandoned(sandbox_id: str | None) -> AttemptOutcome:
    """What an attempt whose dispatcher went away mid-attempt is recorded as: retryable
    (the tenant's code may have been fine) and counted toward ``max_attempts``, so a task
    that keeps taking its dispatchers down still ends; not a sandbox death, since no
    sandbox was seen to die of it. Its sandbox died with the dispatcher (the guardian)."""
    return AttemptOutcome(
        status="retryable", result=None, exit_code=None, stdout="", stderr="",
        error="abandoned: its dispatcher stopped or died before the attempt ended",
        duration_ms=0.0, backend="", sandbox_id=sandbox_id or "", killed_sandbox=False)


def missing_secret(detail: str) -> AttemptOutcome:
    """An attempt that could not start because a secret its version reads is not in the
    vault: retryable, counted toward ``max_attempts``; no sandbox was made, so no usage fact
    and never a sandbox death."""
    return AttemptOutcome(
        status="retryable", result=None, exit_code=None, stdout="", stderr="",
        error=f"missing_secret: {detail} The attempt did not start; it is retried.",
        duration_ms=0.0, backend="", sandbox_id="", killed_sandbox=False)


