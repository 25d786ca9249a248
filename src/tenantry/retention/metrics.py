"""Retention gauges in the Prometheus text format, by tenant class (the tenant's plan), never
by tenant id: candidates waiting, tombstones, blob deletions waiting, the bytes blobs hold
(the registry's counted usage: one row per tenant, never a listing of the store), the
cleanup lag, runs deleted (ever, and by each tenant's last pass). Read from the database at
scrape time, like the scheduler's gauges, so every API process shows the same figures
whichever cleaner did the work, and a restart loses nothing."""

from __future__ import annotations

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.retention.policy import DEFAULT_RUNS_DAYS

Q = load(__package__)

_GAUGES = (
    ("tenantry_retention_candidates", "candidates", "gauge",
     "Terminal runs and tasks past their tenant's retention, waiting to be deleted."),
    ("tenantry_tombstones", "tombstones", "gauge",
     "Tombstones of deleted runs (kept per the tenant's tombstone policy)."),
    ("tenantry_blob_deletions_pending", "blob_deletions", "gauge",
     "Blobs of deleted runs queued in the outbox, not yet deleted."),
    ("tenantry_blob_bytes", "blob_bytes", "gauge",
     "Bytes the tenants' blobs hold (tool outputs, sandbox saves, screenshots), as counted."),
    ("tenantry_retention_lag_seconds", "lag_seconds", "gauge",
     "How long the oldest candidate has been past its cutoff (0: none waiting)."),
    ("tenantry_retention_runs_deleted_total", "deleted_total", "counter",
     "Runs deleted by retention, erasure and on request, with a tombstone each."),
    ("tenantry_retention_last_pass_runs_deleted", "last_deleted", "gauge",
     "Runs each tenant's last finished cleanup pass deleted, summed."),
)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


async def render(db: Database) -> str:
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.gauges, DEFAULT_RUNS_DAYS)
    lines: list[str] = []
    for name, column, kind, help_text in _GAUGES:
        lines += [f"# HELP {name} {help_text} By tenant class (plan).", f"# TYPE {name} {kind}"]
        for row in rows:
            value = row[column]
            shown = f"{value:.3f}" if isinstance(value, float) else str(value)
            lines.append(f'{name}{{tenant_class="{_label(row["tenant_class"])}"}} {shown}')
    return "\n".join(lines) + "\n"
