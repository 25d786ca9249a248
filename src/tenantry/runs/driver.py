"""Driving one run: fold its log, decide, act, append — one step at a time, under a lease.

Every model reply and tool result is appended *before* the run acts on it (invariant 1);
every append names the lease epoch, so a worker that lost its lease writes nothing
(invariant 2); tool calls carry keys derived from the log (invariant 3). The steps live
beside this module (model_step.py, tool_step.py, waiting.py for parks and approvals,
activity_step.py, child_step.py, end_step.py): the driver finds each decision's step in
steps.py's table and hands it itself as their StepContext (step_context.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from tenantry import logs
from tenantry.agents import flags
from tenantry.agents.spec import AgentSpec
from tenantry.blobs import BlobQuotaExceeded, BlobStoreUnavailable
from tenantry.db import DATABASE_DOWN, TRANSIENT
from tenantry.db.queries import load
from tenantry.errors import LeaseLost
from tenantry.ids import AgentId
from tenantry.ledger import budget
from tenantry.ledger.tokens import TokenUsage
from tenantry.models.types import SnapshotPin
from tenantry.runs import faults, log
from tenantry.runs.decide import Decision, decide
from tenantry.runs.end_causes import BLOB_QUOTA, cause_of
from tenantry.runs.engine import Engine
from tenantry.runs.events import (
    BudgetStopped,
    Event,
    EventType,
    NewerEvent,
    Payload,
    RunCancelled,
    RunFailed,
    RunFinished,
    RunResumed,
    RunStatus,
)
from tenantry.runs.lease import Lease
from tenantry.runs.state import RunState
from tenantry.runs.steps import STEPS
from tenantry.runs.waiting import Parked
from tenantry.telemetry.worker import UNKNOWN_CLASS
from tenantry.tools.audit import AuditEntry
from tenantry.tools.stand_ins import StandIn

__all__ = ["Parked", "RunDriver"]

logger = logging.getLogger(__name__)
LEASE_OR_DATABASE: tuple[type[Exception], ...] = (LeaseLost, *DATABASE_DOWN)
#: How often one waiting run of a process asks whether the database is back (the rest wait
#: for its answer): the resumption lag after an outage or a failover is at most this.
OUTAGE_PROBE_SECONDS = 0.5
#: What tenantry_commit_step raises when the reservation it settles is not the writer's.
RESERVATION_LOST = "TR010"
Q = load(__package__)


class RunDriver:
    """One run, driven by one lease holder; the ``StepContext`` of every step it takes."""

    def __init__(self, engine: Engine, lease: Lease) -> None:
        self.engine = engine
        self.lease = lease
        self.run_id = str(lease.run)
        self.state = RunState()
        self.spec: AgentSpec | None = None
        # tool → {server, sha256} the version was published against (checked per call).
        self.tool_pins: dict[str, dict[str, str]] = {}
        # An evaluation's run: what answers its tool calls (read at its first call).
        self.stand_in: StandIn | None = None
        # model → the provider snapshot its calls ask for, on accounts of the owners that
        # reported it: the agent's held snapshots, read with the run (agents/snapshots.py);
        # a hold placed later applies from the run's next load.
        self.model_pins: dict[str, SnapshotPin] = {}
        self.region = ""
        self.agent: AgentId | None = None  # from the run row, by _load
        self.agent_version = 0
        self.tenant_class = UNKNOWN_CLASS  # the tenant's plan: the only tenant metric label
        self.basis = 0  # the last seq the current decision saw
        # True when memory is known to hold the whole log: our last append followed the
        # previous event directly and no cancel was pending, so the next step need not
        # re-read the log first. (A cancel landing just after is seen one step later.)
        self._in_sync = False

    async def drive(self) -> None:
        # Every log line of this task (driver, gateways, sandbox) names the run and tenant.
        logs.bind(run_id=self.run_id, tenant_id=self.lease.tenant.value)
        parked = False
        try:
            await self._load()
            while True:
                try:
                    while await self._step():
                        pass
                    break
                except DATABASE_DOWN as exc:
                    if not await self._resume_after_outage(exc):
                        raise
        except Parked:
            parked = True
            logger.info("run waits; its slot is free", extra={"run_id": self.run_id})
        except NewerEvent as exc:
            await self._leave_for_newer_worker(exc)
        except HandedBack:
            # The step is saved and the run queued again (migration 0031): whichever cell
            # the tenant lives in once its move ends resumes it from the log.
            logger.info("run handed back: its tenant is moving to another cell",
                        extra={"run_id": self.run_id, "tenant_id": self.lease.tenant.value})
        except LeaseLost:
            logger.info("lease lost; leaving the run to its new owner",
                        extra={"run_id": self.run_id, "tenant_id": self.lease.tenant.value})
        except DATABASE_DOWN as exc:
            # Said once per outage for the whole process. An outage that outlasted the
            # lease (or one at the first load): the run resumes from its log once its
            # lease lapses (it could not be handed back: the database is away).
            self.engine.db.outage.failed("run step", exc)
            logger.debug("database unavailable; stopping this run here: %s", exc,
                         extra={"run_id": self.run_id})
        except TRANSIENT as exc:
            # Postgres rolled the step back (a deadlock it broke): nothing of it was
            # written. Leave the run; once its lease lapses any worker resumes it from the
            # log, as after a crash — the run does not fail for it.
            logger.warning("transaction rolled back by the database; leaving the run to be "
                           "resumed: %s", exc, extra={"run_id": self.run_id})
        except BlobStoreUnavailable as exc:
            # The object store stayed away past the worker's patience while a step needed
            # a blob (a large output, the sandbox's files at a park): the step wrote
            # nothing that names it. Left, as above: resumed from its log once its lease
            # lapses, the store given that long again to come back.
            logger.warning("blob store unavailable; leaving the run to be resumed: %s",
                           exc.detail, extra={"run_id": self.run_id})
        except BlobQuotaExceeded as exc:
            # The tenant's own blob quota (its sandbox files could not be saved): its limit,
            # not our fault; the reason says what was refused and how full it is.
            logger.info("run failed: %s", exc.detail, extra={"run_id": self.run_id})
            with contextlib.suppress(*LEASE_OR_DATABASE):
                await self.end(RunFailed(exc.detail[:1000], ours=False, cause=BLOB_QUOTA))
        except Exception as exc:  # a platform fault: record it, never lose the run silently
            await self._fail_ours(exc)
        finally:
            await self._settle_sandbox(parked)

    async def _resume_after_outage(self, exc: Exception) -> bool:
        """A step failed because the database went away (a crash, a failover to the
        standby). This worker is alive and its lease still stands until it lapses, so it
        waits for the database to answer — at most a lease's length — and carries on from
        the log, as a new owner would: whether the commit in flight landed, the log says
        (a call it saved is not made again; one it did not is repeated, with its key). The
        sandbox is dropped first, as after a crash: its files may be ahead of the log.
        False: the database stayed away; the run is left for its lease to lapse."""
        engine, outage = self.engine, self.engine.db.outage
        outage.failed("run step", exc)
        logger.debug("database unavailable mid-step; waiting to resume: %s", exc,
                     extra={"run_id": self.run_id})
        waited_until = time.monotonic() + engine.settings.lease_seconds
        while await outage.until_back(self._probe, every=OUTAGE_PROBE_SECONDS,
                                      within=waited_until - time.monotonic(),
                                      failures=DATABASE_DOWN):
            try:
                if engine.sandboxes is not None:
                    await engine.sandboxes.drop(self.lease.tenant, self.lease.run)
                await self._load()  # LeaseLost if another worker took the run meanwhile
                return True
            except DATABASE_DOWN as again:
                outage.failed("run step", again)
        return False

    async def _probe(self) -> None:
        await self.engine.db.statement("SELECT 1")

    async def _settle_sandbox(self, parked: bool) -> None:
        """Ended → the sandbox and its saved files go; parked → paused, hibernated later;
        otherwise (lease lost, database down, shutdown) → destroyed unsaved: whoever drives
        the run next restores the last save."""
        sandboxes, tenant, run = self.engine.sandboxes, self.lease.tenant, self.lease.run
        if sandboxes is None:
            return
        try:
            if self.state.ended is not None:
                await sandboxes.end(tenant, run, self.state.sandbox_ref)
            elif parked:
                sandboxes.parked(tenant, run)
            else:
                await sandboxes.drop(tenant, run)
        except Exception:
            logger.exception("could not release the run's sandbox", extra={"run_id": self.run_id})

    async def _leave_for_newer_worker(self, exc: NewerEvent) -> None:
        """Hand the run back untouched (no event, no failure) for a worker that can read
        its log, and hold it off for a while (no claim loop among the old workers)."""
        lease, settings = self.lease, self.engine.settings
        logger.warning("run %s holds event %s in format %s, newer than this worker knows; "
                       "leaving it to a newer worker", self.run_id, exc.type, exc.format,
                       extra={"run_id": self.run_id})
        self.engine.metrics.runs_left_for_newer_worker.inc(self.tenant_class)
        until = datetime.now(UTC) + timedelta(seconds=settings.newer_worker_recheck_seconds)
        # Not handed back (the database is away): the lease lapses instead, as after a crash.
        with contextlib.suppress(*DATABASE_DOWN):
            async with self.engine.db.tenant_tx(lease.tenant) as conn:
                await conn.execute(Q.release_lease, lease.tenant.value, lease.run.uuid,
                                   lease.epoch, until)

    # -- steps ------------------------------------------------------------------------

    async def _load(self) -> None:
        engine, lease = self.engine, self.lease
        # Two statements, no transaction: a later writer is fenced by the epoch anyway, and
        # events appended between them (a cancel request) are simply read too.
        row = await engine.db.statement(Q.run_for_worker, lease.tenant.value, lease.run.uuid)
        if row is None or row["lease_epoch"] != lease.epoch:
            raise LeaseLost("claimed run is no longer ours")
        events = await log.read_now(engine.db, lease.tenant, lease.run, after=0,
                                    limit=1_000_000)
        self.spec = AgentSpec.from_json(row["spec"])
        self.tool_pins = row["tool_pins"]
        self.model_pins = {model: SnapshotPin(str(pin["snapshot"]), frozenset(pin["on"]))
                           for model, pin in (row["snapshot_pins"] or {}).items()}
        self.region = row["region"]
        self.agent, self.agent_version = AgentId(row["agent_id"]), row["agent_version"]
        self.tenant_class = row["plan"]
        engine.metrics.learn_class(lease.tenant.value, row["plan"])
        if len(events) == 1 and row["started_at"] is not None:  # its first claim
            engine.metrics.queue_wait.observe(
                max((row["started_at"] - row["created_at"]).total_seconds(), 0.0),
                self.tenant_class)
        self.state = RunState.fold(events, row["input"])
        self.spec = self.state.run_spec(self.spec)
        self._in_sync = True
        if events and events[-1].type == EventType.RUN_PARKED:
            # Back from waiting for a model: say so in the log (the trace shows the wait).
            self.basis = self.state.last_seq
            await self.append([RunResumed(EventType.RUN_PARKED)])

    async def _catch_up(self) -> None:
        """Events others appended since our last one (a cancel request, a decision)."""
        for event in await log.read_now(self.engine.db, self.lease.tenant, self.lease.run,
                                        after=self.state.last_seq, limit=1000):
            self.state.apply(event)

    async def _step(self) -> bool:
        assert self.spec is not None
        started = time.perf_counter()
        if not self._in_sync:
            await self._catch_up()
        self._in_sync = False
        # What this decision was based on: events that arrive while it is carried out (a
        # cancel request during a model call) come later in the log, and replay must not
        # count them as known at decision time.
        self.basis = self.state.last_seq
        decision = decide(self.state, self.spec, self.run_id)
        if decision is None:
            return False
        external_ms = await self._act(decision)
        platform_ms = (time.perf_counter() - started) * 1000 - external_ms
        self.engine.stats.record(platform_ms)
        self.engine.metrics.step_platform.observe(max(platform_ms, 0.0) / 1000,
                                                  self.tenant_class)
        return self.state.ended is None

    async def _act(self, decision: Decision) -> float:
        """Carry out one decision; return the time spent waiting on the model or a tool."""
        assert self.spec is not None
        return await STEPS[type(decision)](self, decision) or 0.0

    # -- writing ----------------------------------------------------------------------

    async def append(
        self, events: list[Payload], *, steps: int = 0,
        usage: TokenUsage | None = None, cost: int = 0, audit: AuditEntry | None = None,
        spend: tuple[budget.Reservation, budget.UsageFact] | None = None,
        sandbox: budget.SandboxFact | None = None, refused_egress: int = 0,
    ) -> None:
        """``refused_egress``: egress attempts refused during the tool call these events
        record, counted against the agent version in the same transaction (agents/flags.py)."""
        usage = usage or TokenUsage()
        lease = self.lease
        events = [dataclasses.replace(payload, basis_seq=self.basis) for payload in events]
        reservation, fact = spend if spend is not None else (None, None)
        args = self._step_args(
            events, steps=steps, usage=usage, cost=cost,
            audit=audit.to_json() if audit is not None else None,
            settle=({"reservation_id": str(reservation.reservation_id),
                     "tokens": fact.usage.total_tokens, "cost_micros": fact.cost_micros}
                    if reservation is not None and fact is not None else None),
            usage_fact=fact.to_json() if fact is not None else None)
        if sandbox is None and not refused_egress:
            row = await self._commit(args)
        else:  # the step's extras join its transaction
            async with self.engine.db.tenant_tx(lease.tenant) as conn:
                row = _committed(await conn.fetchrow(Q.commit_step, *args))
                if sandbox is not None:  # billed per sandbox second, with the call's result
                    await budget.record_sandbox(
                        conn, lease.tenant, lease.run,
                        dataclasses.replace(sandbox, seq=row["last_seq"]))
                if refused_egress and self.agent is not None:
                    await flags.count_refused_egress(
                        conn, lease.tenant, self.agent, self.agent_version, refused_egress,
                        threshold=self.engine.settings.egress_flag_threshold)
        clean = await self.absorb(_written(events, row["last_seq"]))
        self._in_sync = clean and not row["cancel_requested"]
        if row["hand_back"]:
            raise HandedBack("the tenant is moving to another cell")

    def _step_args(self, events: list[Payload], *, steps: int = 0,
                   usage: TokenUsage | None = None, cost: int = 0,
                   audit: dict[str, Any] | None = None, settle: dict[str, Any] | None = None,
                   usage_fact: dict[str, Any] | None = None,
                   terminal: dict[str, Any] | None = None) -> tuple[Any, ...]:
        """The arguments of ``tenantry_commit_step`` (migration 0029) for one step."""
        lease, usage = self.lease, usage or TokenUsage()
        slots = log.Slots.of(events)
        return (lease.tenant.value, lease.run.uuid, lease.epoch, slots.types, slots.data,
                slots.formats, slots.payloads, steps, usage.input_tokens, usage.output_tokens,
                cost, self.engine.settings.lease_seconds, audit, settle, usage_fact, terminal)

    async def _commit(self, args: tuple[Any, ...]) -> asyncpg.Record:
        """One step's writes in one statement (one round trip, nothing to reset after)."""
        try:
            return _committed(await self.engine.db.statement(Q.commit_step, *args))
        except asyncpg.PostgresError as exc:
            if exc.sqlstate == RESERVATION_LOST:
                raise LeaseLost(str(exc)) from exc
            raise

    async def end(self, payload: RunFinished | RunFailed | RunCancelled | BudgetStopped, *,
                  error: dict[str, Any] | None = None) -> None:
        """Append the terminal event and set the run row's status, answer and error from
        it (``error`` overrides the one RunFailed implies)."""
        status, answer, error = _terminal(payload, error)
        payload = dataclasses.replace(payload, basis_seq=self.basis)
        row = await self._commit(self._step_args(
            [payload], terminal={"status": status.value, "answer": answer, "error": error}))
        await self.absorb(_written([payload], row["last_seq"]))
        self.engine.stats.runs_ended += 1
        self.engine.metrics.runs_ended.inc(self.tenant_class, status.value)
        self.engine.metrics.runs_ended_by_cause.inc(self.tenant_class, cause_of(payload))

    async def absorb(self, written: list[Event]) -> bool:
        """Bring the in-memory state up to what was just committed (only after the commit:
        memory never runs ahead of the log). If someone else appended in between — the API
        recording a cancel request — read the log instead of guessing."""
        if written and written[0].seq == self.state.last_seq + 1:
            for event in written:
                self.state.apply(event)
            return True
        await self._catch_up()
        return False

    async def _fail_ours(self, exc: Exception) -> None:
        """The tenant is told a stable message and an error id; the exception (which may
        name our hosts, URLs or SQL) goes to our log under that id."""
        self.engine.stats.runs_failed_ours += 1
        error_id = faults.record("run failed in the platform", f"{type(exc).__name__}: {exc}",
                                 run_id=self.run_id, tenant_id=self.lease.tenant.value, exc=exc)
        try:
            await self.end(RunFailed(faults.PLATFORM_FAULT.format(error_id=error_id), ours=True,
                                     error_id=error_id))
        except LEASE_OR_DATABASE:
            logger.warning("could not record the platform failure", extra={"run_id": self.run_id})



def _terminal(
    payload: RunFinished | RunFailed | RunCancelled | BudgetStopped,
    error: dict[str, Any] | None,
) -> tuple[RunStatus, Any, dict[str, Any] | None]:
    """The run row's status, answer and error that a terminal event implies."""
    match payload:
        case RunFinished(answer=answer):
            return RunStatus.FINISHED, answer, error
        case RunCancelled():
            return RunStatus.CANCELLED, None, error
        case RunFailed(error=message, ours=ours, cause=cause, error_id=error_id) if error is None:
            implied: dict[str, Any] = {"message": message, "ours": ours}
            if cause is not None:
                implied["cause"] = cause
            if error_id is not None:
                implied["error_id"] = error_id
            return RunStatus.FAILED, None, implied
    return RunStatus.FAILED, None, error


class HandedBack(LeaseLost):
    """A step's commit gave the run back to the queue: its tenant is being moved. The step
    is in the log; nothing more of this owner's may be written (its epoch moved on)."""


def _committed(row: asyncpg.Record | None) -> asyncpg.Record:
    if row is None or row["last_seq"] is None:
        raise LeaseLost("the run is no longer running under this lease")
    return row


def _written(events: list[Payload], last_seq: int) -> list[Event]:
    """The events one commit wrote, in the slots that end at ``last_seq``."""
    now = datetime.now(UTC)
    first = last_seq - len(events) + 1
    return [Event.of(first + i, payload, now) for i, payload in enumerate(events)]
