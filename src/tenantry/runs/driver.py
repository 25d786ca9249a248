"""Driving one run: fold its log, decide, act, append — one step at a time, under a lease.

Every model reply and tool result is appended *before* the run acts on it (invariant 1);
every append names the lease epoch, so a worker that lost its lease writes nothing
(invariant 2); tool calls carry keys derived from the log (invariant 3)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from tenantry import logs
from tenantry.agents.service import get_version
from tenantry.agents.spec import AgentSpec
from tenantry.db import DATABASE_DOWN, TRANSIENT, Database
from tenantry.db.queries import load
from tenantry.errors import LeaseLost
from tenantry.ids import AgentId
from tenantry.ledger import budget
from tenantry.ledger.prices import PriceBook, how_to_price
from tenantry.ledger.pricing import Quote
from tenantry.ledger.tokens import TokenUsage
from tenantry.models.accounts import wake_parked_on
from tenantry.models.errors import ModelRefused, ModelsExhausted, ModelUnavailable
from tenantry.models.types import Model, ModelRequest
from tenantry.runs import conversation, log, observe
from tenantry.runs.decide import (
    AwaitApproval,
    CallModel,
    CallTool,
    Cancel,
    Decision,
    Fail,
    Finish,
    RecordUnknown,
    RequestApproval,
    StopForBudget,
    decide,
)
from tenantry.runs.events import Event, EventType, RunStatus
from tenantry.runs.lease import Lease
from tenantry.runs.state import RunState
from tenantry.sandbox.manager import SandboxManager
from tenantry.telemetry.worker import UNKNOWN_CLASS, WorkerMetrics
from tenantry.tools import approvals
from tenantry.tools import audit as audit_log
from tenantry.tools.audit import AuditEntry
from tenantry.tools.gateway import ToolGateway

logger = logging.getLogger(__name__)
LEASE_OR_DATABASE: tuple[type[Exception], ...] = (LeaseLost, *DATABASE_DOWN)
Q = load(__package__)



class Parked(Exception):
    """The run is waiting (status ``waiting``, lease released): stop driving it."""


@dataclass(frozen=True, slots=True)
class EngineSettings:
    lease_seconds: float = 30.0
    # When no account can serve a run's model, the run parks (its slot is freed) instead of
    # failing: an outage costs time, not runs. The model gateway wakes it when an account
    # serving its model is back; failing that it is looked at again after this long,
    # doubling each time up to the maximum — which bounds how long a parked run can wait
    # after recovery when no worker remembers the outage (all restarted, ADR 0009).
    park_recheck_seconds: float = 30.0
    park_recheck_max_seconds: float = 120.0


@dataclass(slots=True)
class StepStats:
    """Platform time per step (wall time minus model and tool time), most recent first."""

    platform_ms: deque[float] = field(default_factory=lambda: deque(maxlen=100_000))
    steps: int = 0
    runs_ended: int = 0
    runs_failed_ours: int = 0

    def record(self, ms: float) -> None:
        self.platform_ms.append(ms)
        self.steps += 1


@dataclass(slots=True)
class Engine:
    """What a driver needs; built once per worker process."""

    db: Database
    model: Model
    tools: ToolGateway
    prices: PriceBook  # the operator's prices over the built-in defaults
    worker: str
    settings: EngineSettings = field(default_factory=EngineSettings)
    stats: StepStats = field(default_factory=StepStats)
    sandboxes: SandboxManager | None = None  # None: built-in code tools are unavailable
    # This process's metrics and step spans (one per process, shared by its worker loops).
    metrics: WorkerMetrics = field(default_factory=WorkerMetrics)


class RunDriver:
    def __init__(self, engine: Engine, lease: Lease) -> None:
        self.engine = engine
        self.lease = lease
        self.run_id = str(lease.run)
        self.state = RunState()
        self.spec: AgentSpec | None = None
        self.region = ""
        self.agent: AgentId | None = None  # from the run row, by _load
        self.agent_version = 0
        self.tenant_class = UNKNOWN_CLASS  # the tenant's plan: the only tenant metric label
        self._basis = 0
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
            while await self._step():
                pass
        except Parked:
            parked = True
            logger.info("run waits; its slot is free", extra={"run_id": self.run_id})
        except LeaseLost:
            logger.info("lease lost; leaving the run to its new owner",
                        extra={"run_id": self.run_id, "tenant_id": self.lease.tenant.value})
        except DATABASE_DOWN as exc:
            # Said once per outage for the whole process; the run resumes from its log
            # once its lease lapses (it could not be handed back: the database is away).
            self.engine.db.outage.failed("run step", exc)
            logger.debug("database unavailable; stopping this run here: %s", exc,
                         extra={"run_id": self.run_id})
        except TRANSIENT as exc:
            # Postgres rolled the step back (a deadlock it broke): nothing of it was
            # written. Leave the run; once its lease lapses any worker resumes it from the
            # log, as after a crash — the run does not fail for it.
            logger.warning("transaction rolled back by the database; leaving the run to be "
                           "resumed: %s", exc, extra={"run_id": self.run_id})
        except Exception as exc:  # a platform fault: record it, never lose the run silently
            logger.exception("run failed in the platform", extra={"run_id": self.run_id})
            await self._fail_ours(exc)
        finally:
            await self._settle_sandbox(parked)

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

    async def _save_sandbox(self) -> tuple[str, dict[str, Any]] | None:
        """Before the run parks: its sandbox's files to the blob store (None: no sandbox
        here). The event goes into the park's own transaction."""
        sandboxes = self.engine.sandboxes
        if sandboxes is None:
            return None
        saved = await sandboxes.save(self.lease.tenant, self.lease.run)
        if saved is None:
            return None
        return EventType.SANDBOX_SAVED, {"ref": saved.ref, "bytes": saved.bytes,
                                         "duration_ms": round(saved.duration_ms, 3),
                                         "basis_seq": self._basis}

    async def _forget_superseded(self, saved: tuple[str, dict[str, Any]] | None) -> None:
        """The previous save, once the new one is committed in the log."""
        previous = self.state.sandbox_ref
        if saved is not None and previous and previous != saved[1]["ref"]:
            assert self.engine.sandboxes is not None
            await self.engine.sandboxes.forget(self.lease.tenant, previous)

    # -- steps ------------------------------------------------------------------------

    async def _load(self) -> None:
        engine, lease = self.engine, self.lease
        async with engine.db.tenant_tx(lease.tenant) as conn:
            row = await conn.fetchrow(Q.load_for_worker, lease.tenant.value, lease.run.uuid)
            if row is None or row["lease_epoch"] != lease.epoch:
                raise LeaseLost("claimed run is no longer ours")
            version = await get_version(engine.db, lease.tenant, AgentId(row["agent_id"]),
                                        row["agent_version"], conn)
            events = await log.read(conn, lease.tenant, lease.run, after=0, limit=1_000_000)
        self.spec = version.spec
        self.region = row["region"]
        self.agent, self.agent_version = AgentId(row["agent_id"]), row["agent_version"]
        self.tenant_class = row["plan"]
        engine.metrics.learn_class(lease.tenant.value, row["plan"])
        if len(events) == 1 and row["started_at"] is not None:  # its first claim
            engine.metrics.queue_wait.observe(
                max((row["started_at"] - row["created_at"]).total_seconds(), 0.0),
                self.tenant_class)
        self.state = RunState.fold(events, row["input"])
        self._in_sync = True
        if events and events[-1].type == EventType.RUN_PARKED:
            # Back from waiting for a model: say so in the log (the trace shows the wait).
            self._basis = self.state.last_seq
            await self._append([(EventType.RUN_RESUMED, {"after": EventType.RUN_PARKED})])

    async def _catch_up(self) -> None:
        """Events others appended since our last one (a cancel request, a decision)."""
        async with self.engine.db.tenant_tx(self.lease.tenant) as conn:
            for event in await log.read(conn, self.lease.tenant, self.lease.run,
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
        self._basis = self.state.last_seq
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
        match decision:
            case CallModel():
                return await self._call_model()
            case CallTool():
                return await self._call_tool(decision)
            case RequestApproval():
                await self._request_approval(decision)
            case AwaitApproval():
                await self._park()
            case RecordUnknown():
                await self._record_unknown(decision)
            case Finish(answer=answer):
                await self._end(EventType.RUN_FINISHED, {"answer": answer},
                                RunStatus.FINISHED, answer=answer)
            case Fail(reason=reason):
                await self._end(EventType.RUN_FAILED, {"error": reason, "ours": False},
                                RunStatus.FAILED, error={"message": reason, "ours": False})
            case Cancel():
                await self._end(EventType.RUN_CANCELLED, {"reason": "cancel_requested"},
                                RunStatus.CANCELLED)
            case StopForBudget(limit=limit, used=used, maximum=maximum):
                self.engine.metrics.budget_refusals.inc(self.tenant_class, limit)
                message = f"stopped by the agent's {limit} limit ({used} of {maximum} used)"
                await self._end(
                    EventType.BUDGET_STOPPED, {"limit": limit, "used": used, "max": maximum},
                    RunStatus.FAILED,
                    error={"type": "budget_exhausted", "limit": limit, "message": message},
                )
        return 0.0

    async def _call_model(self) -> float:
        assert self.spec is not None
        engine, state, spec = self.engine, self.state, self.spec
        messages = conversation.messages(state, spec)
        tools = await engine.tools.definitions(self.lease.tenant, spec)
        request = ModelRequest(
            spec.model, tuple(messages), tuple(tools), self.run_id,
            tenant=self.lease.tenant.value, region=self.region,
            fallback_models=spec.fallback_models, account=state.account,
            previous_model=state.model or spec.model, in_flight=state.steps > 0,
        )
        quote = await self._quote(request)
        if quote is None:
            return 0.0
        reservation = await self._reserve(request, quote)
        if reservation is None:
            return 0.0
        # The gateway's rate buckets use the same estimate: the prompt is measured once.
        request = dataclasses.replace(request, estimated_tokens=reservation.tokens)
        started, began_ns = time.perf_counter(), time.time_ns()
        try:
            reply = await engine.model.complete(request)
        except ModelRefused as exc:
            await self._release(reservation)
            await self._provider_failed(f"the model provider refused: {exc.detail}")
            return (time.perf_counter() - started) * 1000
        except ModelUnavailable as exc:
            await self._release(reservation)
            await self._park_for_model(request, exc)
        waited = (time.perf_counter() - started) * 1000
        # Billed at the price in force now, for the model that answered (a fallback's own);
        # every model the request could use was priced before it was sent.
        billed = await engine.prices.quote(reply.model)
        if billed is None:
            raise RuntimeError(f"model {reply.model!r} answered but has no price")
        cost = billed.cost_micros(reply.usage)
        events: list[tuple[str, dict[str, Any]]] = []
        if state.account and reply.account != state.account:
            events.append((EventType.MODEL_REROUTED, {
                "from": state.account, "to": reply.account, "model": reply.model,
                "reason": reply.switch_reason or "the previous account did not answer"}))
        if reply.model != request.previous_model:
            events.append((EventType.MODEL_FALLBACK, {
                "from": request.previous_model, "to": reply.model,
                "reason": reply.switch_reason or "the previous model did not answer"}))
        events.append((EventType.MODEL_REPLIED, {
            "text": reply.text,
            "calls": [call.to_json() for call in reply.calls],
            "usage": reply.usage.to_json(),
            "provider": reply.provider,
            "account": reply.account,
            "model": reply.model,
            "cost_micros": cost,
            "price_version": billed.version,
            "latency_ms": round(reply.latency_ms, 3),
            # The whole gateway call: retries, backoff and other accounts included.
            "waited_ms": round(waited, 3),
            "prompt_sha256": conversation.prompt_digest(messages),
        }))
        assert self.agent is not None
        fact = budget.UsageFact(
            seq=0, agent=self.agent, agent_version=self.agent_version, provider=reply.provider,
            account=reply.account, model=reply.model, usage=reply.usage, cost_micros=cost,
            price_version=billed.version)
        await self._append(events, steps=1, usage=reply.usage, cost=cost,
                           spend=(reservation, fact))
        observe.model_step(engine.metrics, tenant=self.lease.tenant.value,
                           tenant_class=self.tenant_class, run_id=self.run_id,
                           seq=self.state.last_seq, reply=reply, cost_micros=cost,
                           began_ns=began_ns, ended_ns=began_ns + int(waited * 1e6))
        return waited

    async def _quote(self, request: ModelRequest) -> Quote | None:
        """The price of the call's model. Every model it may be answered by (its fallbacks
        too) must be priced, or the run fails before anything is sent: an unpriced model is
        never served at price 0. None: the run ended here."""
        quotes = {model: await self.engine.prices.quote(model)
                  for model in (request.model, *request.fallback_models)}
        unpriced = [model for model, quote in quotes.items() if quote is None]
        if not unpriced:
            return quotes[request.model]
        reason = f"the operator has not priced this agent's model: {how_to_price(unpriced)}"
        await self._end(EventType.RUN_FAILED, {"error": reason, "ours": False,
                                               "cause": "unpriced_model"},
                        RunStatus.FAILED, error={"message": reason, "ours": False,
                                                 "cause": "unpriced_model"})
        return None

    async def _reserve(self, request: ModelRequest, quote: Quote) -> budget.Reservation | None:
        """Reserve the call's estimated tokens and cost against the tenant's budgets. If
        its token bucket is short the run steps aside (slot freed) until it refills; past
        its monthly spend cap the run stops. None: the run ended here."""
        engine, lease = self.engine, self.lease
        tokens, cost = budget.estimate(quote, request)
        async with engine.db.tenant_tx(lease.tenant) as conn:
            outcome = await budget.reserve(conn, lease.tenant, lease.run, lease.epoch,
                                           tokens, cost)
        match outcome:
            case budget.Reservation():
                return outcome
            case budget.MustWait(seconds=seconds):
                engine.metrics.budget_refusals.inc(self.tenant_class, "tokens_per_minute")
                await self._park_until(
                    f"tokens_per_minute: the tenant's token bucket refills in {seconds:.1f} s",
                    seconds)
            case budget.OverCap(spent_micros=spent, cap_micros=cap):
                limit = "monthly_spend_cap_micros"
                engine.metrics.budget_refusals.inc(self.tenant_class, limit)
                await self._end(
                    EventType.BUDGET_STOPPED, {"limit": limit, "used": spent, "max": cap},
                    RunStatus.FAILED, error={
                        "type": "budget_exhausted", "limit": limit,
                        "message": f"stopped by the tenant's monthly spend cap ({spent} of "
                                   f"{cap} micro-dollars spent or reserved)"})
        return None

    async def _release(self, reservation: budget.Reservation) -> None:
        lease = self.lease
        async with self.engine.db.tenant_tx(lease.tenant) as conn:
            await budget.release(conn, lease.tenant, lease.run, lease.epoch, reservation)

    async def _park_until(
        self, reason: str, seconds: float, *, models: list[str] | None = None,
    ) -> NoReturn:
        """Record RunParked and give the slot back until ``seconds`` from now: queued and
        held back until then, or — ``models`` given — waiting for an account serving one
        of them (a probe wakes it sooner)."""
        lease = self.lease
        until = datetime.now(UTC) + timedelta(seconds=seconds)
        data: dict[str, Any] = {"reason": reason[:1000], "until": until.isoformat(),
                                "basis_seq": self._basis}
        if models is not None:
            data["models"] = models
        saved = await self._save_sandbox()
        async with self.engine.db.tenant_tx(lease.tenant) as conn:
            if saved is not None:
                await log.append(conn, lease.tenant, lease.run, *saved, epoch=lease.epoch)
            await log.append(conn, lease.tenant, lease.run, EventType.RUN_PARKED, data,
                             epoch=lease.epoch)
            if models is None:
                await conn.execute(Q.release_lease, lease.tenant.value, lease.run.uuid,
                                   lease.epoch, until)
            else:
                await conn.execute(Q.park_for_model, lease.tenant.value, lease.run.uuid,
                                   lease.epoch, models, until)
        await self._forget_superseded(saved)
        raise Parked

    async def _provider_failed(self, reason: str) -> None:
        error = {"message": reason, "ours": False, "cause": "model_provider"}
        await self._end(EventType.RUN_FAILED, {"error": reason, "ours": False,
                                               "cause": "model_provider"},
                        RunStatus.FAILED, error=error)

    async def _park_for_model(self, request: ModelRequest, exc: ModelUnavailable) -> NoReturn:
        """No account can serve the run now: record why, free the slot, and wait until the
        gateway finds one of its models' accounts back (or the recheck time comes)."""
        settings = self.engine.settings
        recheck = min(settings.park_recheck_seconds * 2.0 ** min(self.state.parked, 30),
                      settings.park_recheck_max_seconds)
        logger.warning("run parked: %s", exc.detail, extra={"run_id": self.run_id})
        models = [request.model, *request.fallback_models]
        try:
            await self._park_until(f"model unavailable: {exc.detail}", recheck, models=models)
        except Parked:
            if isinstance(exc, ModelsExhausted) and exc.recovered_since():
                # An account came back while this call was failing: its wake-up may have
                # run before this park was written. Wake them (this run too) now instead.
                with contextlib.suppress(*DATABASE_DOWN):
                    await wake_parked_on(self.engine.db, models)
            raise

    async def _call_tool(self, call: CallTool) -> float:
        assert self.spec is not None
        tools, tenant = self.engine.tools, self.lease.tenant
        data: dict[str, Any] = {"key": call.key, "tool": call.tool, "reply_seq": call.reply_seq,
                                "call_index": call.call_index}
        if call.invalid is not None or call.arguments is None:
            data["error"] = call.invalid
            await self._append([(EventType.TOOL_COMPLETED, data)], audit=AuditEntry.of(
                call.tool, call.key, call.arguments, "refused", detail=call.invalid))
            return 0.0
        data["arguments"] = call.arguments
        if not await tools.honours_keys(tenant, call.tool):
            # The intent is saved first: after a crash this call is never repeated blindly.
            await self._append([(EventType.TOOL_STARTED, {"key": call.key, "tool": call.tool})])
        began_ns = time.time_ns()
        result = await tools.call(tenant, self.spec, call.tool, call.arguments, call.key,
                                  run=self.lease.run, sandbox_ref=self.state.sandbox_ref)
        data.update(result.to_json())
        fact = await self._sandbox_fact(result.sandbox)
        if fact is not None:  # the run's cost and the log both show what the sandbox cost
            data["sandbox"] = {**data["sandbox"], "cost_micros": fact.cost_micros,
                               "price_version": fact.price_version}
        await self._append([(EventType.TOOL_COMPLETED, data)],
                           audit=result.audit(call.tool, call.key, call.arguments),
                           cost=fact.cost_micros if fact else 0, sandbox=fact)
        observe.tool_step(self.engine.metrics, tenant=tenant.value,
                          tenant_class=self.tenant_class, run_id=self.run_id,
                          seq=self.state.last_seq, tool=call.tool, key=call.key, result=result,
                          began_ns=began_ns, ended_ns=began_ns + int(result.duration_ms * 1e6))
        return result.duration_ms

    async def _sandbox_fact(self, sandbox: dict[str, Any] | None) -> budget.SandboxFact | None:
        """The billing fact of a built-in tool call that ran in the sandbox, priced at the
        sandbox price in force now."""
        if not sandbox or "exec_ms" not in sandbox or "backend" not in sandbox:
            return None
        assert self.agent is not None
        sandbox_ms = round(float(sandbox["exec_ms"]))
        quote = await self.engine.prices.sandbox()
        return budget.SandboxFact(seq=0, agent=self.agent, agent_version=self.agent_version,
                                  backend=str(sandbox["backend"]), sandbox_ms=sandbox_ms,
                                  cost_micros=quote.cost_micros(sandbox_ms),
                                  price_version=quote.version)

    async def _record_unknown(self, call: RecordUnknown) -> None:
        data = {"key": call.key, "tool": call.tool, "reply_seq": call.reply_seq,
                "call_index": call.call_index, "arguments": call.arguments,
                "outcome": "unknown",
                "error": "the platform stopped during this call and the tool cannot dedupe "
                         "repeats, so its outcome is unknown; check before trying again"}
        await self._append([(EventType.TOOL_COMPLETED, data)], audit=AuditEntry.of(
            call.tool, call.key, call.arguments, "unknown", detail=str(data["error"])))

    async def _request_approval(self, call: RequestApproval) -> None:
        """Save the request and give the slot back: nothing waits in memory."""
        lease = self.lease
        saved = await self._save_sandbox()
        written = []
        async with self.engine.db.tenant_tx(lease.tenant) as conn:
            if saved is not None:
                seq = await log.append(conn, lease.tenant, lease.run, *saved, epoch=lease.epoch)
                written.append(Event(seq, *saved, datetime.now(UTC)))
            approval_id, expires_at = await approvals.open_request(
                conn, lease.tenant, lease.run, call.key, call.tool, call.arguments)
            data = {"approval_id": str(approval_id), "key": call.key, "tool": call.tool,
                    "arguments": call.arguments, "expires_at": expires_at.isoformat(),
                    "basis_seq": self._basis}
            seq = await log.append(conn, lease.tenant, lease.run,
                                   EventType.APPROVAL_REQUESTED, data, epoch=lease.epoch)
            await conn.execute(Q.park_run, lease.tenant.value, lease.run.uuid, lease.epoch)
        written.append(Event(seq, EventType.APPROVAL_REQUESTED, data, datetime.now(UTC)))
        await self._forget_superseded(saved)
        await self._absorb(written)
        raise Parked

    async def _park(self) -> None:
        lease = self.lease
        saved = await self._save_sandbox()
        async with self.engine.db.tenant_tx(lease.tenant) as conn:
            if saved is not None:
                await log.append(conn, lease.tenant, lease.run, *saved, epoch=lease.epoch)
            await conn.execute(Q.park_run, lease.tenant.value, lease.run.uuid, lease.epoch)
        await self._forget_superseded(saved)
        raise Parked

    # -- writing ----------------------------------------------------------------------

    async def _append(
        self, events: list[tuple[str, dict[str, Any]]], *, steps: int = 0,
        usage: TokenUsage | None = None, cost: int = 0, audit: AuditEntry | None = None,
        spend: tuple[budget.Reservation, budget.UsageFact] | None = None,
        sandbox: budget.SandboxFact | None = None,
    ) -> None:
        usage = usage or TokenUsage()
        lease = self.lease
        written = []
        async with self.engine.db.tenant_tx(lease.tenant) as conn:
            for type_, data in events:
                data = {**data, "basis_seq": self._basis}
                seq = await log.append(conn, lease.tenant, lease.run, type_, data,
                                       epoch=lease.epoch)
                written.append(Event(seq, type_, data, datetime.now(UTC)))
            renewed = await conn.fetchrow(
                Q.record_step, lease.tenant.value, lease.run.uuid, lease.epoch, steps,
                usage.input_tokens, usage.output_tokens, cost,
                self.engine.settings.lease_seconds,
            )
            if renewed is None:
                raise LeaseLost("the run is no longer running under this lease")
            if audit is not None:
                await audit_log.record(conn, lease.tenant, lease.run, audit)
            if spend is not None:
                # The reservation is settled, and the billing fact written, with the reply
                # that consumed it: both commit or neither does.
                reservation, fact = spend
                await budget.settle(conn, lease.tenant, lease.run, lease.epoch, reservation,
                                    fact.usage, fact.cost_micros)
                await budget.record(conn, lease.tenant, lease.run,
                                    dataclasses.replace(fact, seq=written[-1].seq))
            if sandbox is not None:  # billed per sandbox second, with the call's result
                await budget.record_sandbox(conn, lease.tenant, lease.run,
                                            dataclasses.replace(sandbox, seq=written[-1].seq))
        clean = await self._absorb(written)
        self._in_sync = clean and not renewed["cancel_requested"]

    async def _end(
        self, type_: str, data: dict[str, Any], status: RunStatus, *, answer: Any = None,
        error: Any = None,
    ) -> None:
        lease = self.lease
        async with self.engine.db.tenant_tx(lease.tenant) as conn:
            data = {**data, "basis_seq": self._basis}
            seq = await log.append(conn, lease.tenant, lease.run, type_, data, epoch=lease.epoch)
            # The append above holds the run row's lock under our epoch until commit.
            await conn.execute(Q.set_terminal_status, lease.tenant.value, lease.run.uuid,
                               status.value, answer, error)
        await self._absorb([Event(seq, type_, data, datetime.now(UTC))])
        self.engine.stats.runs_ended += 1
        self.engine.metrics.runs_ended.inc(self.tenant_class, status.value)

    async def _absorb(self, written: list[Event]) -> bool:
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
        self.engine.stats.runs_failed_ours += 1
        reason = f"platform error: {type(exc).__name__}: {exc}"[:1000]
        try:
            await self._end(EventType.RUN_FAILED, {"error": reason, "ours": True},
                            RunStatus.FAILED, error={"message": reason, "ours": True})
        except LEASE_OR_DATABASE:
            logger.warning("could not record the platform failure", extra={"run_id": self.run_id})

