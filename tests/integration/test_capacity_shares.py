"""Leased shares of an account's rpm/tpm in Postgres (ADR 0021): several holders — each a
worker process's gateway in production, here several in one process on one database —
divide an account by demand, never hold more than all of it between them, give back
what they leave, and take back what a crashed holder's lapsed lease held."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from tenantry.db import Database
from tenantry.models.accounts import ModelAccount
from tenantry.models.capacity import AccountCapacity
from tenantry.models.shares import FLOOR_FRACTION
from tenantry.models.sharing import CapacityShares, ShareSettings

ACCOUNT = ModelAccount("shared", "openai", "http://127.0.0.1:9/v1", ("scripted",), "us",
                       rpm=600, tpm=600_000)
# No reserve, so that the shares' rates read as round numbers.
SETTINGS = ShareSettings(headroom=0.0)


class Holder:
    """One worker process's view: its shares and its bucket of the account."""

    def __init__(self, db: Database, name: str) -> None:
        self.shares = CapacityShares(db, name, SETTINGS)
        self.bucket = AccountCapacity(ACCOUNT.rpm, ACCOUNT.tpm)
        self.shares.join(ACCOUNT, self.bucket)
        self._waiting: list[asyncio.Task[None]] = []

    @property
    def rpm(self) -> float:
        rpm = self.bucket.rates.rpm
        assert rpm is not None
        return rpm

    async def want(self, calls: int, *, in_flight: bool = True, tenant: str = "t") -> None:
        """``calls`` ask for capacity: those the bucket cannot serve yet wait, and count
        as demand at the next renewal (their runs give up then: cancelled)."""
        waiting = [asyncio.create_task(self.bucket.acquire(tenant, in_flight=in_flight,
                                                           tokens=10)) for _ in range(calls)]
        await asyncio.sleep(0)  # each asks once
        self._waiting.extend(waiting)

    async def renew(self) -> None:
        await self.shares.renew({ACCOUNT.account_id: (ACCOUNT, self.bucket)})
        for task in self._waiting:
            task.cancel()
        await asyncio.gather(*self._waiting, return_exceptions=True)
        self._waiting.clear()


async def held(conn: asyncpg.Connection) -> dict[str, float]:
    rows = await conn.fetch("SELECT holder, share FROM model_capacity_shares "
                            "WHERE account_id = $1 AND expires_at > clock_timestamp()",
                            ACCOUNT.account_id)
    return {r["holder"]: r["share"] for r in rows}


async def test_holders_divide_an_account_by_demand_and_never_hold_more_than_it(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    a, b, c = (Holder(db, name) for name in ("a", "b", "c"))
    # Alone, the first holder takes the whole account.
    await a.renew()
    assert round(a.rpm) == 600
    # Two more arrive, all idle: they take what the first gives back, over its renewals,
    # and the sum never exceeds the account at any moment in between.
    for _ in range(4):
        for holder in (b, c, a):
            await holder.renew()
            assert sum((await held(admin_conn)).values()) <= 1.0
    assert [round(h.rpm) for h in (a, b, c)] == [200, 200, 200]
    # One gets busy: it gets most of the account, the idle ones keep their floor.
    for _ in range(3):
        await a.want(50)
        for holder in (b, c, a):
            await holder.renew()
            assert sum((await held(admin_conn)).values()) <= 1.0
    floor = 600 * FLOOR_FRACTION / 3
    assert a.rpm == pytest.approx(600 - 2 * floor) and b.rpm == c.rpm == pytest.approx(floor)


async def test_concurrent_renewals_keep_the_sum_within_the_account(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    holders = [Holder(db, f"w{i}") for i in range(4)]
    for round_ in range(6):
        for i, holder in enumerate(holders):
            await holder.want(5 * ((i + round_) % 3))
        await asyncio.gather(*(h.renew() for h in holders))
        shares = await held(admin_conn)
        assert len(shares) == 4 and sum(shares.values()) <= 1.0
        assert sum(h.rpm for h in holders) <= 600 + 1e-6


async def test_a_stopped_holders_share_goes_back_and_a_crashed_ones_after_its_lease(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    a, b, c = (Holder(db, name) for name in ("a", "b", "c"))
    for _ in range(3):
        for holder in (a, b, c):
            await holder.renew()
    assert [round(h.rpm) for h in (a, b, c)] == [200, 200, 200]
    await c.shares.leave()  # stopped: its rows are gone at once
    assert set(await held(admin_conn)) == {"a", "b"}
    for _ in range(2):
        for holder in (a, b):
            await holder.renew()
    assert [round(h.rpm) for h in (a, b)] == [300, 300]
    # b crashes: its lease lapses (moved into the past rather than waited for).
    await admin_conn.execute("UPDATE model_capacity_shares SET expires_at = now() "
                             "- interval '1 second' WHERE holder = 'b'")
    await a.renew()
    assert round(a.rpm) == 600
    assert set(await held(admin_conn)) == {"a"}
    assert await admin_conn.fetchval("SELECT count(*) FROM model_capacity_shares") == 1


async def test_a_share_not_renewed_in_time_falls_back_to_a_small_one(
    db: Database,
) -> None:
    now = [0.0]
    shares = CapacityShares(db, "lonely", SETTINGS, clock=lambda: now[0])
    bucket = AccountCapacity(ACCOUNT.rpm, ACCOUNT.tpm, clock=lambda: now[0])
    shares.join(ACCOUNT, bucket)
    assert bucket.rates.rpm == 0  # nothing before the first renewal
    await shares.renew({ACCOUNT.account_id: (ACCOUNT, bucket)})
    assert round(bucket.rates.rpm or 0) == 600
    now[0] += SETTINGS.lease_seconds  # no renewal since: the lease is over
    assert bucket.rates.rpm == pytest.approx(600 * FLOOR_FRACTION)
