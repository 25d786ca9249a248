"""Scheduler gauges in the Prometheus text format: queue depth and age, leases held, runs
waiting — per tenant class (the tenant's plan), never per tenant id, so the label set stays
as small as the list of plans. Read from the trigger-kept counters at scrape time: a
missed scrape loses nothing (the ledger, not metrics, holds spending authority)."""

from __future__ import annotations

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


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


async def render(db: Database) -> str:
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.scheduler_gauges)
    lines: list[str] = []
    for name, column, help_text in _GAUGES:
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
