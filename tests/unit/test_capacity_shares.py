"""The arithmetic of shared account capacity (ADR 0021): how an account is divided among
the worker processes holding it, and how a worker's bucket runs at its share."""

from __future__ import annotations

import asyncio

import pytest

from tenantry.models.capacity import AccountCapacity, Rates
from tenantry.models.shares import (
    FLOOR_FRACTION,
    MAX_TENANTS,
    OTHERS,
    Demand,
    Holder,
    fill,
    next_share,
    reserve,
    targets,
)


def holder(name: str, in_flight: float = 0.0, share: float = 0.0, **tenants: float) -> Holder:
    return Holder(name, Demand(in_flight, tenants), share)


def test_fill_is_max_min_fair() -> None:
    assert fill(10, [2, 10, 10]) == [2, 4, 4]
    assert fill(10, [1, 2]) == [1, 2]  # all wants met: the rest is not handed out here
    assert fill(9, [0, 10, 10, 10]) == [0, 3, 3, 3]
    assert fill(0, [5]) == [0]


def test_idle_holders_split_evenly_and_the_sum_is_the_account() -> None:
    shares = targets([holder("a"), holder("b"), holder("c"), holder("d")], limit=100)
    assert shares == pytest.approx({"a": 0.25, "b": 0.25, "c": 0.25, "d": 0.25})


def test_a_busy_holder_gets_most_and_an_idle_one_keeps_its_floor() -> None:
    shares = targets([holder("busy", in_flight=1000), holder("idle")], limit=100)
    floor = FLOOR_FRACTION / 2  # the floors, split evenly
    assert shares == pytest.approx({"busy": 1 - floor, "idle": floor})


def test_runs_in_flight_are_served_before_first_steps_across_holders() -> None:
    # "old" has later steps of runs in flight waiting; "new" only first steps of new runs.
    shares = targets([holder("old", in_flight=60), holder("new", t1=1000)], limit=100)
    # The floors, then 60 to in-flight steps first, what is left to new runs.
    floor = 100 * FLOOR_FRACTION / 2
    assert shares["old"] == pytest.approx((floor + 60) / 100)
    assert shares["new"] == pytest.approx((100 - floor - 60) / 100)


def test_first_steps_are_fair_over_tenants_across_holders_not_per_holder() -> None:
    # The whale's runs are on three workers, the small tenant's on one: each tenant gets
    # the same part (max-min), not each worker.
    holders = [holder("w1", whale=1000), holder("w2", whale=1000), holder("w3", whale=1000),
               holder("w4", small=1000)]
    shares = targets(holders, limit=400)
    floor = 400 * FLOOR_FRACTION / 4
    per_tenant = (400 - 4 * floor) / 2
    assert shares["w4"] == pytest.approx((floor + per_tenant) / 400)
    for w in ("w1", "w2", "w3"):
        assert shares[w] == pytest.approx((floor + per_tenant / 3) / 400)
    # A tenant that wants little gets what it wants; the rest goes to the other.
    shares = targets([holder("w1", whale=1000), holder("w2", small=10)], limit=200)
    assert shares["w2"] == pytest.approx((200 * FLOOR_FRACTION / 2 + 10) / 200)
    assert sum(shares.values()) == pytest.approx(1.0)


def test_what_nobody_wants_is_split_evenly() -> None:
    shares = targets([holder("a", in_flight=10), holder("b")], limit=100)
    # The floors; a wants 10 more; the rest is split evenly.
    even = (100 - 100 * FLOOR_FRACTION - 10) / 2
    floor = 100 * FLOOR_FRACTION / 2
    assert shares == pytest.approx({"a": (floor + 10 + even) / 100, "b": (floor + even) / 100})
    assert targets([], limit=100) == {}
    assert targets([holder("a")], limit=0) == {"a": 0.0}


def test_a_holder_lowers_at_once_and_raises_only_into_what_the_others_leave() -> None:
    assert next_share(0.25, held=0.9, others=0.1) == 0.25
    # The others still hold 0.9 (they give back at their own renewals): only 0.1 is free.
    assert next_share(0.5, held=0.0, others=0.9) == pytest.approx(0.1)
    # Never below what it holds, never over the whole account.
    assert next_share(0.5, held=0.2, others=0.85) == 0.2
    assert next_share(1.0, held=0.0, others=0.0) < 1.0


def test_holders_renewing_in_turn_converge_and_never_hold_more_than_the_account() -> None:
    demand = {"a": Demand(in_flight=500), "b": Demand(), "c": Demand(tenants={"t": 30})}
    held = {"a": 1.0, "b": 0.0, "c": 0.0}  # "a" was alone; "b" and "c" just joined
    for _ in range(4):
        for name in ("b", "c", "a"):
            everyone = [Holder(n, demand[n], held[n]) for n in held]
            target = targets(everyone, limit=100)[name]
            held[name] = next_share(target, held[name],
                                    sum(s for n, s in held.items() if n != name))
            assert sum(held.values()) <= 1.0
    final = targets([Holder(n, demand[n], held[n]) for n in held], limit=100)
    assert held == pytest.approx(final, abs=1e-6)


def test_the_reserve() -> None:
    assert reserve(240, 0.05) == 12
    assert reserve(60, 0.05) == 3
    assert reserve(10, 0.05) == 1  # at least one
    assert reserve(1, 0.05) == 0  # never all of it
    assert reserve(600, 0.0) == 0


def test_demand_is_stored_with_its_biggest_tenants_and_read_back() -> None:
    many = {f"ten_{i:03d}": float(i + 1) for i in range(MAX_TENANTS + 5)}
    stored = Demand(in_flight=2.0, tenants=many).to_json()
    assert len(stored["tenants"]) == MAX_TENANTS + 1
    assert stored["tenants"][OTHERS] == pytest.approx(sum(range(1, 6)))
    back = Demand.from_json(stored)
    assert back.total == pytest.approx(Demand(2.0, many).total)
    assert Demand.from_json("nonsense") == Demand()
    assert Demand.from_json({"in_flight": -3, "tenants": {"t": "x"}}).total == 0


async def test_a_bucket_at_its_share_holds_its_burst_then_spaces_calls() -> None:
    now = [0.0]
    bucket = AccountCapacity(rpm=600, clock=lambda: now[0])
    # A quarter of 600 rpm, a burst of one second of it (2.5 calls).
    bucket.set_rates(Rates(rpm=150, burst_seconds=1.0))
    for _ in range(2):
        await bucket.acquire("t", in_flight=True, tokens=0)
    third = asyncio.create_task(bucket.acquire("t", in_flight=True, tokens=0))
    await asyncio.sleep(0)
    assert not third.done() and bucket.waiting == 1
    now[0] += 60 / 150  # one call's worth of time
    await asyncio.wait_for(third, 1)


def test_a_share_past_its_lease_falls_back() -> None:
    now = [0.0]
    bucket = AccountCapacity(rpm=600, clock=lambda: now[0])
    bucket.set_rates(Rates(rpm=300, burst_seconds=1.0), until=10.0,
                     fallback=Rates(rpm=37.5, burst_seconds=1.0))
    assert bucket.rates.rpm == 300
    now[0] = 10.0
    assert bucket.rates.rpm == 37.5


async def test_a_bucket_counts_what_was_asked_by_runs_in_flight_and_by_tenant() -> None:
    bucket = AccountCapacity(rpm=6000)
    await bucket.acquire("acme", in_flight=True, tokens=100)
    await bucket.acquire("acme", in_flight=False, tokens=100)
    await bucket.acquire("globex", in_flight=False, tokens=300)
    calls = bucket.demand(tokens=False, elapsed=30.0, horizon=2.0)
    assert calls == Demand(in_flight=2.0, tenants={"acme": 2.0, "globex": 2.0})
    # Counted once: the next renewal sees only what came since.
    assert bucket.demand(tokens=True, elapsed=30.0, horizon=2.0).total == 0


async def test_a_bucket_with_no_share_yet_lets_nothing_through() -> None:
    bucket = AccountCapacity(rpm=600)
    bucket.set_rates(Rates(rpm=0.0, burst_seconds=1.0))
    waiting = asyncio.create_task(bucket.acquire("t", in_flight=True, tokens=0))
    await asyncio.sleep(0)
    assert bucket.waiting == 1
    bucket.set_rates(Rates(rpm=600, burst_seconds=1.0))  # the first renewal's share
    await asyncio.wait_for(waiting, 5)


async def test_a_paced_bucket_holds_one_request_and_no_tokens_ahead() -> None:
    """The shares' buckets (burst 0): one call at once, the next a share's spacing later;
    a call's tokens are paid for before the next goes. (Each first call takes the fast
    path, so the second's refusal is decided as it asks.)"""
    now = [100.0]
    paced = Rates(rpm=600, tpm=6_000, burst_seconds=0.0)
    bucket = AccountCapacity(rpm=600, tpm=60_000, clock=lambda: now[0])
    bucket.set_rates(paced)
    now[0] += 10  # idle a long while: still only one in hand
    await bucket.acquire("t", in_flight=True, tokens=0)
    second = asyncio.create_task(bucket.acquire("t", in_flight=True, tokens=0))
    await asyncio.sleep(0)
    assert bucket.waiting == 1
    now[0] += 0.2  # 600 rpm: one every 0.1 s
    await asyncio.wait_for(second, 1)

    bucket = AccountCapacity(rpm=600, tpm=60_000, clock=lambda: now[0])
    bucket.set_rates(paced)
    await bucket.acquire("t", in_flight=True, tokens=300)
    now[0] += 1.0  # ten requests' spacing, but 300 tokens at 6,000 a minute take 3 s
    second = asyncio.create_task(bucket.acquire("t", in_flight=True, tokens=0))
    await asyncio.sleep(0)
    assert bucket.waiting == 1
    now[0] += 2.0
    await asyncio.wait_for(second, 1)
