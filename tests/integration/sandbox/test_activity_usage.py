"""Per-attempt usage facts on real sandboxes (every backend) and a real Postgres (ADR 0016):
what an attempt's sandbox used, as the host measured it — CPU seconds and peak memory —
recorded once per attempt, failed and killed ones included, priced per sandbox second,
reported by /v1/usage, and visible to its tenant alone; a holder that lost its lease
writes none."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from tenantry.activities.code.versions import WarmSettings
from tenantry.db import Database
from tenantry.ids import TenantId
from tenantry.sandbox.pool import PooledDriver
from tenantry.store import Admitted, RunStatus
from tests.support.activity_rig import WITHIN, ActivityRig, activity_rig, steal_lease
from tests.support.api import Api
from tests.support.sandbox import TEST_LIMITS
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(900)

MIB = 1024 * 1024
#: The price the tests set: a micro-dollar per sandbox millisecond.
PER_SECOND_MICROS = 1000

TRIVIAL = """
    def handle(value, context):
        return "ok"
"""
#: A fixed amount of work (~0.5 s of a host CPU natively; several times that under the
#: microVM's software emulation): the CPU it costs does not depend on how busy the host is,
#: unlike a loop timed by the guest's clock (a microVM's clock is not the host's CPU).
BURN = """
    def handle(value, context):
        total = 0
        for i in range(12_000_000):
            total += i
        return total
"""
#: 64 MiB, every page written (a bytearray alone is calloc'd: untouched pages cost nothing).
ALLOCATE = """
    def handle(value, context):
        block = bytearray(64 * 1024 * 1024)
        for i in range(0, len(block), 4096):
            block[i] = 1
        return len(block)
"""
#: Far past the sandbox's memory: the kernel's OOM killer (or, under gVisor, the host
#: cgroup taking the whole sandbox) ends the attempt.
EXHAUST = """
    def handle(value, context):
        blocks = []
        while True:
            blocks.append(b"x" * (16 * 1024 * 1024))
"""


#: The heavy half first (CPU and 64 MiB), then a trivial task in the same woken sandbox.
HEAVY_THEN_LIGHT = """
    def handle(value, context):
        if value != "heavy":
            return "light"
        block = bytearray(64 * 1024 * 1024)
        for i in range(0, len(block), 4096):
            block[i] = 1
        total = 0
        for i in range(12_000_000):
            total += i
        return total
"""


@pytest.fixture
async def setup(db: Database, driver: PooledDriver) -> AsyncIterator[ActivityRig]:
    """Each attempt read back carries its event's seq."""
    async with activity_rig(db, driver, slots=2, defaults={"timeout_s": 120.0},
                            with_seq=True) as rig:
        yield rig


async def tenant_of(api: Api, name: str) -> tuple[TenantId, dict[str, str]]:
    tenant_id, headers = await api.tenant(name)
    return TenantId.parse(tenant_id), headers


async def price_sandbox(api: Api) -> str:
    r = await api.client.put("/admin/v1/prices/sandbox", headers=api.operator,
                             json={"per_second_micros": PER_SECOND_MICROS})
    assert r.status_code == 201, r.text
    version: str = r.json()["version"]
    return version


async def test_cpu_and_memory_of_each_attempt_are_recorded_priced_and_reported(
    setup: ActivityRig, api: Api,
) -> None:
    version = await price_sandbox(api)
    acme, headers = await tenant_of(api, "Acme")
    for name, code in (("trivial", TRIVIAL), ("burn", BURN), ("allocate", ALLOCATE)):
        await setup.publish(acme, name, code)
    setup.dispatcher()
    facts: dict[str, dict[str, Any]] = {}
    for name in ("trivial", "burn", "allocate"):
        task, done = await setup.run(acme, name)
        assert done.status is RunStatus.FINISHED, done
        [attempt] = await setup.attempts(acme, task)
        [fact] = await setup.facts(acme, task)
        # The fact records that ActivityAttempted, with the same figures.
        assert fact["seq"] == attempt["seq"] and fact["attempt"] == 1
        assert (fact["activity"], fact["activity_version"]) == (name, 1)
        assert fact["backend"] == setup.driver.backend
        assert fact["cpu_us"] is not None and fact["peak_memory_bytes"] is not None
        assert attempt["cpu_s"] == pytest.approx(fact["cpu_us"] / 1e6, abs=1e-6)
        assert attempt["peak_memory_bytes"] == fact["peak_memory_bytes"]
        assert fact["sandbox_ms"] == round(attempt["sandbox_ms"]) > 0
        # Sandbox milliseconds times the price, rounded up to a whole micro-dollar.
        assert fact["cost_micros"] == attempt["cost_micros"] == fact["sandbox_ms"]
        assert fact["price_version"] == version
        facts[name] = fact

    trivial, burn, big = facts["trivial"], facts["burn"], facts["allocate"]
    assert trivial["cpu_us"] > 0 and burn["cpu_us"] > 0
    # The loop's work is on top of what any attempt costs (its start-up is in both; a
    # microVM's idle emulation varies with the wall time, by tenths of a second here).
    assert burn["cpu_us"] - trivial["cpu_us"] >= 200_000, (burn, trivial)
    # The 64 MiB the step wrote are in its sandbox's peak, on top of what any step costs.
    assert big["peak_memory_bytes"] >= 64 * MIB, big
    assert big["peak_memory_bytes"] - trivial["peak_memory_bytes"] >= 48 * MIB, (big, trivial)

    r = await api.client.get("/v1/usage", headers=headers)
    assert r.status_code == 200, r.text
    body = r.json()
    activities = body["total"]["activities"]
    assert activities["attempts"] == 3
    assert activities["sandbox_ms"] == sum(f["sandbox_ms"] for f in facts.values())
    assert activities["cpu_seconds"] == pytest.approx(
        sum(f["cpu_us"] for f in facts.values()) / 1e6)
    assert activities["peak_memory_bytes"] == big["peak_memory_bytes"]
    assert activities["cost_micros"] == sum(f["cost_micros"] for f in facts.values())
    # Attempts' sandbox time is sandbox time: in the totals the month's spend is made of.
    assert body["total"]["sandbox_ms"] == activities["sandbox_ms"]
    assert body["total"]["sandbox_cost_micros"] == activities["cost_micros"]
    assert body["sandbox_price"] == {"per_second_micros": PER_SECOND_MICROS,
                                     "version": version}
    policy = await api.client.get(f"/admin/v1/tenants/{acme.value}/policy",
                                  headers=api.operator)
    assert policy.json()["load"]["month_spend_micros"] == activities["cost_micros"]

    # Another tenant sees none of it: its usage is empty, and row-level security hides
    # Acme's facts from its connection even when it names Acme's rows.
    globex, globex_headers = await tenant_of(api, "Globex")
    r = await api.client.get("/v1/usage", headers=globex_headers)
    assert r.json()["total"]["activities"]["attempts"] == 0
    async with setup.db.tenant_tx(globex) as conn:
        seen = await conn.fetchval("SELECT count(*) FROM sandbox_usage_facts"
                                   " WHERE tenant_id = $1", acme.value)
    assert seen == 0
    # The operator's per-tenant report has Acme's activities, and only Acme's.
    r = await api.client.get("/admin/v1/usage", headers=api.operator)
    rows = {row["tenant_id"]: row for row in r.json()}
    assert rows[acme.value]["activities"] == activities
    assert globex.value not in rows


async def test_failed_and_killed_attempts_get_their_facts(setup: ActivityRig, api: Api) -> None:
    await price_sandbox(api)
    acme, _ = await tenant_of(api, "Acme")
    await setup.publish(acme, "exhaust", EXHAUST, max_sandbox_deaths=1)
    await setup.publish(acme, "buggy", """
        def handle(value, context):
            raise RuntimeError("the tenant's own bug")
    """)
    setup.dispatcher()

    task, done = await setup.run(acme, "exhaust")
    assert done.dead_lettered, done
    [attempt] = await setup.attempts(acme, task)
    assert attempt["killed_sandbox"]
    [fact] = await setup.facts(acme, task)
    assert fact["seq"] == attempt["seq"] and fact["sandbox_ms"] > 0
    assert fact["cost_micros"] == fact["sandbox_ms"] > 0
    # What it used until the kill is measured still (frozen when the sandbox went).
    assert fact["cpu_us"] is not None and fact["cpu_us"] > 0
    limit = TEST_LIMITS[setup.driver.backend].memory_mib * MIB
    assert fact["peak_memory_bytes"] is not None
    assert fact["peak_memory_bytes"] >= limit // 2, fact  # it was filling its memory

    task, done = await setup.run(acme, "buggy")
    assert done.status is RunStatus.FAILED, done
    [attempt] = await setup.attempts(acme, task)
    [fact] = await setup.facts(acme, task)
    assert attempt["status"] == "failed" and fact["seq"] == attempt["seq"]
    assert fact["cpu_us"] > 0 and fact["peak_memory_bytes"] > 0


async def test_a_holder_that_lost_its_lease_writes_no_fact(
    setup: ActivityRig, api: Api, admin_conn: asyncpg.Connection,
) -> None:
    acme, _ = await tenant_of(api, "Acme")
    # It runs until its hard timeout (the host ends it: exit 124), and no heartbeat goes
    # out before then, so the attempt ends on its own and only the fence can refuse it.
    await setup.publish(acme, "spin", """
        def handle(value, context):
            while True:
                pass
    """, timeout_s=5.0)
    result = await setup.store.enqueue(acme, "spin", None)
    assert isinstance(result, Admitted)
    task = result.task_id
    first = setup.dispatcher(heartbeat_every=3600.0)

    async def claimed() -> bool:
        return bool(await admin_conn.fetchval(
            "SELECT status = 'running' FROM runs WHERE run_id = $1", task.uuid))
    await until(claimed, "the task is claimed", WITHIN)
    await steal_lease(admin_conn, task)

    async def lost() -> bool:
        return first.outcomes["lease_lost"] == 1
    await until(lost, "the attempt ends and its outcome meets the fence", WITHIN)
    assert await setup.attempts(acme, task) == []
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM sandbox_usage_facts WHERE run_id = $1", task.uuid) == 0


async def test_usage_facts_are_immutable(setup: ActivityRig, api: Api,
                                         admin_conn: asyncpg.Connection) -> None:
    acme, _ = await tenant_of(api, "Acme")
    await setup.publish(acme, "trivial", TRIVIAL)
    setup.dispatcher()
    task, done = await setup.run(acme, "trivial")
    assert done.status is RunStatus.FINISHED
    with pytest.raises(asyncpg.PostgresError):
        await admin_conn.execute(
            "UPDATE sandbox_usage_facts SET cpu_us = 0 WHERE run_id = $1", task.uuid)
    with pytest.raises(asyncpg.PostgresError):
        await admin_conn.execute("DELETE FROM sandbox_usage_facts WHERE run_id = $1",
                                 task.uuid)


async def test_a_reused_sandbox_charges_each_task_its_own_usage(
    setup: ActivityRig, api: Api,
) -> None:
    """A warm version's second task wakes the first's sandbox (ADR 0014): its fact counts
    from its own start, not the CPU (and, where the host gets memory back, the memory
    peak) the first task ran up there."""
    acme, _ = await tenant_of(api, "Acme")
    await setup.publish(acme, "reused", HEAVY_THEN_LIGHT, warm=WarmSettings(300.0))
    setup.dispatcher(slots=1)
    heavy, done = await setup.run(acme, "reused", "heavy")
    assert done.status is RunStatus.FINISHED, done
    light, done = await setup.run(acme, "reused", "light")
    assert done.result == "light", done
    [first], [second] = await setup.facts(acme, heavy), await setup.facts(acme, light)
    [heavy_attempt], [light_attempt] = (await setup.attempts(acme, heavy),
                                        await setup.attempts(acme, light))
    assert heavy_attempt["sandbox_id"] == light_attempt["sandbox_id"]  # woken, not fresh
    assert first["cpu_us"] is not None and second["cpu_us"] is not None
    assert second["cpu_us"] < first["cpu_us"], (first, second)
    assert first["peak_memory_bytes"] >= 64 * MIB
    if setup.driver.backend != "microvm":
        assert second["peak_memory_bytes"] < first["peak_memory_bytes"] - 32 * MIB, \
            (first, second)
    # A microVM's host memory is the guest RAM it has touched: QEMU keeps the pages the
    # first task wrote (no balloon), so the second task's peak honestly includes them.
