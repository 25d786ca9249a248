"""Activity versions and tasks through the library (ADR 0013), against a real Postgres and
no sandbox: publish refuses what a tenant could get wrong (and writes nothing), versions
count up, tasks are admitted like runs and pinned to a version, the claim holds each
tenant to its max_activity_slots, and only a dead letter is requeued."""

from __future__ import annotations

import asyncpg
import pytest

from tenantry.activities import Bundle
from tenantry.activities.code.versions import ActivitySettings
from tenantry.activities.tasks.store import ActivityStore
from tenantry.agents.service import create_agent
from tenantry.agents.spec import AgentSpec
from tenantry.db import Database
from tenantry.errors import Conflict, NotFound, ValidationFailed
from tenantry.ids import RunId, TenantId
from tenantry.store import Admitted, QuotaExceeded, RunStatus, TenantPolicy, WorkflowStore
from tenantry.vault import MasterKey, Vault

ACME = TenantId.parse("tenant-acme")
GLOBEX = TenantId.parse("tenant-globex")
BUNDLE = Bundle({"main.py": b"def handle(value, context):\n    return value\n"},
                "main.py:handle")


@pytest.fixture
async def store(db: Database) -> ActivityStore:
    for tenant in (ACME, GLOBEX):
        await WorkflowStore(db).set_tenant_policy(tenant, TenantPolicy())
    return ActivityStore(db)


async def _written(admin: asyncpg.Connection) -> tuple[int, int, int]:
    """(agents, activity versions, bundles) of every tenant, read as the superuser."""
    row = await admin.fetchrow(
        "SELECT (SELECT count(*) FROM agents) AS a, (SELECT count(*) FROM activity_versions)"
        " AS v, (SELECT count(*) FROM activity_bundles) AS b")
    return row["a"], row["v"], row["b"]


async def test_publish_refuses_a_secret_the_tenant_does_not_hold(
    store: ActivityStore, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    await Vault(db, MasterKey.generate()).put(GLOBEX, "API_KEY", "globex's")
    # Another tenant holding the name does not make it this tenant's.
    with pytest.raises(Conflict, match="no secret named 'API_KEY'"):
        await store.publish(ACME, "send", BUNDLE, ActivitySettings(secrets=("API_KEY",)))
    assert await _written(admin_conn) == (0, 0, 0)  # nothing half-written


@pytest.mark.parametrize("entry", ["127.0.0.1", "10.1.2.3:443", "169.254.169.254",
                                   "localhost:8080", "[::1]", "metadata.google.internal",
                                   "*.internal", "db", "0x7f.1"])
def test_an_internal_egress_entry_is_refused(entry: str) -> None:
    with pytest.raises(ValidationFailed, match="internal"):
        ActivitySettings(egress=(entry,))


def test_a_malformed_egress_entry_is_refused() -> None:
    with pytest.raises(ValidationFailed):
        ActivitySettings(egress=("not a host",))
    assert ActivitySettings(egress=("api.example.com", "*.example.org:8443")).egress


async def test_versions_count_up_and_a_task_is_pinned_to_one(store: ActivityStore) -> None:
    first = await store.publish(ACME, "send", BUNDLE,
                                ActivitySettings(egress=("api.example.com",)))
    code = Bundle({"main.py": b"def handle(value, context):\n    return 2\n"},
                  "main.py:handle")
    second = await store.publish(ACME, "send", code, ActivitySettings(max_attempts=5))
    assert (first.version, second.version) == (1, 2)
    assert (await store.version(ACME, "send", 1)).bundle.digest == BUNDLE.digest
    latest = await store.version(ACME, "send")
    assert latest.version == 2 and latest.settings.max_attempts == 5

    pinned = await store.enqueue(ACME, "send", {"a": 1}, version=1)
    newest = await store.enqueue(ACME, "send", {"a": 1})
    assert isinstance(pinned, Admitted) and isinstance(newest, Admitted)
    assert (await store.get(ACME, pinned.task_id)).version == 1
    task = await store.get(ACME, newest.task_id)
    assert (task.version, task.status, task.attempts, task.dead_lettered) \
        == (2, RunStatus.QUEUED, 0, False)
    with pytest.raises(NotFound):  # another tenant's task is missing
        await store.get(GLOBEX, newest.task_id)
    with pytest.raises(NotFound):  # and so is another tenant's activity
        await store.enqueue(GLOBEX, "send", {})


async def test_an_agents_name_is_not_taken_for_an_activity(store: ActivityStore,
                                                           db: Database) -> None:
    await create_agent(db, ACME, "helper", AgentSpec(model="fake:echo", system_prompt="helps"))
    with pytest.raises(Conflict, match="not an activity"):
        await store.publish(ACME, "helper", BUNDLE)


async def test_enqueue_is_admitted_like_a_run_and_idempotent(store: ActivityStore,
                                                             db: Database) -> None:
    await store.publish(ACME, "send", BUNDLE)
    await WorkflowStore(db).set_tenant_policy(ACME, TenantPolicy(max_non_terminal=1))
    first = await store.enqueue(ACME, "send", {"n": 1}, idempotency_key="k1")
    again = await store.enqueue(ACME, "send", {"n": 1}, idempotency_key="k1")
    assert isinstance(first, Admitted) and isinstance(again, Admitted)
    assert again.task_id == first.task_id and not again.created
    assert isinstance(await store.enqueue(ACME, "send", {"n": 2}), QuotaExceeded)
    with pytest.raises(Conflict):
        await store.enqueue(ACME, "send", {"n": 3}, idempotency_key="k1")
    with pytest.raises(ValidationFailed, match="input"):
        await store.enqueue(ACME, "send", {"big": "x" * (300 * 1024)})


async def test_the_claim_holds_each_tenant_to_its_activity_slots(
    store: ActivityStore, admin_conn: asyncpg.Connection,
) -> None:
    for tenant in (ACME, GLOBEX):
        await store.publish(tenant, "send", BUNDLE)
        for i in range(4):
            assert isinstance(await store.enqueue(tenant, "send", {"i": i}), Admitted)
    await store.set_activity_slots(ACME, 1)  # GLOBEX keeps the default, 2

    claimed: list[str] = []
    for worker in ("d1", "d2", "d3"):  # three dispatchers asking for plenty each
        rows = await admin_conn.fetch(
            "SELECT tenant_id FROM tenantry_claim_activities($1, 10, 30)", worker)
        claimed += [r["tenant_id"] for r in rows]
    assert sorted(claimed) == [ACME.value, GLOBEX.value, GLOBEX.value]
    # Agent runs' and library tasks' claims never take activity tasks.
    assert await admin_conn.fetch(
        "SELECT * FROM tenantry_claim_runs('w', 10, 30, 'task')") == []


async def test_only_a_dead_letter_is_requeued(store: ActivityStore) -> None:
    await store.publish(ACME, "send", BUNDLE)
    queued = await store.enqueue(ACME, "send", {})
    assert isinstance(queued, Admitted)
    with pytest.raises(Conflict, match="Only a dead-lettered task"):
        await store.requeue(ACME, queued.task_id)
    with pytest.raises(NotFound):
        await store.requeue(GLOBEX, queued.task_id)
    with pytest.raises(NotFound):
        await store.requeue(ACME, RunId.new())
