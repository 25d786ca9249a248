"""The event log: numbered slots ``(tenant_id, run_id, seq)`` with no gaps.

Appends go through the run row's ``last_seq`` counter, so two writers never race for a slot,
and carry the writer's lease epoch, so a stale owner gets no slot at all (invariant 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tenantry.db import Connection, Database
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
    inline, full = _row(payload)
    row = await conn.fetchrow(Q.append_event, tenant.value, run.uuid, epoch, payload.TYPE,
                              inline, payload.FORMAT)
    if row is None:
        raise LeaseLost("the run's lease moved on; this writer must stop")
    seq: int = row["seq"]
    if full is not None:
        await conn.execute(Q.insert_payload, tenant.value, run.uuid, seq, full)
    return seq


def _row(payload: Payload) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The event's log row, and its whole data when that is too big for the row (the log
    row then stands in for it, small and bounded; the data sits beside it)."""
    data = payload.to_data()
    encoded = dumps(data)
    if len(encoded) > MAX_EVENT_BYTES:
        return {"$payload": len(encoded)}, data
    return data, None


@dataclass(frozen=True, slots=True)
class Slots:
    """Events as one call of ``tenantry_commit_step`` takes them: parallel arrays of their
    types, log rows, formats and — for an event too big for its row — its full data."""

    types: list[str]
    data: list[dict[str, Any]]
    formats: list[int]
    payloads: list[dict[str, Any] | None] | None  # None: every event fits its row

    @classmethod
    def of(cls, payloads: list[Payload]) -> Slots:
        rows = [_row(payload) for payload in payloads]
        full = [data for _, data in rows]
        return cls([p.TYPE for p in payloads], [inline for inline, _ in rows],
                   [p.FORMAT for p in payloads],
                   full if any(data is not None for data in full) else None)


async def read(
    conn: Connection, tenant: TenantId, run: RunId, *, after: int = 0, limit: int = 500
) -> list[Event]:
    """Events after ``after``, in the caller's transaction."""
    return _events(await conn.fetch(Q.read_events, tenant.value, run.uuid, after, limit))


async def read_now(
    db: Database, tenant: TenantId, run: RunId, *, after: int = 0, limit: int = 500
) -> list[Event]:
    """Events after ``after`` in one statement of their own (one round trip)."""
    return _events(await db.statement_rows(Q.run_events, tenant.value, run.uuid, after,
                                           limit))


def _events(rows: list[Any]) -> list[Event]:
    return [Event(r["seq"], r["type"], r["data"], r["created_at"], r["format"]) for r in rows]
