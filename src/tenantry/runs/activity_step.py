"""The driver's side of an activity called as a tool (ADR 0015).

``request_activity``: in one transaction fenced by the lease epoch, the task is enqueued
with the call's key as its idempotency key (``create_run_in``, the tenant's admission
applies), ``ActivityRequested`` is appended and the run parks (waiting, lease released,
slot free). A refusal (admission, a missing activity, a key the tenant used already for
something else) is the call's error; the run goes on. Because the key is the task's
idempotency key, a run driven again from the same state finds the same task, never a
second one. ``await_activity``: woken while the task still runs, the run parks again and
enqueues nothing. ``complete_activity``: the task's ending (``ActivityReturned``, written
by whoever ended the task) becomes the call's ``ToolCompleted``."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, NoReturn

from tenantry import errors
from tenantry.activities.code import versions
from tenantry.activities.code.attempt import MAX_INPUT_BYTES
from tenantry.activities.code.versions import ActivityVersion
from tenantry.db.queries import load
from tenantry.ids import RunId
from tenantry.jsonutil import digest, dumps
from tenantry.runs import call_results, log
from tenantry.runs.decide import AwaitActivity, CompleteActivity, RequestActivity
from tenantry.runs.events import ActivityRequested, Event, Payload
from tenantry.runs.service import RunRequest, create_run_in
from tenantry.runs.step_context import StepContext
from tenantry.runs.waiting import Parked, forget_superseded, save_sandbox

logger = logging.getLogger(__name__)
Q = load(__package__, "activity_calls.sql")



def activity_request(found: ActivityVersion, input: Any, *, idempotency_key: str | None,
                     priority: str, parent: RunId | None = None) -> RunRequest:
    """The run request of one task of ``found``: what ``create_run`` admits and writes."""
    return RunRequest(
        agent_id=found.agent_id, version=found.version, input=input, webhook_url=None,
        priority=priority, idempotency_key=idempotency_key,
        request_sha256=digest({"kind": "activity", "name": found.name,
                               "version": found.version, "priority": priority,
                               "input": input}),
        parent=parent)


async def request_activity(d: StepContext, call: RequestActivity) -> float:
    """Enqueue the call's task and park; or record why it could not be enqueued."""
    lease, db = d.lease, d.engine.db
    try:
        found = await versions.get(db, lease.tenant, call.activity, call.version)
    except errors.NotFound:
        pinned = f" version {call.version}" if call.version is not None else ""
        return await call_results.refuse(
            d, call, f"activity {call.activity!r}{pinned} does not exist")
    if len(dumps(call.arguments)) > MAX_INPUT_BYTES:
        return await call_results.refuse(
            d, call, f"the arguments are over the activity input limit of {MAX_INPUT_BYTES} "
                     "bytes")
    saved = await save_sandbox(d)
    written: list[Event] = []
    refusal: errors.TenantryError | None = None
    async with db.tenant_tx(lease.tenant) as conn:
        priority = await conn.fetchval(Q.lock_calling_run, lease.tenant.value, lease.run.uuid,
                                       lease.epoch)
        if priority is None:
            raise errors.LeaseLost("the run's lease moved on; nothing was enqueued")
        request = activity_request(found, call.arguments, idempotency_key=call.key,
                                   priority=priority, parent=lease.run)
        try:
            # Driven again from the same state (a crash, a lost lease): the same task.
            task = await conn.fetchval(Q.task_of_call, lease.tenant.value, call.key,
                                       lease.run.uuid)
            if task is None:
                task = (await create_run_in(conn, db, lease.tenant, request,
                                            kind="activity")).run_id.uuid
        except call_results.REFUSED as exc:
            refusal = exc
        else:
            events: list[Payload] = [] if saved is None else [saved]
            events.append(ActivityRequested(call.key, call.tool, str(RunId(task)),
                                            found.name, found.version, basis_seq=d.basis))
            for payload in events:
                seq = await log.append(conn, lease.tenant, lease.run, payload,
                                       epoch=lease.epoch)
                written.append(Event.of(seq, payload, datetime.now(UTC)))
            await conn.execute(Q.park_for_activity, lease.tenant.value, lease.run.uuid,
                               lease.epoch, d.state.last_seq + len(written))
    if refusal is not None:
        if saved is not None and d.engine.sandboxes is not None:
            await d.engine.sandboxes.forget(lease.tenant, saved.ref)  # never in the log
        return await call_results.refuse(
            d, call, f"the activity task was not enqueued: {refusal.detail}")
    await forget_superseded(d, saved)
    await d.absorb(written)
    raise Parked


async def await_activity(d: StepContext, wait: AwaitActivity) -> NoReturn:
    """Woken while the task still runs (or before its ending was read): wait again."""
    lease = d.lease
    saved = await save_sandbox(d)
    async with d.engine.db.tenant_tx(lease.tenant) as conn:
        known = d.state.last_seq
        if saved is not None:
            await log.append(conn, lease.tenant, lease.run, saved, epoch=lease.epoch)
            known += 1
        await conn.execute(Q.park_for_activity, lease.tenant.value, lease.run.uuid,
                           lease.epoch, known)
    await forget_superseded(d, saved)
    logger.info("run waits again for its activity task", extra={"task_id": wait.task_id})
    raise Parked


async def complete_activity(d: StepContext, call: CompleteActivity) -> None:
    """The ending as the call's result: the task's JSON result (capped like any tool
    output), or the error saying how it ended."""
    returned = call.returned
    if returned.status == "finished":
        await call_results.complete(d, call, result=dumps(returned.result).decode())
    else:
        await call_results.complete(
            d, call, error=returned.error or f"the activity ended as {returned.status}")

