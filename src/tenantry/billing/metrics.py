"""Scheduled reconciliation's gauges in the Prometheus text format, per operator model
account (a bounded label: the operator registers them; never a tenant). Read from the
database at scrape time, so every API process shows the same figures whichever worker
reconciled."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from tenantry.db import Database
from tenantry.db.queries import load

Q = load(__package__)

#: Late days are counted over this many most recent days: an alert on them clears once
#: the day is past it (or an operator reconciles it by hand).
LATE_WINDOW_DAYS = 7

RATIO = "tenantry_billing_reconciliation_difference_ratio"
LATE = "tenantry_billing_reconciliation_late_reports"
LAST_DAY = "tenantry_billing_reconciliation_last_day_timestamp_seconds"
_HELP = (
    (RATIO, "The largest absolute relative difference of any compared figure between our "
            "usage and the provider's report, on the account's most recent reconciled UTC "
            "day (0.03: 3%)."),
    (LATE, f"UTC days of the last {LATE_WINDOW_DAYS} whose provider report did not come by "
           "the deadline (recorded late)."),
    (LAST_DAY, "The start (00:00 UTC, Unix seconds) of the account's most recent reconciled "
               "day."),
)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _seconds(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp())


async def render(db: Database, today: date | None = None) -> str:
    today = today or datetime.now(UTC).date()
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.gauges, today - timedelta(days=LATE_WINDOW_DAYS))
    values: dict[str, list[str]] = {RATIO: [], LATE: [], LAST_DAY: []}
    for row in rows:
        label = f'{{account="{_label(row["account"])}"}}'
        values[LATE].append(f"{LATE}{label} {row['late']}")
        if row["difference_ratio"] is not None:
            values[RATIO].append(f"{RATIO}{label} {float(row['difference_ratio'])!r}")
        if row["last_day"] is not None:
            values[LAST_DAY].append(f"{LAST_DAY}{label} {_seconds(row['last_day'])}")
    lines: list[str] = []
    for name, help_text in _HELP:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", *values[name]]
    return "\n".join(lines) + "\n"
