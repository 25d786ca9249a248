"""The event log: numbered slots ``(tenant_id, run_id, seq)`` with no gaps.

Appends go through the run row's ``last_seq`` counter, so two writers never race for a slot,
and carry the writer's lease epoch, so a stale owner gets no slot at all (invariant 2).
"""

from __future__ import annotations

from tenantry.db import Connection
from tenantry.db.queries import load
from tenantry.errors import LeaseLost
from tenantry.ids import RunId, TenantId
from tenantry.jsonutil import dumps
from tenantry.runs.events import Event, Payload

Q = load(__package__)

#: Events hold at most this much JSON (the schema checks it too); bigger goes by reference.
MAX_EVENT_BYTES = 8192


async def append(
    conn: Connection,
    tenant: TenantId,
    run: RunId,
    payload: Payload,
    *,
    epoch: int | None,
) -> int:
    """Append one event in the caller's transaction and return its seq.

    ``epoch`` is the caller's lease epoch; ``None`` is for writers that hold no lease
    (the API recording a cancel request), which never compete for the run's next step.
    """
    data = payload.to_data()
    encoded = dumps(data)
    inline = data
    if len(encoded) > MAX_EVENT_BYTES:
        # Keep the log row small and bounded; the full payload sits beside it.
        inline = {"$payload": len(encoded)}
    row = await conn.fetchrow(Q.append_event, tenant.value, run.uuid, epoch, payload.TYPE,
                              inline, payload.FORMAT)
    if row is None:
        raise LeaseLost("the run's lease moved on; this writer must stop")
    seq: int = row["seq"]
    if inline is not data:
        await conn.execute(Q.insert_payload, tenant.value, run.uuid, seq, data)
    return seq


async def read(
    conn: Connection, tenant: TenantId, run: RunId, *, after: int = 0, limit: int = 500
) -> list[Event]:
    rows = await conn.fetch(Q.read_events, tenant.value, run.uuid, after, limit)
    return [Event(r["seq"], r["type"], r["data"], r["created_at"], r["format"]) for r in rows]
