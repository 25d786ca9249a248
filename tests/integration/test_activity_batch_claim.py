"""A batch's next-task claim (ADR 0014), against a real Postgres and no sandbox: it leases
only a queued task of the same tenant and the same activity version — never another
tenant's task of an activity with the same name, never another version's — and it holds
the tenant to its max_activity_slots like the fair claim. Batch and warm settings are
stored with the version and read back."""

from __future__ import annotations

import pytest

from tenantry.activities import Bundle
from tenantry.activities.code.versions import ActivitySettings, BatchSettings, WarmSettings
from tenantry.activities.tasks.batches import activity_slots, claim_next
from tenantry.activities.tasks.store import ActivityStore
from tenantry.db import Database
from tenantry.ids import RunId, TenantId
from tenantry.store import Admitted, RunStatus, TenantPolicy, WorkflowStore

ACME = TenantId.parse("tenant-acme")
GLOBEX = TenantId.parse("tenant-globex")
BUNDLE = Bundle({"main.py": b"def handle(value, context):\n    return value\n"},
                "main.py:handle")
BATCHED = ActivitySettings(batch=BatchSettings(10, 60.0), warm=WarmSettings(30.0))


@pytest.fixture
async def store(db: Database) -> ActivityStore:
    for tenant in (ACME, GLOBEX):
        await WorkflowStore(db).set_tenant_policy(tenant, TenantPolicy())
    return ActivityStore(db)


async def _enqueue(store: ActivityStore, tenant: TenantId, name: str,
                   version: int | None = None) -> RunId:
    result = await store.enqueue(tenant, name, {}, version=version)
    assert isinstance(result, Admitted), result
    return result.task_id


async def test_the_next_task_is_the_same_tenants_and_the_same_versions_only(
    store: ActivityStore, db: Database,
) -> None:
    acme_v1 = await store.publish(ACME, "sync", BUNDLE, BATCHED)
    await store.publish(ACME, "sync", BUNDLE, BATCHED)  # version 2
    globex = await store.publish(GLOBEX, "sync", BUNDLE, BATCHED)  # the same name
    await store.set_activity_slots(ACME, 10)
    globex_task = await _enqueue(store, GLOBEX, "sync")
    v2_task = await _enqueue(store, ACME, "sync", version=2)
    mine = [await _enqueue(store, ACME, "sync", version=1) for _ in range(2)]

    claimed = []
    while (lease := await claim_next(db, "w1", 30.0, ACME, acme_v1.agent_id, 1)) is not None:
        assert lease.tenant == ACME
        claimed.append(lease.run)
    assert claimed == mine  # in queue order, and nothing else
    for task in mine:
        assert (await store.get(ACME, task)).status is RunStatus.RUNNING
    assert (await store.get(ACME, v2_task)).status is RunStatus.QUEUED
    assert (await store.get(GLOBEX, globex_task)).status is RunStatus.QUEUED
    # Globex's own key claims Globex's task; asking with Globex's agent id for Acme: none.
    assert await claim_next(db, "w1", 30.0, ACME, globex.agent_id, 1) is None
    lease = await claim_next(db, "w1", 30.0, GLOBEX, globex.agent_id, 1)
    assert lease is not None and lease.run == globex_task


async def test_the_next_task_waits_for_a_free_slot_of_the_tenant(
    store: ActivityStore, db: Database,
) -> None:
    version = await store.publish(ACME, "sync", BUNDLE, BATCHED)
    assert await store.set_activity_slots(ACME, 1) == await activity_slots(db, ACME) == 1
    first, second = await _enqueue(store, ACME, "sync"), await _enqueue(store, ACME, "sync")
    lease = await claim_next(db, "w1", 30.0, ACME, version.agent_id, 1)
    assert lease is not None and lease.run == first
    # One running task fills the tenant's one slot: the batch may not lease another.
    assert await claim_next(db, "w1", 30.0, ACME, version.agent_id, 1) is None
    assert (await store.get(ACME, second)).status is RunStatus.QUEUED


async def test_batch_and_warm_settings_are_stored_with_the_version(
    store: ActivityStore,
) -> None:
    await store.publish(ACME, "sync", BUNDLE, BATCHED)
    await store.publish(ACME, "sync", BUNDLE)
    one, two = await store.version(ACME, "sync", 1), await store.version(ACME, "sync", 2)
    assert one.settings.batch == BatchSettings(10, 60.0)
    assert one.settings.warm == WarmSettings(30.0)
    assert two.settings.batch is None and two.settings.warm is None
