"""Fair claim, admission, token buckets, spend caps and the budget ledger, on real Postgres
(the claim function itself) and end to end through the API and a real worker."""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from tenantry.agents import service as agents
from tenantry.agents.spec import AgentSpec
from tenantry.db import Database
from tenantry.errors import LeaseLost
from tenantry.ids import RunId
from tenantry.jsonutil import digest
from tenantry.ledger import budget
from tenantry.ledger.tokens import TokenUsage
from tenantry.runs import service as runs
from tenantry.runs.lease import Lease, claim
from tenantry.scheduler import policy
from tenantry.scheduler.policy import TenantPolicy
from tenantry.tenants import service as tenants
from tests.support.api import Api
from tests.support.db import login_dsn
from tests.support.scheduler import tenant_with_runs
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker


def _by_tenant(leases: list[Lease]) -> Counter[str]:
    return Counter(lease.tenant.value for lease in leases)


async def _finish(conn: asyncpg.Connection, leases: list[Lease]) -> None:
    await conn.executemany(
        "UPDATE runs SET status = 'finished' WHERE tenant_id = $1 AND run_id = $2",
        [(x.tenant.value, x.run.uuid) for x in leases])


async def test_a_tenant_at_max_running_is_passed_over_while_others_are_served(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    capped = await tenant_with_runs(db, "capped", 10, TenantPolicy(max_running=2))
    other = await tenant_with_runs(db, "other", 10)
    leases = await claim(db, "w1", 10, 30.0)
    assert _by_tenant(leases) == {capped.value: 2, other.value: 8}
    # Still at its ceiling: more claims take nothing of it, even with slots idle.
    assert _by_tenant(await claim(db, "w2", 10, 30.0)) == {other.value: 2}
    assert await claim(db, "w3", 10, 30.0) == []
    # One of its runs ends: exactly one more may start.
    await _finish(admin_conn, [x for x in leases if x.tenant == capped][:1])
    assert _by_tenant(await claim(db, "w4", 10, 30.0)) == {capped.value: 1}


async def test_weights_share_contended_slots_in_proportion(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    heavy = await tenant_with_runs(db, "heavy", 400, TenantPolicy(weight=3))
    light = await tenant_with_runs(db, "light", 400, TenantPolicy(weight=1))
    slots, held, served = 40, [], Counter[str]()
    rng = random.Random(7)
    # A long window of a full cell: each round some runs end and the freed slots are
    # claimed again. Over it, slots go 3:1.
    for _ in range(30):
        new = await claim(db, "w", slots - len(held), 30.0)
        served.update(_by_tenant(new))
        held.extend(new)
        done = rng.sample(held, 10)
        await _finish(admin_conn, done)
        held = [x for x in held if x not in done]
    share = served[heavy.value] / (served[heavy.value] + served[light.value])
    assert abs(share - 0.75) < 0.05, served  # stated tolerance: ±5 points of share
    await claim(db, "w", slots - len(held), 30.0)  # a full cell again: exactly 3:1
    running = {r["tenant_id"]: r["running"] for r in await admin_conn.fetch(
        "SELECT tenant_id, running FROM tenant_load")}
    assert running[heavy.value] == 3 * running[light.value]


async def test_an_idle_share_is_lent_and_returns_when_the_owner_has_work(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    whale = await tenant_with_runs(db, "whale", 100)
    first = await claim(db, "w", 20, 30.0)
    assert _by_tenant(first) == {whale.value: 20}  # nobody else wants the slots: borrow all
    minnow = await tenant_with_runs(db, "minnow", 5)
    await _finish(admin_conn, first[:5])
    # The freed slots go to the minnow (0 running) before the whale (15 running).
    assert _by_tenant(await claim(db, "w", 5, 30.0)) == {minnow.value: 5}


async def test_racing_claimers_never_share_a_run_nor_pass_a_ceiling(
    database_dsn: str, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    capped = await tenant_with_runs(db, "racer-a", 60, TenantPolicy(max_running=7))
    await tenant_with_runs(db, "racer-b", 60)
    pools = [await Database.connect(database_dsn, min_size=1, max_size=1) for _ in range(8)]
    try:
        results = await asyncio.gather(*(claim(p, f"w{i}", 6, 30.0)
                                         for i, p in enumerate(pools)))
    finally:
        for p in pools:
            await p.close()
    leases = [x for batch in results for x in batch]
    assert len({(x.tenant, x.run) for x in leases}) == len(leases)
    assert _by_tenant(leases)[capped.value] <= 7
    counted = await admin_conn.fetch(
        "SELECT l.tenant_id, l.queued, l.running, "
        "  (SELECT count(*) FROM runs r WHERE r.tenant_id = l.tenant_id "
        "     AND r.status = 'queued') AS q, "
        "  (SELECT count(*) FROM runs r WHERE r.tenant_id = l.tenant_id "
        "     AND r.status = 'running') AS r FROM tenant_load l")
    for row in counted:  # the trigger-kept counters agree with the rows
        assert (row["queued"], row["running"]) == (row["q"], row["r"]), dict(row)


async def test_in_flight_runs_before_new_ones_and_interactive_before_batch(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    tenant = (await tenants.create_tenant(db, "order")).tenant.tenant_id
    agent = (await agents.create_agent(db, tenant, "a", AgentSpec("scripted", ""))).agent_id
    made = {}
    for name, priority in (("batch", "batch"), ("new", "interactive"),
                           ("resumed", "batch")):
        made[name] = (await runs.create_run(db, tenant, runs.RunRequest(
            agent, None, name, None, priority, None, digest(name)))).run_id
    # "resumed" has taken steps before (it came back from an approval, say).
    await admin_conn.execute("UPDATE runs SET steps = 2 WHERE run_id = $1",
                             made["resumed"].uuid)
    order = [(await claim(db, "w", 1, 30.0))[0].run for _ in range(3)]
    assert order == [made["resumed"], made["new"], made["batch"]]


async def test_a_stale_owner_cannot_settle_or_release_and_the_sweeper_forfeits(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    tenant = await tenant_with_runs(db, "ledger", 1, TenantPolicy(tokens_per_minute=10_000))
    [old] = await claim(db, "w1", 1, 30.0)
    async with db.tenant_tx(tenant) as conn:
        reservation = await budget.reserve(conn, tenant, old.run, old.epoch, 2_000, 500)
    assert isinstance(reservation, budget.Reservation)
    load = await admin_conn.fetchrow("SELECT reserved_micros, bucket_tokens FROM tenant_budget "
                                     "WHERE tenant_id = $1", tenant.value)
    assert load["reserved_micros"] == 500 and 7_990 < load["bucket_tokens"] <= 8_000
    # The lease expires and another worker takes the run: epoch moves on.
    await admin_conn.execute("UPDATE runs SET lease_expires_at = now() - interval '1 s'")
    [new] = await claim(db, "w2", 1, 30.0)
    assert new.run == old.run and new.epoch == old.epoch + 1
    async with db.tenant_tx(tenant) as conn:
        try:
            await budget.settle(conn, tenant, old.run, old.epoch, reservation,
                                TokenUsage(input_tokens=10), 1)
            raise AssertionError("a stale owner settled a reservation")
        except LeaseLost:
            pass
    async with db.tenant_tx(tenant) as conn:
        assert not await budget.release(conn, tenant, old.run, old.epoch, reservation)
        # Not the new owner's either: it was taken under another epoch.
        assert not await budget.release(conn, tenant, new.run, new.epoch, reservation)
    assert await budget.sweep(db) == 1
    row = await admin_conn.fetchrow("SELECT status FROM budget_reservations")
    assert row["status"] == "forfeited"
    load = await admin_conn.fetchrow("SELECT reserved_micros, spent_micros FROM tenant_budget "
                                     "WHERE tenant_id = $1", tenant.value)
    assert (load["reserved_micros"], load["spent_micros"]) == (0, 0)
    assert await admin_conn.fetchval("SELECT count(*) FROM usage_facts") == 0


async def _budget_row(conn: asyncpg.Connection, tenant: str) -> tuple[int, int, float]:
    row = await conn.fetchrow("SELECT spent_micros, reserved_micros, bucket_tokens "
                              "FROM tenant_budget WHERE tenant_id = $1", tenant)
    return row["spent_micros"], row["reserved_micros"], row["bucket_tokens"]


async def test_a_settlement_waits_for_the_next_fold_and_readers_see_it_at_once(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    """Closing a reservation leaves the tenant's row alone (migration 0030): the policy
    API shows the budget as it is, the next reservation folds it in, the sweep folds a
    tenant that makes none."""
    tenant = await tenant_with_runs(db, "folds", 1, TenantPolicy(tokens_per_minute=10_000))
    [lease] = await claim(db, "w1", 1, 30.0)
    first = await budget.reserve_now(db, tenant, lease.run, lease.epoch, 2_000, 500)
    assert isinstance(first, budget.Reservation)
    async with db.tenant_tx(tenant) as conn:
        await budget.settle(conn, tenant, lease.run, lease.epoch, first,
                            TokenUsage(input_tokens=600, output_tokens=400), 300)
    spent, reserved, bucket = await _budget_row(admin_conn, tenant.value)
    assert (spent, reserved) == (0, 500) and bucket <= 8_000  # not folded yet
    load = (await policy.get_policy(db, tenant)).load
    assert (load.month_spend_micros, load.reserved_micros) == (300, 0)
    assert load.bucket_tokens is not None and 9_000 <= load.bucket_tokens <= 10_000

    second = await budget.reserve_now(db, tenant, lease.run, lease.epoch, 100, 40)
    assert isinstance(second, budget.Reservation)
    spent, reserved, bucket = await _budget_row(admin_conn, tenant.value)
    assert (spent, reserved) == (300, 40)  # the first folded, the second open
    assert 8_900 <= bucket <= 8_910  # 10,000 - 2,000 + (2,000 - 1,000) - 100, + refill

    async with db.tenant_tx(tenant) as conn:
        assert await budget.release(conn, tenant, lease.run, lease.epoch, second)
    assert await budget.sweep(db) == 0  # nothing forfeited: the fold is not "more to do"
    spent, reserved, _ = await _budget_row(admin_conn, tenant.value)
    assert (spent, reserved) == (300, 0)
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM budget_reservations WHERE unfolded") == 0


async def test_a_tenant_without_bucket_or_cap_reserves_without_the_budget_row(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    """The default policy checks nothing, so a reservation takes no lock (migration 0030):
    it goes through while another transaction holds the tenant's row, readers count it at
    once, and the row learns its cost at the fold. A cap set later sees that cost."""
    tenant = await tenant_with_runs(db, "unlimited", 1)
    [lease] = await claim(db, "w1", 1, 30.0)
    async with admin_conn.transaction():
        await admin_conn.execute("SELECT 1 FROM tenant_budget WHERE tenant_id = $1 FOR UPDATE",
                                 tenant.value)
        r = await asyncio.wait_for(
            budget.reserve_now(db, tenant, lease.run, lease.epoch, 1_000, 70), 10)
    assert isinstance(r, budget.Reservation)
    assert (await _budget_row(admin_conn, tenant.value))[:2] == (0, 0)
    load = (await policy.get_policy(db, tenant)).load
    assert (load.month_spend_micros, load.reserved_micros) == (70, 70)
    async with db.tenant_tx(tenant) as conn:
        await budget.settle(conn, tenant, lease.run, lease.epoch, r,
                            TokenUsage(input_tokens=500), 45)
    load = (await policy.get_policy(db, tenant)).load
    assert (load.month_spend_micros, load.reserved_micros) == (45, 0)
    assert await budget.sweep(db) == 0
    assert (await _budget_row(admin_conn, tenant.value))[:2] == (45, 0)
    # Now with a cap: the next call is checked against what was spent without one.
    await policy.set_policy(db, tenant, TenantPolicy(monthly_spend_cap_micros=100))
    over = await budget.reserve_now(db, tenant, lease.run, lease.epoch, 1_000, 60)
    next_month = await admin_conn.fetchval(
        "SELECT date_trunc('month', now()) + interval '1 month'")
    assert over == budget.OverCap(spent_micros=45, cap_micros=100, period_ends=next_month)


@pytest.mark.parametrize("tpm", [1_000_000, None], ids=["bucket", "no-limits"])
async def test_racing_reservations_and_settlements_of_one_tenant_stay_exact(
    db: Database, admin_conn: asyncpg.Connection, tpm: int | None,
) -> None:
    """Ten runs of one tenant reserve and settle at once, 40 calls each: every fold takes
    each closing exactly once, so the row ends equal to the reservations' rows. With a
    bucket (1M tokens a minute: never dry here, ~17k a second of refill) every reservation
    takes the row's lock; with no limits none does."""
    tenant = await tenant_with_runs(db, "racing", 10, TenantPolicy(tokens_per_minute=tpm))
    leases = await claim(db, "w1", 10, 30.0)
    rng = random.Random(11)
    plans = [[(rng.randint(1, 900), rng.randint(0, 50)) for _ in range(40)] for _ in leases]

    async def calls(lease: Lease, plan: list[tuple[int, int]]) -> None:
        for tokens, cost in plan:
            r = await budget.reserve_now(db, tenant, lease.run, lease.epoch, 1_000, 50)
            assert isinstance(r, budget.Reservation)
            async with db.tenant_tx(tenant) as conn:
                await budget.settle(conn, tenant, lease.run, lease.epoch, r,
                                    TokenUsage(input_tokens=tokens), cost)

    started = time.monotonic()
    await asyncio.gather(*(calls(x, p) for x, p in zip(leases, plans, strict=True)))
    await budget.sweep(db)
    spent, reserved, bucket = await _budget_row(admin_conn, tenant.value)
    total_cost = sum(c for plan in plans for _, c in plan)
    used = sum(t for plan in plans for t, _ in plan)
    assert (spent, reserved) == (total_cost, 0)
    if tpm is not None:
        # Every unused token came back exactly once: the bucket is what was used below
        # full, give or take the refill over the test (never more, never less).
        assert tpm - used <= bucket <= tpm - used + (time.monotonic() - started) * tpm / 60
    rows = await admin_conn.fetchrow(
        "SELECT count(*) FILTER (WHERE status = 'settled') AS settled, "
        "count(*) FILTER (WHERE unfolded) AS unfolded, sum(spent_micros) AS cost "
        "FROM budget_reservations WHERE tenant_id = $1", tenant.value)
    assert (rows["settled"], rows["unfolded"], rows["cost"]) == (400, 0, total_cost)


# -- through the API and a worker --------------------------------------------------------


async def _put_policy(api: Api, tenant: str, **body: object) -> dict[str, object]:
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/policy", json=body,
                             headers=api.operator)
    assert r.status_code == 200, r.text
    out: dict[str, object] = r.json()
    return out


async def test_admission_refuses_past_max_queued_with_the_limit_and_count(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    tenant, h = await api.tenant()
    _, other_h = await api.tenant("Other")
    await _put_policy(api, tenant, max_queued=3, max_running=1)
    agent, other_agent = await api.agent(h), await api.agent(other_h)
    for i in range(3):
        await api.start(h, agent, f"run {i}")
    before = await admin_conn.fetchval("SELECT count(*) FROM runs")
    r = await api.client.post("/v1/runs", json={"agent_id": agent, "input": "one more"},
                              headers=h)
    assert r.status_code == 429
    problem = r.json()
    assert problem["type"] == "quota_exceeded" and problem["limit"] == "max_queued"
    assert problem["limit_value"] == 3 and problem["current"] == 3
    assert await admin_conn.fetchval("SELECT count(*) FROM runs") == before
    # Another tenant is not affected.
    await api.start(other_h, other_agent, "fine")
    shown = (await api.client.get(f"/admin/v1/tenants/{tenant}/policy",
                                  headers=api.operator)).json()
    assert shown["max_queued"] == 3 and shown["load"]["queued"] == 3


async def test_the_cell_refuses_new_runs_when_its_queue_is_full(database_dsn: str) -> None:
    from tests.support.api import serving_api

    # The depth read on every request (not at most once a second): no sleeping for it.
    async with serving_api(database_dsn, max_queued_runs=2, load_read_seconds=0) as api:
        _, h = await api.tenant()
        agent = await api.agent(h)
        await api.start(h, agent, "1")
        await api.start(h, agent, "2")
        r = await api.client.post("/v1/runs", json={"agent_id": agent, "input": "3"},
                                  headers=h)
    assert r.status_code == 503 and r.json()["type"] == "overloaded"
    assert int(r.headers["retry-after"]) > 0


async def test_an_exhausted_token_bucket_holds_back_only_that_tenant(
    api: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection,
) -> None:
    slow, slow_h = await api.tenant("Thrifty")
    _, fast_h = await api.tenant("Busy")
    await api.tool_server(slow, fakes.mcp.url)
    # One token a minute: the bucket starts full (1 token), so one call fits and leaves it
    # deep in debt; refilling takes hours.
    await _put_policy(api, slow, tokens_per_minute=1)
    slow_agent, fast_agent = await api.agent(slow_h, tools=["echo"]), await api.agent(fast_h)
    async with running_worker(database_dsn, fakes.model.base_url):
        first = await api.start(slow_h, slow_agent, scripted(
            call("echo", text="1"), answer("never"), text="a"))
        await until(lambda: _parked(admin_conn, slow), "the thrifty run steps aside", 15)
        second = await api.start(slow_h, slow_agent, scripted(answer("two"), text="b"))
        others = [await api.start(fast_h, fast_agent, scripted(answer(f"f{i}"), text=f"{i}"))
                  for i in range(5)]
        for run_id in others:  # nobody else waits
            assert (await api.events_until_end(fast_h, run_id))[-1]["type"] == "RunFinished"
    events = (await api.client.get(f"/v1/runs/{first}/events", headers={
        **slow_h, "Accept": "application/json"})).json()["events"]
    assert [e["type"] for e in events] == ["RunCreated", "ModelReplied", "ToolCompleted",
                                           "RunParked"]
    assert events[-1]["data"]["reason"].startswith("tokens_per_minute")
    row = await admin_conn.fetchrow(
        "SELECT status, available_at FROM runs WHERE run_id = $1", RunId.parse(first).uuid)
    assert row["status"] == "queued" and row["available_at"] > datetime.now(UTC) \
        + timedelta(minutes=30)
    # Its other run was never even claimed: the tenant has no tokens left.
    assert await admin_conn.fetchval("SELECT started_at FROM runs WHERE run_id = $1",
                                     RunId.parse(second).uuid) is None


async def _parked(conn: asyncpg.Connection, tenant: str) -> bool:
    return bool(await conn.fetchval(
        "SELECT count(*) FROM run_events WHERE tenant_id = $1 AND type = 'RunParked'",
        tenant))


async def test_a_spend_cap_holds_model_calls_and_admissions_for_that_tenant_only(
    api: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection,
) -> None:
    capped, h = await api.tenant("Capped")
    _, other_h = await api.tenant("Free")
    agent, other_agent = await api.agent(h), await api.agent(other_h)
    async with running_worker(database_dsn, fakes.model.base_url):
        done = await api.start(h, agent, scripted(answer("paid"), text="x"))
        await api.events_until_end(h, done)
        spent = int(await admin_conn.fetchval(
            "SELECT sum(cost_micros) FROM usage_facts WHERE tenant_id = $1", capped))
        assert spent > 0
        # The cap is what it has spent already: no further call fits.
        await _put_policy(api, capped, monthly_spend_cap_micros=spent)
        r = await api.client.post("/v1/runs", json={"agent_id": agent, "input": "more"},
                                  headers=h)
        assert r.status_code == 429 and r.json()["type"] == "budget_exhausted"
        # Raise it a little: admitted, but the call's reservation does not fit: it waits
        # (ADR 0035), holding no slot, while the other tenant's run is served.
        await _put_policy(api, capped, monthly_spend_cap_micros=spent + 1)
        held = await api.start(h, agent, scripted(answer("later"), text="y"))

        async def waits() -> bool:
            return (await api.run(h, held))["waiting_reason"] == "monthly_spend_cap"
        await until(waits, "the capped tenant's run waits for its cap", 30)
        free = await api.start(other_h, other_agent, scripted(answer("fine"), text="z"))
        free_events = await api.events_until_end(other_h, free)
        assert (await api.run(h, held))["status"] == "waiting"
        # Raised enough, it goes on.
        await _put_policy(api, capped, monthly_spend_cap_micros=spent + 1_000_000)
        events = await api.events_until_end(h, held)
    assert [e["type"] for e in events] == ["RunCreated", "RunParked", "RunResumed",
                                           "ModelReplied", "RunFinished"]
    assert events[1]["data"]["reason"] == "monthly_spend_cap"
    assert (await api.run(h, held))["answer"] == "later"
    assert free_events[-1]["type"] == "RunFinished"


async def test_the_ledger_the_run_totals_and_the_usage_api_agree(
    api: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection,
) -> None:
    tenant, h = await api.tenant()
    await _put_policy(api, tenant, tokens_per_minute=10_000_000,
                      monthly_spend_cap_micros=10_000_000_000)
    first, second = await api.agent(h, name="first"), await api.agent(h, name="second")
    async with running_worker(database_dsn, fakes.model.base_url):
        started = [await api.start(h, agent, scripted(
            {"text": "x" * (i + 1)}, text=f"u{i}")) for i, agent in
            enumerate([first, second] * 6)]
        for run_id in started:
            await api.events_until_end(h, run_id)
    facts = await admin_conn.fetchrow(
        "SELECT sum(cost_micros) AS cost, sum(input_tokens) AS i, sum(output_tokens) AS o, "
        "count(*) AS n FROM usage_facts WHERE tenant_id = $1", tenant)
    totals = await admin_conn.fetchrow(
        "SELECT sum(cost_micros) AS cost, sum(input_tokens) AS i, sum(output_tokens) AS o "
        "FROM runs WHERE tenant_id = $1", tenant)
    usage = (await api.client.get("/v1/usage?group_by=agent", headers=h)).json()
    by_day = (await api.client.get("/v1/usage?group_by=day", headers=h)).json()
    assert facts["cost"] == totals["cost"] == usage["total"]["cost_micros"] > 0
    assert facts["i"] == totals["i"] == usage["total"]["input_tokens"]
    assert facts["o"] == totals["o"] == usage["total"]["output_tokens"]
    assert usage["total"]["runs"] == 12 and usage["total"]["calls"] == facts["n"] == 12
    assert {g["key"] for g in usage["groups"]} == {first, second}
    assert sum(g["cost_micros"] for g in usage["groups"]) == facts["cost"]
    assert sum(g["cost_micros"] for g in by_day["groups"]) == facts["cost"]
    operator = (await api.client.get("/admin/v1/usage", headers=api.operator)).json()
    assert [row["cost_micros"] for row in operator if row["tenant_id"] == tenant] \
        == [facts["cost"]]
    # Every reservation was settled to what the provider reported; nothing is left open.
    statuses = await admin_conn.fetch(
        "SELECT status, count(*) FROM budget_reservations GROUP BY status")
    assert {r["status"]: r["count"] for r in statuses} == {"settled": 12}
    load = await admin_conn.fetchrow(
        "SELECT spent_micros, reserved_micros FROM tenant_budget WHERE tenant_id = $1", tenant)
    assert (load["spent_micros"], load["reserved_micros"]) == (facts["cost"], 0)


async def test_policy_and_usage_refuse_bad_input(api: Api, admin_conn: asyncpg.Connection) -> None:
    tenant, h = await api.tenant()
    before = await admin_conn.fetchrow("SELECT * FROM tenant_policies WHERE tenant_id = $1",
                                       tenant)
    for body in ({"weight": 0}, {"max_running": -1}, {"max_queued": "many"},
                 {"tokens_per_minute": 0}, {"monthly_spend_cap_micros": -5},
                 {"approval_ttl_seconds": 1}, {"surprise": True}):
        r = await api.client.put(f"/admin/v1/tenants/{tenant}/policy", json=body,
                                 headers=api.operator)
        assert r.status_code == 400, (body, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
    assert await admin_conn.fetchrow("SELECT * FROM tenant_policies WHERE tenant_id = $1",
                                     tenant) == before
    r = await api.client.put("/admin/v1/tenants/nobody-here/policy", json={},
                             headers=api.operator)
    assert r.status_code == 404
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/policy", json={}, headers=h)
    assert r.status_code == 401
    for query in ("from=2026-13-01", "from=2026-11-10&to=2026-11-01", "group_by=model",
                  "from=2020-01-01&to=2026-01-01"):
        r = await api.client.get(f"/v1/usage?{query}", headers=h)
        assert r.status_code == 400, (query, r.text)
    now = datetime.now(UTC)
    r = await api.client.get(f"/v1/usage?from={(now - timedelta(days=3)).date()}", headers=h)
    assert r.status_code == 200 and r.json()["total"]["calls"] == 0


async def test_metrics_count_by_tenant_class_and_never_name_a_tenant(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    ids = []
    for name, plan, runs_ in (("Gold One", "gold", 3), ("Gold Two", "gold", 2),
                              ("Free One", "free", 1)):
        r = await api.client.post("/admin/v1/tenants", json={"name": name, "plan": plan},
                                  headers=api.operator)
        tenant = r.json()["tenant_id"]
        ids.append(tenant)
        key = (await api.client.post(f"/admin/v1/tenants/{tenant}/api-keys",
                                     headers=api.operator)).json()["api_key"]
        h = {"Authorization": f"Bearer {key}"}
        agent = await api.agent(h)
        for i in range(runs_):
            await api.start(h, agent, f"{i}")
    # One of gold's runs parked on a model provider whose wake-up time passed 10 minutes
    # ago and no waker queued it (none runs here): what the alert on parked runs reads.
    await admin_conn.execute(
        "UPDATE runs SET status = 'waiting', parked_on = ARRAY['m'], "
        "available_at = now() - interval '10 minutes' "
        "WHERE run_id = (SELECT run_id FROM runs WHERE tenant_id = $1 LIMIT 1)", ids[0])
    r = await api.client.get("/metrics", headers=api.operator)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'tenantry_runs_queued{tenant_class="gold"} 4' in text
    assert 'tenantry_runs_waiting{tenant_class="gold"} 1' in text
    assert 'tenantry_runs_queued{tenant_class="free"} 1' in text
    assert 'tenantry_parked_runs_overdue{tenant_class="gold"} 1' in text
    assert 'tenantry_parked_runs_overdue{tenant_class="free"} 0' in text
    overdue = re.search(r'tenantry_parked_runs_overdue_seconds\{tenant_class="gold"\} (\S+)',
                        text)
    assert overdue is not None and float(overdue[1]) >= 600
    assert 'tenantry_parked_runs_overdue_seconds{tenant_class="free"} 0.000' in text
    assert 'tenantry_leases_active{tenant_class="gold"} 0' in text
    assert "tenantry_queue_oldest_age_seconds{tenant_class=\"gold\"}" in text
    assert not any(tenant in text for tenant in ids)
    assert (await api.client.get("/metrics")).status_code == 401


async def test_the_fifo_baseline_takes_the_oldest_runs_whatever_the_policies(
    db: Database, admin_conn: asyncpg.Connection,
) -> None:
    capped = await tenant_with_runs(db, "fifo-old", 3, TenantPolicy(max_running=1))
    other = await tenant_with_runs(db, "fifo-new", 2)
    leases = await claim(db, "w", 4, 30.0, order="fifo")
    assert _by_tenant(leases) == {capped.value: 3, other.value: 1}  # ceiling ignored
    started = await admin_conn.fetch("SELECT started_at, created_at FROM runs "
                                     "WHERE started_at IS NOT NULL")
    assert len(started) == 4 and all(r["started_at"] >= r["created_at"] for r in started)


async def test_the_month_a_cap_counts_is_the_utc_month_whatever_the_servers_zone(
    database_dsn: str, admin_conn: asyncpg.Connection,
) -> None:
    """The cap's month is ``date_trunc('month', now())`` in the schema: in a server set to
    UTC+14 it would start 14 hours early. The platform's sessions count in UTC."""
    database = await admin_conn.fetchval("SELECT current_database()")
    await admin_conn.execute(f'ALTER DATABASE "{database}" SET timezone = '
                             "'Pacific/Kiritimati'")
    pool = await Database.connect(login_dsn(database_dsn), min_size=1, max_size=1)
    try:
        row = await pool.statement("SELECT date_trunc('month', now()) AS starts, now() AS now")
    finally:
        await pool.close()
    assert row is not None
    now = row["now"].astimezone(UTC)
    assert row["starts"] == datetime(now.year, now.month, 1, tzinfo=UTC)
