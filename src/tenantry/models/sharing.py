"""Leased shares of provider accounts, held in Postgres by every gateway of a cell
(ADR 0021).

Each worker process's gateway holds one row per account with an rpm or tpm it serves:
its demand and its share, leased for ``lease_seconds`` and renewed every
``renew_seconds`` by a background task — one short transaction for all accounts, never a
round trip per model call. At each renewal it reads the other live holders, computes its
target (:func:`tenantry.models.shares.targets`), and takes it: lower at once, higher only
as far as the others leave. Its buckets then run at its share of the account's limits
less a reserve (:func:`tenantry.models.shares.reserve`), paced: one request in hand at most.

A share is good locally until its lease would end (counted from before the renewal was
sent, so before Postgres lets others take it); a worker that cannot renew then falls back
to a tenth of an even split. A stopping gateway deletes its rows; a crashed one's expire
and the others take them at their next renewal."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import asyncpg

from tenantry.db import DATABASE_DOWN, Database
from tenantry.db.queries import load
from tenantry.models.accounts import ModelAccount
from tenantry.models.capacity import AccountCapacity, Rates
from tenantry.models.shares import FLOOR_FRACTION, Demand, Holder, next_share, reserve, targets

logger = logging.getLogger(__name__)
Q = load(__package__)

# Giving shares back is best effort: they expire anyway.
_LEAVE_FAILURES: tuple[type[Exception], ...] = (*DATABASE_DOWN, asyncpg.PostgresError,
                                                TimeoutError)

__all__ = ["CapacityShares", "ShareSettings", "limited"]


@dataclass(frozen=True, slots=True)
class ShareSettings:
    renew_seconds: float = 2.0
    # While a holder's share is below its target (others have not given back yet).
    short_renew_seconds: float = 0.5
    lease_seconds: float = 10.0
    # Kept unused of each account's limit: clock skew against the provider's window, and
    # each holder's one request in hand (ADR 0021).
    headroom: float = 0.05
    # 0: each holder paces its share evenly, so the sum over any window is bounded (a
    # burst of B seconds would add B seconds of the whole account to that bound).
    burst_seconds: float = 0.0


def limited(account: ModelAccount) -> bool:
    return bool(account.rpm or account.tpm)


@dataclass(slots=True)
class _Held:
    share: float = 0.0
    until: float = 0.0  # monotonic: when this share stops being ours to use
    fallback: Rates | None = None


class CapacityShares:
    def __init__(self, db: Database, holder: str, settings: ShareSettings | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._db = db
        self.holder = holder
        self.settings = settings or ShareSettings()
        self._clock = clock
        self._held: dict[str, _Held] = {}
        self._demand_since = clock()
        self.short = False  # some share is below its target: renew again soon

    def rates(self, account: ModelAccount, share: float) -> Rates:
        """What ``share`` of ``account`` allows this process."""
        def part(limit: int | None) -> float | None:
            return share * (limit - reserve(limit, self.settings.headroom)) if limit else None
        return Rates(part(account.rpm), part(account.tpm), self.settings.burst_seconds)

    def join(self, account: ModelAccount, capacity: AccountCapacity) -> None:
        """A bucket this process just built: nothing until its first renewal takes a share
        (the gateway renews before it serves, and right after new accounts appear)."""
        self.short = True  # renew soon
        held = self._held.get(account.account_id)
        if held is not None and held.until > self._clock():
            # The account changed (a new bucket): the share we hold is still ours.
            capacity.set_rates(self.rates(account, held.share), until=held.until,
                               fallback=held.fallback)
            return
        capacity.set_rates(self.rates(account, 0.0),
                           until=self._clock() + self.settings.lease_seconds,
                           fallback=self.rates(account, FLOOR_FRACTION))

    async def renew(self, buckets: Mapping[str, tuple[ModelAccount, AccountCapacity]]) -> None:
        """Publish this process's demand and take its share of each limited account.
        A failure (Postgres down, a deadlock) leaves every share as it was until its lease
        runs out locally; the next renewal tries again."""
        settings = self.settings
        accounts = sorted(a for a, (account, _) in buckets.items() if limited(account))
        if not accounts:
            return
        started = self._clock()
        elapsed, self._demand_since = started - self._demand_since, started
        demands = {a: buckets[a][1].demand(tokens=not buckets[a][0].rpm, elapsed=elapsed,
                                           horizon=settings.renew_seconds) for a in accounts}
        until = started + settings.lease_seconds
        try:
            async with asyncio.timeout(settings.lease_seconds / 2), \
                    self._db.unscoped() as conn, conn.transaction():
                await conn.execute(Q.capacity_lock, accounts)
                others: dict[str, list[Holder]] = {a: [] for a in accounts}
                for row in await conn.fetch(Q.capacity_holders, accounts, self.holder):
                    others[row["account_id"]].append(Holder(
                        row["holder"], Demand.from_json(row["demand"]), float(row["share"])))
                taken = {a: self._take(buckets[a][0], others[a], demands[a]) for a in accounts}
                # Lower before the commit lets others take the difference; raise after.
                for a in accounts:
                    held, (share, _, holders) = self._held.get(a, _Held()), taken[a]
                    if share < held.share:
                        account = buckets[a][0]
                        buckets[a][1].set_rates(
                            self.rates(account, share), until=held.until,
                            fallback=self._fallback(account, share, holders))
                await conn.execute(Q.capacity_hold, accounts, self.holder,
                                   [demands[a].to_json() for a in accounts],
                                   [taken[a][0] for a in accounts], settings.lease_seconds)
        except DATABASE_DOWN as exc:
            self._db.outage.failed("model capacity shares", exc)
            return
        except (asyncpg.PostgresError, TimeoutError) as exc:  # a deadlock, a slow server
            logger.warning("model capacity shares not renewed: %r", exc)
            return
        self.short = False
        for a in accounts:
            share, target, holders = taken[a]
            account, capacity = buckets[a]
            fallback = self._fallback(account, share, holders)
            self._held[a] = _Held(share, until, fallback)
            capacity.set_rates(self.rates(account, share), until=until, fallback=fallback)
            self.short = self.short or share < target - 1e-6

    def _fallback(self, account: ModelAccount, share: float, holders: int) -> Rates:
        """Should the lease lapse: a tenth of an even split, never more than we hold."""
        return self.rates(account, min(share, FLOOR_FRACTION / holders))

    def _take(self, account: ModelAccount, others: list[Holder],
              demand: Demand) -> tuple[float, float, int]:
        """(the share to hold now, the target, how many hold the account)."""
        unit_limit = account.rpm or account.tpm or 0
        usable = unit_limit - reserve(unit_limit, self.settings.headroom)
        held = self._held.get(account.account_id)
        mine = held.share if held is not None and held.until > self._clock() else 0.0
        me = Holder(self.holder, demand, mine)
        target = targets([*others, me], usable)[self.holder]
        share = next_share(target, mine, sum(o.share for o in others))
        return share, target, len(others) + 1

    async def leave(self) -> None:
        """Give every share back (a stopping gateway): the others take it at their next
        renewal instead of after the lease."""
        if not self._held:
            return
        try:
            async with asyncio.timeout(self.settings.lease_seconds / 2), \
                    self._db.unscoped() as conn:
                await conn.execute(Q.capacity_leave, self.holder)
        except _LEAVE_FAILURES as exc:
            logger.info("model capacity shares not given back (they expire): %s", exc)
        self._held.clear()
