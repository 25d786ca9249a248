"""Billing reconciliation: our usage facts per provider account and UTC day against the
provider's own report of the same account and days.

A day is flagged when any figure both sides report differs by more than 1% of the
provider's figure (the invoice is the reference), or when the day appears on one side only.
A provider figure of 0 is matched only by 0 (any usage we recorded against nothing billed
is flagged; its relative difference is shown as ``None``). Figures a side does not report
(Anthropic: requests; OpenAI: cache writes; a report without costs: cost) are not compared.
Every reconciliation is stored (operator data) for the console."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

import asyncpg

from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.ids import ReconciliationId
from tenantry.ledger.provider_reports import DayUsage, ProviderUsage

Q = load(__package__)

TOLERANCE_PERCENT = 1
FIGURES = ("requests", "input_tokens", "cached_input_tokens", "cache_write_input_tokens",
           "output_tokens", "cost_micros")
Status = Literal["match", "differs", "only_ours", "only_provider"]
Source = Literal["export", "fetch"]


@dataclass(frozen=True, slots=True)
class Figure:
    name: str
    ours: int
    theirs: int
    relative_diff: float | None  # (ours - theirs) / theirs; None when not computable
    flagged: bool

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ours": self.ours, "theirs": self.theirs,
                "relative_diff": self.relative_diff, "flagged": self.flagged}


@dataclass(frozen=True, slots=True)
class DayRow:
    day: date
    status: Status
    figures: tuple[Figure, ...]

    @property
    def flagged(self) -> bool:
        return self.status != "match"

    @property
    def difference(self) -> float:
        """The largest absolute relative difference of any compared figure (0.03: 3%); a
        figure the provider reports as 0 and we do not counts as 1 (100%)."""
        return max((1.0 if f.relative_diff is None else abs(f.relative_diff)
                    for f in self.figures), default=0.0)

    def to_json(self) -> dict[str, Any]:
        return {"day": self.day.isoformat(), "status": self.status, "flagged": self.flagged,
                "figures": [f.to_json() for f in self.figures]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DayRow:
        return cls(date.fromisoformat(data["day"]), data["status"], tuple(
            Figure(f["name"], f["ours"], f["theirs"], f["relative_diff"], f["flagged"])
            for f in data["figures"]))


@dataclass(frozen=True, slots=True)
class Reconciliation:
    reconciliation_id: ReconciliationId
    account: str
    provider: str
    from_day: date
    to_day: date
    source: Source
    cost_compared: bool
    days: tuple[DayRow, ...]
    created_at: datetime

    @property
    def flagged(self) -> tuple[DayRow, ...]:
        return tuple(d for d in self.days if d.flagged)

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Reconciliation:
        return cls(ReconciliationId(row["reconciliation_id"]), row["account"],
                   row["provider"], row["from_day"], row["to_day"], row["source"],
                   row["cost_compared"], tuple(DayRow.from_json(d) for d in row["days"]),
                   row["created_at"])


def _figure(name: str, ours: int, theirs: int) -> Figure:
    if theirs == 0:
        return Figure(name, ours, theirs, 0.0 if ours == 0 else None, ours != 0)
    diff = ours - theirs
    # Integers compared exactly: |diff| / theirs > 1%  ⇔  100·|diff| > theirs.
    return Figure(name, ours, theirs, diff / theirs, 100 * abs(diff) > TOLERANCE_PERCENT * theirs)


def compare_day(day: date, ours: DayUsage | None, theirs: DayUsage | None,
                figures: frozenset[str]) -> DayRow:
    """One UTC day's row over the ``figures`` the provider reports; ``None`` for a side on
    which the day does not appear (its figures count as 0)."""
    compared = []
    for name in FIGURES:
        if name in figures:
            mine = getattr(ours, name) if ours is not None else 0
            billed = getattr(theirs, name) if theirs is not None else 0
            compared.append(_figure(name, int(mine or 0), int(billed or 0)))
    status: Status
    if ours is None:
        status = "only_provider"
    elif theirs is None:
        status = "only_ours"
    else:
        status = "differs" if any(f.flagged for f in compared) else "match"
    return DayRow(day, status, tuple(compared))


def compare(ours: dict[date, DayUsage], theirs: ProviderUsage, first: date,
            last: date) -> tuple[DayRow, ...]:
    """Rows for every day in ``[first, last]`` that appears on either side (a day neither
    side used is no row); days of the export outside the window are ignored."""
    days = sorted(d for d in set(ours) | set(theirs.days) if first <= d <= last)
    return tuple(compare_day(d, ours.get(d), theirs.days.get(d), theirs.figures)
                 for d in days)


async def our_days(db: Database, account: str, first: date, last: date) -> dict[date, DayUsage]:
    lo = datetime(first.year, first.month, first.day, tzinfo=UTC)
    hi = datetime(last.year, last.month, last.day, tzinfo=UTC) + timedelta(days=1)
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.usage_per_account_day, account, lo, hi)
    return {r["day"]: DayUsage(r["day"], int(r["calls"]), int(r["input_tokens"]),
                               int(r["cached_input_tokens"]),
                               int(r["cache_write_input_tokens"]), int(r["output_tokens"]),
                               int(r["cost_micros"])) for r in rows}


async def reconcile(
    db: Database, *, account: str, provider: str, first: date, last: date,
    theirs: ProviderUsage, source: Source,
) -> Reconciliation:
    """Compare and store. ``theirs`` is :func:`provider_reports.provider_usage` of the
    provider's export."""
    rows = compare(await our_days(db, account, first, last), theirs, first, last)
    async with db.unscoped() as conn:
        stored = await store(conn, account=account, provider=provider, first=first,
                             last=last, theirs=theirs, source=source, rows=rows)
    assert stored is not None  # only a scheduled day is stored at most once
    return stored


async def store(
    conn: Connection, *, account: str, provider: str, first: date, last: date,
    theirs: ProviderUsage, source: Source, rows: tuple[DayRow, ...],
    scheduled: bool = False,
) -> Reconciliation | None:
    """Store compared ``rows`` on ``conn`` (the caller's transaction). ``scheduled``: the
    scheduled job's reconciliation of the one day ``first`` (== ``last``), stored once per
    account and day — None when it is stored already."""
    rec_id = ReconciliationId.new()
    cost_compared = "cost_micros" in theirs.figures
    flagged = sum(1 for r in rows if r.flagged)
    created_at = await conn.fetchval(
        Q.insert_reconciliation, rec_id.uuid, account, provider, first, last, source,
        cost_compared, flagged, [r.to_json() for r in rows], first if scheduled else None)
    if created_at is None:
        return None
    return Reconciliation(rec_id, account, provider, first, last, source, cost_compared,
                          rows, created_at)


async def recent(db: Database, account: str | None = None, limit: int = 20
                 ) -> list[Reconciliation]:
    """The newest reconciliations (of one account, or of all), newest first."""
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.recent_reconciliations, account, limit)
    return [Reconciliation.from_row(r) for r in rows]
