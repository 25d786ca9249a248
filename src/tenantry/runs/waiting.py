"""A run that waits gives its slot back: for an approval, for a model account, for its
token bucket, for its tenant's monthly spend cap, or for a tool server's connection. Its
sandbox's files are saved first, in the same transaction as the event that says why it
waits, and nothing waits in memory."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, NoReturn

from tenantry.db import Connection
from tenantry.db.queries import load
from tenantry.errors import LeaseLost
from tenantry.runs import log
from tenantry.runs.decide import AwaitApproval, RequestApproval
from tenantry.runs.events import (
    AUTHORIZATION_REQUIRED,
    MONTHLY_SPEND_CAP,
    ApprovalRequested,
    Event,
    RunParked,
    SandboxSaved,
)
from tenantry.runs.step_context import StepContext
from tenantry.tools import approvals
from tenantry.tools.oauth.connections import connected_now

if TYPE_CHECKING:
    import uuid

    from tenantry.ledger.budget import OverCap

Q = load(__package__)


class Parked(Exception):
    """The run is waiting (status ``waiting``, lease released): stop driving it."""


async def save_sandbox(d: StepContext) -> SandboxSaved | None:
    """Before the run parks: its sandbox's files to the blob store (None: no sandbox
    here). The event goes into the park's own transaction."""
    sandboxes = d.engine.sandboxes
    if sandboxes is None:
        return None
    saved = await sandboxes.save(d.lease.tenant, d.lease.run)
    if saved is None:
        return None
    return SandboxSaved(saved.ref, saved.bytes, round(saved.duration_ms, 3),
                        basis_seq=d.basis)


async def forget_superseded(d: StepContext, saved: SandboxSaved | None) -> None:
    """The previous save, once the new one is committed in the log."""
    previous = d.state.sandbox_ref
    if saved is not None and previous and previous != saved.ref:
        assert d.engine.sandboxes is not None
        await d.engine.sandboxes.forget(d.lease.tenant, previous)


async def park_until(
    d: StepContext, reason: str, seconds: float, *, models: list[str] | None = None,
    error_id: str | None = None,
) -> NoReturn:
    """Record RunParked and give the slot back until ``seconds`` from now: queued and
    held back until then, or — ``models`` given — waiting for an account serving one
    of them (a probe wakes it sooner)."""
    lease = d.lease
    until = datetime.now(UTC) + timedelta(seconds=seconds)
    parked = RunParked(reason[:1000], until.isoformat(), models, error_id,
                       basis_seq=d.basis)
    saved = await save_sandbox(d)
    async with d.engine.db.tenant_tx(lease.tenant) as conn:
        if saved is not None:
            await log.append(conn, lease.tenant, lease.run, saved, epoch=lease.epoch)
        await log.append(conn, lease.tenant, lease.run, parked, epoch=lease.epoch)
        if models is None:
            await conn.execute(Q.release_lease, lease.tenant.value, lease.run.uuid,
                               lease.epoch, until)
        else:
            await conn.execute(Q.park_for_model, lease.tenant.value, lease.run.uuid,
                               lease.epoch, models, until)
    await forget_superseded(d, saved)
    raise Parked


async def _cancel_pending(conn: Connection, d: StepContext,
                          saved: SandboxSaved | None) -> bool:
    """In a park's transaction: lock the run (the cancel API takes this lock too, so a
    cancel is either seen here or comes after the run waits, and then ends it at once),
    check it is still held under this lease, and record the sandbox's save. Whether a
    cancel is pending: then the run must not wait."""
    lease = d.lease
    row = await conn.fetchrow(Q.lock_run, lease.tenant.value, lease.run.uuid)
    if row is None or row["lease_epoch"] != lease.epoch or row["status"] != "running":
        raise LeaseLost("the run is no longer held under this lease")
    if saved is not None:
        await log.append(conn, lease.tenant, lease.run, saved, epoch=lease.epoch)
    return bool(row["cancel_requested"])


async def park_for_spend_cap(d: StepContext, over: OverCap) -> None:
    """The tenant's monthly spend cap is reached: the run waits (slot released, nothing of
    it lost) until the operator raises or removes the cap or the month ends
    (``over.period_ends``); ``tenantry_wake_spend_capped`` sends it back to the queue, and
    it continues from its log. Raises Parked — or returns, writing no park, when a cancel
    is pending: the driver's next step reads it and ends the run (a tenant over its cap
    gets no claims, so a queued run would wait to be cancelled)."""
    lease = d.lease
    saved = await save_sandbox(d)
    async with d.engine.db.tenant_tx(lease.tenant) as conn:
        if await _cancel_pending(conn, d, saved):
            parked = None
        else:
            parked = RunParked(MONTHLY_SPEND_CAP, over.period_ends.isoformat(),
                               basis_seq=d.basis, spent_micros=over.spent_micros,
                               cap_micros=over.cap_micros)
            await log.append(conn, lease.tenant, lease.run, parked, epoch=lease.epoch)
            await conn.execute(Q.park_for_spend_cap, lease.tenant.value, lease.run.uuid,
                               lease.epoch, over.cap_micros, over.period_ends)
    await forget_superseded(d, saved)
    if parked is not None:
        raise Parked


async def park_for_authorization(d: StepContext, key: str, server: str,
                                 server_id: uuid.UUID) -> None:
    """The call ``key`` was not made: its OAuth tool server needs the tenant to connect it
    again. The run waits (slot released, nothing of it lost) until the connection's change
    to 'connected' sends it back to the queue (routine wake_authorized); the call is then
    made afresh. A connection made while this call was being refused sends the run back
    to the queue at once. Raises Parked — or returns, writing no park, when a cancel is
    pending: the caller records the refusal and the driver ends the run."""
    lease = d.lease
    saved = await save_sandbox(d)
    async with d.engine.db.tenant_tx(lease.tenant) as conn:
        # The connection's row first, as the connecting transaction locks it before the
        # runs it wakes; then this run's, which the cancel API takes too.
        connected = await connected_now(conn, lease.tenant, server_id)
        if await _cancel_pending(conn, d, saved):
            parked = None
        else:
            parked = RunParked(AUTHORIZATION_REQUIRED, basis_seq=d.basis, key=key,
                               tool_server=server)
            await log.append(conn, lease.tenant, lease.run, parked, epoch=lease.epoch)
            if connected:
                await conn.execute(Q.release_lease, lease.tenant.value, lease.run.uuid,
                                   lease.epoch, None)
            else:
                await conn.execute(Q.park_for_authorization, lease.tenant.value,
                                   lease.run.uuid, lease.epoch, server_id)
    await forget_superseded(d, saved)
    if parked is not None:
        raise Parked


async def request_approval(d: StepContext, call: RequestApproval) -> NoReturn:
    """Save the request and give the slot back: nothing waits in memory."""
    lease = d.lease
    saved = await save_sandbox(d)
    written = []
    async with d.engine.db.tenant_tx(lease.tenant) as conn:
        if saved is not None:
            seq = await log.append(conn, lease.tenant, lease.run, saved, epoch=lease.epoch)
            written.append(Event.of(seq, saved, datetime.now(UTC)))
        approval_id, expires_at = await approvals.open_request(
            conn, lease.tenant, lease.run, call.key, call.tool, call.arguments)
        asked = ApprovalRequested(str(approval_id), call.key, call.tool, call.arguments,
                                  expires_at.isoformat(), basis_seq=d.basis)
        seq = await log.append(conn, lease.tenant, lease.run, asked, epoch=lease.epoch)
        await conn.execute(Q.park_run, lease.tenant.value, lease.run.uuid, lease.epoch)
    written.append(Event.of(seq, asked, datetime.now(UTC)))
    await forget_superseded(d, saved)
    await d.absorb(written)
    raise Parked


async def await_approval(d: StepContext, wait: AwaitApproval) -> NoReturn:
    """An approval is still pending: wait for it with the slot given back."""
    lease = d.lease
    saved = await save_sandbox(d)
    async with d.engine.db.tenant_tx(lease.tenant) as conn:
        if saved is not None:
            await log.append(conn, lease.tenant, lease.run, saved, epoch=lease.epoch)
        await conn.execute(Q.park_run, lease.tenant.value, lease.run.uuid, lease.epoch)
    await forget_superseded(d, saved)
    raise Parked
