"""Scheduler gauges in the Prometheus text format: queue depth and age, leases held, runs
waiting, parked runs overdue for waking — per tenant class (the tenant's plan), never per
tenant id, so the label set stays as small as the list of plans. Read from the trigger-kept
counters (and, for parked runs, the runs) at scrape time: a missed scrape loses nothing (the
ledger, not metrics, holds spending authority)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tenantry.db import Database
from tenantry.db.queries import load

Q = load(__package__)

_GAUGES = (
    ("tenantry_runs_queued", "queued", "Runs waiting for a worker slot."),
    ("tenantry_leases_active", "running", "Runs held by a worker (active leases)."),
    ("tenantry_runs_waiting", "waiting",
     "Runs waiting for an approval, a model provider, a tool's task or child run, or "
     "their tenant's monthly spend cap, holding no slot."),
    ("tenantry_queue_oldest_age_seconds", "oldest_queued_seconds",
     "Age of the oldest queued run."),
)
#: Parked runs (waiting on a model provider) past the time they were due to be woken: the
#: workers' waker queues them within seconds of it, so a count that stays up means no
#: waker is running (routines/parked_overdue.sql).
_PARKED = (
    ("tenantry_parked_runs_overdue", "overdue",
     "Parked runs past their wake-up time and not woken yet."),
    ("tenantry_parked_runs_overdue_seconds", "oldest_overdue_seconds",
     "How long the parked run furthest past its wake-up time has waited beyond it (0: "
     "none)."),
)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


async def render(db: Database) -> str:
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.scheduler_gauges)
        parked = await conn.fetch(Q.parked_overdue)
    return _render(_GAUGES, rows) + _render(_PARKED, parked)


def _render(gauges: tuple[tuple[str, str, str], ...], rows: Sequence[Any]) -> str:
    lines: list[str] = []
    for name, column, help_text in gauges:
        lines += [f"# HELP {name} {help_text} By tenant class (plan).",
                  f"# TYPE {name} gauge"]
        for row in rows:
            value = row[column]
            shown = f"{value:.3f}" if isinstance(value, float) else str(value)
            lines.append(f'{name}{{tenant_class="{_label(row["tenant_class"])}"}} {shown}')
    return "\n".join(lines) + "\n"


async def render_runs(db: Database) -> str:
    """``tenantry_runs``: runs by status — live ones from the scheduler's counters, ended
    ones from their trigger-kept totals — by tenant class."""
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.runs_by_status)
    lines = ["# HELP tenantry_runs Runs by status (queued, running, waiting, finished, "
             "failed, cancelled). By tenant class (plan).", "# TYPE tenantry_runs gauge"]
    for row in rows:
        lines.append(f'tenantry_runs{{tenant_class="{_label(row["tenant_class"])}",'
                     f'status="{_label(row["status"])}"}} {row["runs"]}')
    return "\n".join(lines) + "\n"
