"""Scheduled billing reconciliation: every day, each reporting operator account's previous
UTC day against the provider's own report (docs/how-to/billing.md#scheduled-reconciliation).

One job per cell holds the lease (``billing_reconcile_lease``, fenced by its epoch like the
retention cleaner's). Per account and day ``billing_reconcile_days`` says where the day
stands, and a day is recorded — its stored reconciliation (at most one per account and day:
a unique index), its state, its notification — in one transaction that first checks the
lease: a restart neither skips a day (the next pass catches up on the days after the
account's last one, at most ``lookback_days`` back) nor repeats one (a recorded day is
never taken again; a second insert of it is nothing).

A provider whose report fails, or does not reach the day yet, is asked again with backoff
until ``late_after_hours`` past the day's end; then the day is recorded ``late`` (and the
operator told), never silently skipped.

``tenantry worker`` runs :meth:`ScheduledReconciliation.run`; tests call
:meth:`ScheduledReconciliation.run_once` with their own clock."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Literal

from tenantry.backoff import backoff
from tenantry.billing.notify import FLAGGED, LATE, OperatorWebhook
from tenantry.db import DATABASE_DOWN, TRANSIENT, Connection, Database
from tenantry.db.queries import load
from tenantry.errors import TenantryError
from tenantry.ledger import reconcile
from tenantry.ledger.provider_reports import (
    AnthropicExport,
    OpenAIExport,
    ProviderUsage,
    covered_days,
    provider_usage,
)

logger = logging.getLogger(__name__)
Q = load(__package__)

DAY = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class ReconcileSettings:
    #: The UTC hour from which the previous day is reconciled (providers' reports of a day
    #: settle some hours after it ends).
    hour: int = 6
    #: After a pause (the cell down), the days caught up on: at most this many back.
    lookback_days: int = 7
    #: A report that fails or does not reach the day yet is asked again after this, doubling
    #: up to the cap (tenantry.backoff) ...
    retry_first_seconds: float = 900.0
    retry_cap_seconds: float = 4 * 3600.0
    #: ... until this long after the day's end: then the day is recorded late.
    late_after_hours: float = 48.0
    #: Fetch the cost report too and compare cost.
    costs: bool = True
    #: The job's lease, renewed at every pass.
    lease_seconds: float = 900.0
    #: How often the worker's loop makes a pass.
    poll_seconds: float = 300.0

    def __post_init__(self) -> None:
        if not 0 <= self.hour <= 23 or self.lookback_days < 1 \
                or self.poll_seconds >= self.lease_seconds:
            raise ValueError("hour 0..23, lookback_days >= 1, poll_seconds < lease_seconds")


@dataclass(frozen=True, slots=True)
class ReportingAccount:
    """An enabled operator account whose provider serves usage reports, and the admin key
    those reports are read with (never stored)."""

    account: str
    provider: str
    base_url: str
    admin_key: str = field(repr=False)


Accounts = Callable[[], Awaitable[Sequence[ReportingAccount]]]
Export = OpenAIExport | AnthropicExport
Fetch = Callable[[ReportingAccount, date, bool], Awaitable[Export]]
DayStatus = Literal["done", "pending", "late"]


@dataclass(frozen=True, slots=True)
class DayOutcome:
    account: str
    day: date
    status: DayStatus
    flagged: bool = False
    difference: float | None = None  # done: the largest relative difference of the day
    reconciliation: reconcile.Reconciliation | None = None
    error: str | None = None  # pending and late: why the report was not there


@dataclass(slots=True)
class PassOutcome:
    #: False: another job instance holds the cell's lease; this pass did nothing.
    leader: bool
    days: list[DayOutcome] = field(default_factory=list)
    notified: int = 0
    #: The lease was taken over mid-pass: what was left is the new holder's.
    lease_lost: bool = False


class _LeaseLost(Exception):
    pass


@dataclass(slots=True)
class ScheduledReconciliation:
    db: Database
    accounts: Accounts
    fetch: Fetch
    settings: ReconcileSettings = field(default_factory=ReconcileSettings)
    webhook: OperatorWebhook | None = None
    owner: str = field(default_factory=lambda: f"reconcile-{uuid.uuid4().hex[:12]}")
    _epoch: int | None = field(default=None, init=False)

    async def run(self, stop: asyncio.Event) -> None:
        """The worker's loop: a pass every ``poll_seconds`` until ``stop``; then the lease
        is given back, so another instance need not wait for it to expire."""
        try:
            while not stop.is_set():
                try:
                    await self.run_once()
                except DATABASE_DOWN as exc:
                    self.db.outage.failed("billing reconciliation", exc)
                except TRANSIENT as exc:  # its transaction rolled back: tried next pass
                    logger.warning("billing reconciliation rolled back: %s", exc)
                except Exception:  # ours: a bug, said loudly, tried again next pass
                    logger.exception("billing reconciliation pass failed")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.settings.poll_seconds)
        finally:
            if self._epoch is not None:
                with contextlib.suppress(Exception):
                    async with self.db.unscoped() as conn:
                        await conn.execute(Q.release_lease, self.owner, self._epoch)

    async def run_once(self, now: datetime | None = None) -> PassOutcome:
        """One pass at ``now`` (default: the clock): take or renew the lease, reconcile every
        account's due days, send due notifications."""
        now = now or datetime.now(UTC)
        async with self.db.unscoped() as conn:
            self._epoch = await conn.fetchval(Q.take_lease, self.owner, now,
                                              self.settings.lease_seconds)
        if self._epoch is None:
            return PassOutcome(leader=False)
        outcome = PassOutcome(leader=True)
        latest = now.date() - (DAY if now.hour >= self.settings.hour else 2 * DAY)
        try:
            for account in await self.accounts():
                for day in await self._due_days(account.account, latest, now):
                    outcome.days.append(await self._day(account, day, now))
        except _LeaseLost:
            logger.warning("billing reconciliation lease lost", extra={"owner": self.owner})
            outcome.lease_lost = True
            return outcome
        if self.webhook is not None:
            outcome.notified = await self.webhook.deliver_due(now)
        return outcome

    async def _due_days(self, account: str, latest: date, now: datetime) -> list[date]:
        """The days after the account's last known one up to ``latest`` (at most
        ``lookback_days``; only ``latest`` for an account never seen), and pending days due
        for another try."""
        async with self.db.unscoped() as conn:
            last: date | None = await conn.fetchval(Q.last_day, account)
            pending = [r["day"] for r in await conn.fetch(Q.due_pending, account, now)]
        oldest = latest - (self.settings.lookback_days - 1) * DAY
        first = latest if last is None else max(last + DAY, oldest)
        if last is not None and last + DAY < oldest:
            logger.warning("billing reconciliation: days left out (past the lookback)",
                           extra={"account": account, "from": str(last + DAY),
                                  "to": str(oldest - DAY)})
        new = [first + i * DAY for i in range((latest - first).days + 1)]
        return sorted(set(pending) | set(new))

    async def _day(self, account: ReportingAccount, day: date, now: datetime) -> DayOutcome:
        error: str
        try:
            export = await self.fetch(account, day, self.settings.costs)
            # A report the provider serves malformed (not whole days, not in dollars) is
            # waited on like a missing one: it may be fixed before the deadline.
            if day in covered_days(export):
                return await self._record_done(account, day, provider_usage(export), now)
            error = "the provider's report does not reach this day yet"
        except TenantryError as exc:
            error = f"{exc.type}: {exc.detail}"
        return await self._record_waiting(account.account, day, error, now)

    async def _record_done(self, account: ReportingAccount, day: date,
                           theirs: ProviderUsage, now: datetime) -> DayOutcome:
        ours = await reconcile.our_days(self.db, account.account, day, day)
        rows = reconcile.compare(ours, theirs, day, day)
        difference = max((r.difference for r in rows), default=0.0)
        flagged = any(r.flagged for r in rows)
        async with self.db.unscoped() as conn, conn.transaction():
            attempts = await self._fenced_attempts(conn, account.account, day, now)
            stored = await reconcile.store(
                conn, account=account.account, provider=account.provider, first=day,
                last=day, theirs=theirs, source="fetch", rows=rows, scheduled=True)
            if stored is None:  # recorded already (by an instance before this one)
                return DayOutcome(account.account, day, "done", flagged, difference)
            await conn.execute(Q.record_done, account.account, day, attempts + 1,
                               stored.reconciliation_id.uuid, difference, flagged, now)
            if flagged:
                await self._queue(conn, FLAGGED, account.account, day, now, {
                    "difference": difference, "reconciliation_id":
                        str(stored.reconciliation_id), "provider": account.provider,
                    "days": [r.to_json() for r in rows]})
        return DayOutcome(account.account, day, "done", flagged, difference, stored)

    async def _record_waiting(self, account: str, day: date, error: str,
                              now: datetime) -> DayOutcome:
        deadline = datetime(day.year, day.month, day.day, tzinfo=UTC) + DAY \
            + timedelta(hours=self.settings.late_after_hours)
        async with self.db.unscoped() as conn, conn.transaction():
            attempts = await self._fenced_attempts(conn, account, day, now) + 1
            late = now >= deadline
            retry = None if late else min(deadline, now + timedelta(seconds=backoff(
                attempts, first=self.settings.retry_first_seconds,
                cap=self.settings.retry_cap_seconds)))
            status: DayStatus = "late" if late else "pending"
            if await conn.fetchval(Q.record_waiting, account, day, status, attempts, retry,
                                   error, now) is None:  # settled already: nothing to do
                return DayOutcome(account, day, "done")
            if late:
                await self._queue(conn, LATE, account, day, now, {
                    "difference": None, "attempts": attempts, "error": error})
        return DayOutcome(account, day, status, error=error)

    async def _fenced_attempts(self, conn: Connection, account: str, day: date,
                               now: datetime) -> int:
        """Check the lease (holding its row to the commit); the day's tries so far."""
        if await conn.fetchval(Q.fence, self.owner, self._epoch, now) is None:
            raise _LeaseLost
        row = await conn.fetchrow(Q.attempts, account, day)
        return 0 if row is None else int(row["attempts"])

    async def _queue(self, conn: Connection, kind: str, account: str, day: date,
                     now: datetime, extra: dict[str, object]) -> None:
        if self.webhook is None:
            return
        await conn.execute(Q.queue_notification, account, day, kind,
                           {"kind": kind, "account": account, "day": day.isoformat(),
                            **extra}, now)
