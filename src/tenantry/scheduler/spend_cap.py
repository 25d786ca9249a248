"""Runs waiting for their tenant's monthly spend cap (ADR 0035). A run in flight whose next
model call would pass the cap waits — status ``waiting``, slot released, its log intact —
instead of ending. Postgres decides when it may go on (migration 0040):

* the policy write that raises or removes the cap wakes the runs it lets go, in its own
  transaction (a trigger on ``tenant_policies``); the status change notifies the workers as
  any queued run does;
* the workers' periodic recheck, here, wakes those whose month has ended, and those a cap
  change missed (their park committed just after the write, or the write woke only a first
  batch); and it holds runs in flight that went back to the queue while their tenant was
  at its cap (the fair claim would pass them over without a word), so that they too wait
  and say why.

Nothing else wakes a waiting run, so a recheck is two statements per pass over the few runs
concerned, and no run is woken twice for one change."""

from __future__ import annotations

from tenantry.db import Database
from tenantry.db.queries import load

Q = load(__package__)

BATCH = 1000  # runs moved per statement


async def recheck(db: Database, *, limit: int = BATCH) -> int:
    """Hold, then wake, at most ``limit`` runs each, of every tenant; returns how many
    changed (``limit`` or more: there may be more to do)."""
    # No reset after either: they set nothing on the connection.
    held = await db.statement(Q.hold_spend_capped, limit)
    woken = await db.statement(Q.wake_spend_capped, None, limit)
    return sum(int(row[0] or 0) for row in (held, woken) if row is not None)
