"""The driver's side of child runs: an agent starting another agent through its
``start_agent`` tool (ADR 0032).

``request_child``: in one transaction fenced by the lease epoch, the child run is created
with the call's key as its idempotency key (the tenant's admission applies; its priority
is the parent's) and ``ChildRunStarted`` is appended. A run driven again from the same
state finds the same child, never a second one. Every start_agent call of one reply is
started before the parent waits, so siblings run side by side. A child's budget is capped
at what the parent's ``max_cost_micros`` has left after its own spend and the caps of its
other live children, so children can never take the parent past its limit. Depth and the
number of children per run are bounded by the operator (a tool error past them).

A child's ending wakes its parent (migration 0034: a trigger before the child's status change, which
locks the parent's row first). ``await_child`` reads the child's row under the parent's
row lock: ended → ``ChildRunEnded`` is appended (the next decision turns it into the
call's result); not yet → the parent parks again. The same lock on both sides means an
ending can never fall between the parent's look and its park.

``cancel_children``: a cancelled parent cancels its live children before it ends, so a
crash in between repeats the cascade rather than losing it."""

from __future__ import annotations

import contextlib
import logging
from datetime import UTC, datetime
from typing import Any

from tenantry import errors
from tenantry.agents import service as agents
from tenantry.db import Connection
from tenantry.db.queries import load
from tenantry.ids import AgentId, RunId
from tenantry.jsonutil import digest, dumps
from tenantry.runs import call_results, log, service
from tenantry.runs.decide import AwaitChild, CompleteChild, RequestChild, idempotency_key
from tenantry.runs.events import (
    ChildRunEnded,
    ChildRunStarted,
    Event,
    Payload,
    RunStatus,
)
from tenantry.runs.service import RunRequest, create_run_in
from tenantry.runs.step_context import StepContext
from tenantry.runs.waiting import Parked, forget_superseded, save_sandbox

logger = logging.getLogger(__name__)
Q = load(__package__, "child_calls.sql")
# The parent's fence and its park are the ones of a run waiting for an activity task.
WAIT = load(__package__, "activity_calls.sql")

MAX_ERROR_CHARS = 1000


def budget_left(d: StepContext) -> int:
    """What this run's max_cost_micros has left for a new child: its limit (a child's own
    cap included) less what it and its ended children spent and the caps of its live
    children."""
    assert d.spec is not None
    state = d.state
    limit = d.spec.limits.max_cost_micros
    if state.cost_cap_micros is not None:
        limit = min(limit, state.cost_cap_micros)
    held = sum(started.cost_cap_micros for key, started in state.child_runs.items()
               if key not in state.child_ends)
    return limit - state.spent_micros - held


def _siblings_to_start(d: StepContext, call: RequestChild) -> int:
    """This call and the later start_agent calls of its reply not started yet: what is
    left of the budget is shared among them equally, so siblings started side by side can
    never spend more than their parent has left."""
    reply = next(r for r in d.state.replies if r.seq == call.reply_seq)
    return sum(1 for index in range(call.call_index, len(reply.calls))
               if index not in reply.completed and reply.calls[index].get("name") == call.tool
               and idempotency_key(d.run_id, reply.seq, index) not in d.state.child_runs)


def _limit_refusal(d: StepContext) -> str | None:
    settings, state = d.engine.settings, d.state
    if state.depth + 1 > settings.child_max_depth:
        return (f"this run is {state.depth} level(s) below a run nobody started, and child "
                f"runs may go {settings.child_max_depth} deep: do the task yourself")
    if len(state.child_runs) >= settings.child_max_per_run:
        return (f"this run has started {len(state.child_runs)} child runs, the most one run "
                f"may start")
    if budget_left(d) <= 0:
        return "this run's budget (max_cost_micros) has nothing left for a child run"
    return None


async def request_child(d: StepContext, call: RequestChild) -> float:
    """Start the call's child run; or record why it could not be started. The parent
    does not wait here: the next decision starts its other children of the same reply
    first, then waits for the first one (``await_child``)."""
    refusal_text = _limit_refusal(d)
    if refusal_text is not None:
        return await call_results.refuse(d, call, refusal_text)
    lease, db = d.lease, d.engine.db
    refusal: errors.TenantryError | None = None
    async with db.tenant_tx(lease.tenant) as conn:
        priority = await conn.fetchval(WAIT.lock_calling_run, lease.tenant.value,
                                       lease.run.uuid, lease.epoch)
        if priority is None:
            raise errors.LeaseLost("the run's lease moved on; no child was started")
        try:
            started = await _start(d, conn, call, priority)
        except call_results.REFUSED as exc:
            refusal = exc
        else:
            seq = await log.append(conn, lease.tenant, lease.run, started, epoch=lease.epoch)
    if refusal is not None:
        return await call_results.refuse(
            d, call, f"the child run was not started: {refusal.detail}")
    await d.absorb([Event.of(seq, started, datetime.now(UTC))])
    d.engine.metrics.child_runs_started.inc(d.tenant_class)
    return 0.0


async def _start(d: StepContext, conn: Connection, call: RequestChild,
                 priority: str) -> ChildRunStarted:
    """The child run of ``call``, capped at the smaller of its own max_cost_micros and what
    this run has left for it. It is created in the transaction that records it in this
    run's log, so a run driven again never decides to start it twice; were it ever asked
    again, the call's key (its idempotency key) answers with the same run."""
    lease = d.lease
    agent = AgentId.parse(call.child.agent_id)
    # On this transaction's connection: waiting for a second one while holding this one
    # (and the parent's row) starves the pool under load.
    found = (await agents.get_version(d.engine.db, lease.tenant, agent, call.child.version,
                                      conn)
             if call.child.version is not None else await agents.get_live(
                 d.engine.db, lease.tenant, agent, conn))
    cap = min(budget_left(d) // _siblings_to_start(d, call), found.spec.limits.max_cost_micros)
    request = RunRequest(
        agent_id=agent, version=found.version, input=call.input, webhook_url=None,
        priority=priority, idempotency_key=call.key,
        request_sha256=digest({"kind": "child", "parent": d.run_id,
                               "agent_id": call.child.agent_id, "version": found.version,
                               "input": call.input}),
        parent=lease.run, depth=d.state.depth + 1, cost_cap_micros=cap)
    created = await create_run_in(conn, d.engine.db, lease.tenant, request, kind="agent")
    return ChildRunStarted(call.key, call.tool, str(created.run_id), call.child.agent_id,
                           found.version, cap, basis_seq=d.basis)


async def await_child(d: StepContext, wait: AwaitChild) -> None:
    """Woken (or resumed) while waiting for a child: its ending into the log if it has
    ended; otherwise the parent parks again, with nothing started."""
    if await _take_ending(d, wait, park=False):
        return
    saved = await save_sandbox(d)
    try:
        ended = await _take_ending(d, wait, park=True, saved=saved)
    except BaseException:
        if saved is not None and d.engine.sandboxes is not None:
            with contextlib.suppress(Exception):
                await d.engine.sandboxes.forget(d.lease.tenant, saved.ref)
        raise
    await forget_superseded(d, saved)
    if not ended:
        logger.info("run waits again for its child run", extra={"child_run_id": wait.run_id})
        raise Parked


async def _take_ending(d: StepContext, wait: AwaitChild, *, park: bool,
                       saved: Payload | None = None) -> bool:
    """Under the parent's row lock: the child's ending appended (True), or — with
    ``park`` — the parent parked (False). Without ``park`` nothing is written unless the
    child has ended."""
    lease = d.lease
    written: list[Event] = []
    async with d.engine.db.tenant_tx(lease.tenant) as conn:
        if await conn.fetchval(WAIT.lock_calling_run, lease.tenant.value, lease.run.uuid,
                               lease.epoch) is None:
            raise errors.LeaseLost("the run's lease moved on")
        row = await conn.fetchrow(Q.child_ending, lease.tenant.value,
                                  RunId.parse(wait.run_id).uuid)
        ended = _ending(wait, row)
        if ended is None and not park:
            return False
        events: list[Payload] = [] if saved is None else [saved]
        if ended is not None:
            events.append(ended)
        for payload in events:
            seq = await log.append(conn, lease.tenant, lease.run, payload, epoch=lease.epoch)
            written.append(Event.of(seq, payload, datetime.now(UTC)))
        if ended is None:
            await conn.execute(WAIT.park_for_activity, lease.tenant.value, lease.run.uuid,
                               lease.epoch, d.state.last_seq + len(written))
    await d.absorb(written)
    return ended is not None


def _ending(wait: AwaitChild, row: Any) -> ChildRunEnded | None:
    if row is None:  # retention deleted it (long after it ended): say so, go on
        return ChildRunEnded(wait.key, wait.run_id, "failed", 0,
                             error="the child run no longer exists")
    status = RunStatus(row["status"])
    if not status.terminal:
        return None
    spent = int(row["spent"] or 0)
    if status is RunStatus.FINISHED:
        return ChildRunEnded(wait.key, wait.run_id, status.value, spent, answer=row["answer"])
    return ChildRunEnded(wait.key, wait.run_id, status.value, spent,
                         error=_told(status, row["error"]))


def _told(status: RunStatus, error: Any) -> str:
    message = error.get("message") if isinstance(error, dict) else error
    detail = f": {message}" if message else ""
    if status is RunStatus.CANCELLED:
        return f"the child run was cancelled before it finished{detail}"[:MAX_ERROR_CHARS]
    return f"the child run failed{detail}"[:MAX_ERROR_CHARS]


async def complete_child(d: StepContext, call: CompleteChild) -> None:
    """The child's answer (capped like any tool output) or its failure, as the result."""
    ended = call.ended
    if ended.status == "finished":
        answer = ended.answer
        await call_results.complete(
            d, call, result=answer if isinstance(answer, str) else dumps(answer).decode())
    else:
        await call_results.complete(
            d, call, error=ended.error or f"the child run ended as {ended.status}")


async def cancel_children(d: StepContext) -> None:
    """Cancel every child of this run that has not ended (and, through theirs, their
    children): before the run records its own cancellation."""
    if not d.state.child_runs:
        return
    lease, db = d.lease, d.engine.db
    async with db.tenant_tx(lease.tenant) as conn:
        live = [RunId(r["run_id"]) for r in await conn.fetch(
            Q.live_children, lease.tenant.value, lease.run.uuid)]
    for child in live:
        # Ended meanwhile (409) or deleted (404): nothing left to cancel.
        with contextlib.suppress(errors.Conflict, errors.NotFound):
            await service.cancel_run(db, lease.tenant, child)

