"""Routing, breakers and account capacity: the model gateway's pure(ish) parts."""

from __future__ import annotations

import asyncio
from collections import Counter

from tenantry.breaker import CircuitBreaker
from tenantry.models.accounts import ModelAccount
from tenantry.models.capacity import AccountCapacity
from tenantry.models.routing import candidates
from tenantry.models.types import RateLimitInfo
from tests.support.clock import Clock


def account(name: str, *, models: tuple[str, ...] = ("m",), region: str = "us",
            priority: int = 0, tenant: str | None = None) -> ModelAccount:
    return ModelAccount(name, "openai", f"http://{name}.invalid/v1", models, region,
                        priority=priority, tenant=tenant)


def ranked(accounts: list[ModelAccount], run: str, **kw: str) -> list[str]:
    args = {"model": "m", "tenant": "t1", "region": "default", "run_key": run} | kw
    return [a.account_id for a in candidates(accounts, **args)]


def test_choice_is_stable_per_run_and_spreads_runs_evenly() -> None:
    pool = [account("a"), account("b"), account("c")]
    firsts = Counter(ranked(pool, f"run_{i}")[0] for i in range(3000))
    assert set(firsts) == {"a", "b", "c"}
    assert all(800 < n < 1200 for n in firsts.values()), firsts
    assert ranked(pool, "run_7") == ranked(list(reversed(pool)), "run_7")


def test_losing_an_account_moves_only_the_runs_that_were_on_it() -> None:
    pool = [account("a"), account("b"), account("c")]
    before = {f"r{i}": ranked(pool, f"r{i}")[0] for i in range(1000)}
    after = {f"r{i}": ranked(pool[1:], f"r{i}")[0] for i in range(1000)}
    moved = {run for run in before if before[run] != after[run]}
    assert moved == {run for run, first in before.items() if first == "a"}


def test_current_account_first_then_priority() -> None:
    pool = [account("main", priority=0), account("spare", priority=1),
            account("spare2", priority=1)]
    assert ranked(pool, "r1")[0] == "main"
    assert ranked(pool, "r1", current="spare2")[0] == "spare2"  # sticky beats priority
    assert ranked(pool, "r1")[1:] in (["spare", "spare2"], ["spare2", "spare"])


def test_region_and_models_filter_accounts() -> None:
    pool = [account("us", region="us"), account("eu", region="eu-west-1"),
            account("eu2", region="eu", models=("other",)),
            account("any", models=("*",), region="eu-central")]
    assert set(ranked(pool, "r", region="eu")) == {"eu", "any"}
    assert set(ranked(pool, "r", region="default")) == {"us", "eu", "any"}
    assert ranked(pool, "r", region="ap") == []
    assert set(ranked(pool, "r", region="eu", model="other")) == {"eu2", "any"}


def test_family_patterns() -> None:
    fam = account("f", models=("scripted/*",))
    assert fam.serves("scripted/echo") and not fam.serves("scripted") \
        and not fam.serves("gpt-4o")


def test_a_tenants_own_accounts_replace_the_platforms_and_serve_nobody_else() -> None:
    pool = [account("platform"), account("byok", tenant="t1")]
    assert ranked(pool, "r", tenant="t1") == ["byok"]
    assert ranked(pool, "r", tenant="t2") == ["platform"]


def test_breaker_opens_after_threshold_and_probes_one_at_a_time() -> None:
    clock = Clock()
    breaker = CircuitBreaker(3, 10.0, max_reset_seconds=80.0, clock=clock)
    for _ in range(2):
        breaker.failed()
    assert breaker.state == "closed"
    breaker.failed()
    assert breaker.state == "open" and not breaker.allow()
    # Calls that were already in flight failing too do not stretch the cool-down.
    for _ in range(50):
        breaker.failed()
    assert breaker.seconds_until_half_open() == 10.0
    clock.now += 10
    assert breaker.state == "half_open"
    assert breaker.allow() and not breaker.allow()  # exactly one probe
    breaker.failed()  # the probe failed: open again, twice as long
    assert breaker.state == "open" and breaker.seconds_until_half_open() == 20.0
    clock.now += 20
    assert breaker.allow()
    breaker.succeeded()
    assert breaker.state == "closed" and breaker.opens == 0


async def test_capacity_serves_runs_in_flight_first_then_the_least_served_tenant() -> None:
    capacity = AccountCapacity()
    capacity.rate_limited(0.05)  # a 429: nobody goes for 50 ms
    order: list[str] = []

    async def call(name: str, tenant: str, in_flight: bool) -> None:
        await capacity.acquire(tenant, in_flight=in_flight, tokens=0)
        order.append(name)

    calls = [call("whale-1", "whale", False), call("whale-2", "whale", False),
             call("whale-3", "whale", False), call("minnow-1", "minnow", False),
             call("whale-step", "whale", True), call("minnow-2", "minnow", False)]
    tasks = []
    for c in calls:
        tasks.append(asyncio.create_task(c))
        await asyncio.sleep(0)  # arrive in this order
    assert capacity.waiting == 6
    await asyncio.gather(*tasks)
    # The in-flight step first; then whale and minnow alternate instead of the whale's
    # burst going first just because it arrived first.
    assert order == ["whale-step", "minnow-1", "whale-1", "minnow-2", "whale-2", "whale-3"]


async def test_requests_per_minute_bucket_and_provider_headers_hold_calls() -> None:
    clock = Clock()
    capacity = AccountCapacity(rpm=2, clock=clock)
    await capacity.acquire("t", in_flight=False, tokens=0)
    await capacity.acquire("t", in_flight=False, tokens=0)
    third = asyncio.create_task(capacity.acquire("t", in_flight=False, tokens=0))
    await asyncio.sleep(0.01)
    assert not third.done()  # the bucket is empty: ~30 s until the next request
    clock.now += 30
    await asyncio.wait_for(third, 1.0)
    # The provider says no requests remain for 5 s: blocked for 5 s whatever the bucket.
    clock.now += 60
    capacity.observe(RateLimitInfo(remaining_requests=0, reset_requests_seconds=5.0))
    assert 4.9 < capacity.blocked_for() <= 5.0
