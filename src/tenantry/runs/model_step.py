"""The model step: price the call, reserve its budget, ask the model gateway, and record
the reply (with any change of model or account) in one transaction with its billing
fact. A refused call fails the run; no account able to serve it parks the run, and so does
the tenant's monthly spend cap (ADR 0035). A summarizing call (ADR 0031) goes the same way
and is recorded as Summarized."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from tenantry.agents.snapshots import snapshot_id
from tenantry.db import DATABASE_DOWN
from tenantry.ledger import budget
from tenantry.ledger.prices import how_to_price
from tenantry.ledger.pricing import Quote
from tenantry.models.accounts import wake_parked_on
from tenantry.models.errors import ModelRefused, ModelsExhausted, ModelUnavailable
from tenantry.models.types import ModelReply, ModelRequest
from tenantry.runs import conversation, faults, observe, summaries
from tenantry.runs.deltas import LiveCall
from tenantry.runs.events import (
    ModelFallback,
    ModelReplied,
    ModelRerouted,
    Payload,
    RunFailed,
    Summarized,
)
from tenantry.runs.step_context import StepContext
from tenantry.runs.waiting import Parked, park_for_spend_cap, park_until

if TYPE_CHECKING:
    from tenantry.runs.decide import CallModel, Summarize

logger = logging.getLogger(__name__)


async def call_model(d: StepContext, decision: CallModel) -> float:
    """One model call; the time spent waiting on the gateway."""
    assert d.spec is not None
    engine, state, spec = d.engine, d.state, d.spec
    messages = conversation.messages(state, spec)
    tools = await engine.tools.definitions(d.lease.tenant, spec)
    request = ModelRequest(
        spec.model, tuple(messages), tuple(tools), d.run_id,
        tenant=d.lease.tenant.value, region=d.region,
        fallback_models=spec.fallback_models, account=state.account,
        previous_model=state.model or spec.model, in_flight=state.steps > 0,
        snapshot_pins=d.model_pins,
    )
    # The reply's text streams to the run's live listeners, if it has any (ADR 0030).
    live = engine.deltas.open(d.lease.tenant.value, str(d.lease.run.uuid), state.last_seq,
                              wanted=state.stream)
    try:
        served = await _serve(d, request, live)
        if not isinstance(served, _Served):
            return served
        reply = served.reply
        events = _switches(d, request, reply)
        events.append(ModelReplied(
            reply.text, [call.to_json() for call in reply.calls], reply.usage.to_json(),
            reply.provider, reply.account, reply.model, served.cost, served.billed.version,
            round(reply.latency_ms, 3),
            # The whole gateway call: retries, backoff and other accounts included.
            waited_ms=round(served.waited_ms, 3),
            prompt_sha256=conversation.prompt_digest(messages),
            connect_ms=round(reply.connect_ms, 3) or None,
            provider_model=snapshot_id(reply.provider_model)))
        # The call's last deltas reach its listeners before its ModelReplied does (nothing
        # to wait for when nobody watches).
        await live.settle()
        await d.append(events, steps=1, usage=reply.usage, cost=served.cost,
                       spend=(served.reservation, _fact(d, served)))
    finally:
        live.close()
    _observe(d, served)
    await _note_snapshot(d, served.reply)
    return served.waited_ms


async def summarize(d: StepContext, decision: Summarize) -> float:
    """The summarizing call (ADR 0031): reserved, billed and budgeted like a model step,
    saved as Summarized before any prompt uses it. No tools are offered; the summary model
    (the policy's, else the agent's) does not move the run's own model or account."""
    assert d.spec is not None
    state, spec = d.state, d.spec
    messages = summaries.request(state, spec, decision.upto_seq)
    model = summaries.model(spec)
    own = model == (state.model or spec.model)
    request = ModelRequest(
        model, tuple(messages), (), d.run_id, tenant=d.lease.tenant.value, region=d.region,
        fallback_models=spec.fallback_models if model == spec.model else (),
        account=state.account if own else "", previous_model=model, in_flight=True,
        snapshot_pins=d.model_pins)
    served = await _serve(d, request)
    if not isinstance(served, _Served):
        return served
    reply = served.reply
    await d.append([Summarized(
        decision.upto_seq, reply.text, reply.usage.to_json(), reply.provider, reply.account,
        reply.model, served.cost, served.billed.version, round(reply.latency_ms, 3),
        waited_ms=round(served.waited_ms, 3),
        prompt_sha256=conversation.prompt_digest(messages))],
        usage=reply.usage, cost=served.cost, spend=(served.reservation, _fact(d, served)))
    _observe(d, served)
    return served.waited_ms


@dataclass(frozen=True, slots=True)
class _Served:
    """A model call that answered, with what it reserved and what it costs."""

    reply: ModelReply
    reservation: budget.Reservation
    billed: Quote
    cost: int
    waited_ms: float
    began_ns: int


async def _serve(d: StepContext, request: ModelRequest,
                 live: LiveCall | None = None) -> _Served | float:
    """Price, reserve, ask. A float: the call did not answer — the run ended (refused,
    unpriced), or found its tenant's spend cap reached with a cancel pending (its next
    step ends it) — the time it waited. No account able to serve it, a short token bucket
    or the spend cap park the run (``Parked``). ``live``: where the reply's text streams
    as it comes (a summarizing call's does not)."""
    engine = d.engine
    quote = await _quote(d, request)
    if quote is None:
        return 0.0
    reservation = await _reserve(d, request, quote)
    if reservation is None:
        return 0.0
    # The gateway's rate buckets use the same estimate: the prompt is measured once.
    request = dataclasses.replace(request, estimated_tokens=reservation.tokens, deltas=live)
    started, began_ns = time.perf_counter(), time.time_ns()
    try:
        reply = await engine.model.complete(request)
    except ModelRefused as exc:
        await _release(d, reservation)
        # The provider's body may carry its internals: a category for the tenant, the
        # body in our log.
        error_id = faults.record("model provider refused the request", exc.detail,
                                 run_id=d.run_id, tenant_id=d.lease.tenant.value,
                                 level=logging.WARNING)
        how = f"HTTP {exc.http_status}; " if exc.http_status is not None else ""
        await d.end(RunFailed(
            faults.MODEL_REFUSED.format(how=how, error_id=error_id),
            ours=False, cause="model_provider", error_id=error_id))
        return (time.perf_counter() - started) * 1000
    except ModelUnavailable as exc:
        await _release(d, reservation)
        await _park_for_model(d, request, exc)
    waited = (time.perf_counter() - started) * 1000
    # Billed at the price in force now, for the model that answered (a fallback's own);
    # every model the request could use was priced before it was sent.
    billed = await engine.prices.quote(reply.model)
    if billed is None:
        raise RuntimeError(f"model {reply.model!r} answered but has no price")
    return _Served(reply, reservation, billed, billed.cost_micros(reply.usage), waited,
                   began_ns)


def _fact(d: StepContext, served: _Served) -> budget.UsageFact:
    """The call's billing record, written in the step's transaction."""
    assert d.agent is not None
    reply = served.reply
    return budget.UsageFact(
        seq=0, agent=d.agent, agent_version=d.agent_version, provider=reply.provider,
        account=reply.account, model=reply.model, usage=reply.usage, cost_micros=served.cost,
        price_version=served.billed.version, account_owner=reply.account_owner)


def _observe(d: StepContext, served: _Served) -> None:
    observe.model_step(d.engine.metrics, tenant=d.lease.tenant.value,
                       tenant_class=d.tenant_class, run_id=d.run_id,
                       seq=d.state.last_seq, reply=served.reply, cost_micros=served.cost,
                       began_ns=served.began_ns,
                       ended_ns=served.began_ns + int(served.waited_ms * 1e6))


async def _note_snapshot(d: StepContext, reply: ModelReply) -> None:
    """After the step committed: the snapshot the provider served, noted for the agent
    (a write only when this process last saw another). Never fails the step."""
    seen = snapshot_id(reply.provider_model)
    if seen is None or d.agent is None:
        return
    try:
        changed = await d.engine.snapshots.note(d.engine.db, d.lease.tenant, d.agent,
                                                reply.model, seen, reply.account_owner)
    except Exception as exc:  # noted again at the next reply that differs
        logger.warning("could not record the provider's model snapshot: %s", exc,
                       extra={"run_id": d.run_id, "tenant_id": d.lease.tenant.value})
        return
    if changed:
        d.engine.metrics.model_snapshot_changes.inc(d.tenant_class)
        logger.info("provider model snapshot changed: %s now answers as %s", reply.model, seen,
                    extra={"run_id": d.run_id, "tenant_id": d.lease.tenant.value})


def _switches(d: StepContext, request: ModelRequest, reply: ModelReply) -> list[Payload]:
    """Another account or model than last time answered: the log says so."""
    events: list[Payload] = []
    if reply.switch_reason:  # what each account answered: ours to read, not the tenant's
        logger.info("model call switched: %s", reply.switch_reason,
                    extra={"run_id": d.run_id, "tenant_id": d.lease.tenant.value})
    if d.state.account and reply.account != d.state.account:
        events.append(ModelRerouted(d.state.account, reply.account, reply.model,
                                    faults.OTHER_ACCOUNT))
    if reply.model != request.previous_model:
        reason = (faults.BACK_TO_MODEL.format(model=reply.model)
                  if reply.model == request.model else faults.OTHER_MODEL)
        events.append(ModelFallback(request.previous_model, reply.model, reason))
    return events


async def _quote(d: StepContext, request: ModelRequest) -> Quote | None:
    """The price of the call's model. Every model it may be answered by (its fallbacks
    too) must be priced, or the run fails before anything is sent: an unpriced model is
    never served at price 0. None: the run ended here."""
    quotes = {model: await d.engine.prices.quote(model)
              for model in (request.model, *request.fallback_models)}
    unpriced = [model for model, quote in quotes.items() if quote is None]
    if not unpriced:
        return quotes[request.model]
    reason = f"the operator has not priced this agent's model: {how_to_price(unpriced)}"
    await d.end(RunFailed(reason, ours=False, cause="unpriced_model"))
    return None


async def _reserve(d: StepContext, request: ModelRequest,
                   quote: Quote) -> budget.Reservation | None:
    """Reserve the call's estimated tokens and cost against the tenant's budgets. If
    its token bucket is short the run steps aside (slot freed) until it refills; past
    its monthly spend cap it waits (slot freed) until the operator raises the cap or the
    month ends: the tenant's limit costs the run time, not its progress (ADR 0035). None:
    no reservation (the run parked, or a cancel is pending and the next step ends it)."""
    engine, lease = d.engine, d.lease
    tokens, cost = budget.estimate(quote, request)
    outcome = await budget.reserve_now(engine.db, lease.tenant, lease.run, lease.epoch,
                                       tokens, cost)
    match outcome:
        case budget.Reservation():
            return outcome
        case budget.MustWait(seconds=seconds):
            engine.metrics.budget_refusals.inc(d.tenant_class, "tokens_per_minute")
            await park_until(
                d, f"tokens_per_minute: the tenant's token bucket refills in {seconds:.1f} s",
                seconds)
        case budget.OverCap():
            engine.metrics.budget_refusals.inc(d.tenant_class, "monthly_spend_cap_micros")
            await park_for_spend_cap(d, outcome)
    return None


async def _release(d: StepContext, reservation: budget.Reservation) -> None:
    lease = d.lease
    async with d.engine.db.tenant_tx(lease.tenant) as conn:
        await budget.release(conn, lease.tenant, lease.run, lease.epoch, reservation)


async def _park_for_model(d: StepContext, request: ModelRequest,
                          exc: ModelUnavailable) -> NoReturn:
    """No account can serve the run now: record why, free the slot, and wait until the
    gateway finds one of its models' accounts back (or the recheck time comes)."""
    settings = d.engine.settings
    recheck = min(settings.park_recheck_seconds * 2.0 ** min(d.state.parked, 30),
                  settings.park_recheck_max_seconds)
    models = [request.model, *request.fallback_models]
    # What each account answered (URLs, provider bodies) is for our log only.
    error_id = faults.record("run parked: model unavailable", exc.detail,
                             run_id=d.run_id, tenant_id=d.lease.tenant.value,
                             level=logging.WARNING)
    reason = faults.MODEL_UNAVAILABLE.format(models=", ".join(models), error_id=error_id)
    try:
        await park_until(d, reason, recheck, models=models, error_id=error_id)
    except Parked:
        if isinstance(exc, ModelsExhausted) and exc.recovered_since():
            # An account came back while this call was failing: its wake-up may have
            # run before this park was written. Wake them (this run too) now instead.
            with contextlib.suppress(*DATABASE_DOWN):
                await wake_parked_on(d.engine.db, models)
        raise
