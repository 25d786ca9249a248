"""The library API over the same store (docs/how-to/library.md): admission as values, fair and
bounded claims, fenced leases, tenant-scoped signals — against a real Postgres."""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from pathlib import Path

import asyncpg
import pytest

from tenantry.agents.service import create_agent
from tenantry.agents.spec import AgentSpec
from tenantry.db import Database
from tenantry.errors import Conflict, LeaseLost, NotFound, ValidationFailed
from tenantry.runs import lease as platform_leases
from tenantry.runs.service import RunRequest, cancel_run, create_run
from tenantry.store import (
    Admitted,
    BudgetExhausted,
    Overloaded,
    QuotaExceeded,
    RunId,
    RunStatus,
    Task,
    TaskLease,
    TenantId,
    TenantPolicy,
    WorkflowStore,
)

ACME = TenantId.parse("tenant-acme")
GLOBEX = TenantId.parse("tenant-globex")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "library_store.py"


@pytest.fixture
async def store(db: Database) -> WorkflowStore:
    s = WorkflowStore(db)
    for tenant in (ACME, GLOBEX):
        await s.set_tenant_policy(tenant, TenantPolicy())
    return s


async def _enqueue(store: WorkflowStore, tenant: TenantId, n: int = 1,
                   name: str = "order-review") -> list[RunId]:
    ids = []
    for i in range(n):
        result = await store.enqueue(Task.new(name, input={"i": i}).with_tenant(tenant))
        assert isinstance(result, Admitted), result
        ids.append(result.task_id)
    return ids


async def _counts(admin: asyncpg.Connection, tenant: TenantId) -> tuple[int, int]:
    """(runs, events) of the tenant, read as the superuser: what was really written."""
    runs = await admin.fetchval("SELECT count(*) FROM runs WHERE tenant_id = $1", tenant.value)
    events = await admin.fetchval("SELECT count(*) FROM run_events WHERE tenant_id = $1",
                                  tenant.value)
    return runs, events


async def test_enqueue_claim_complete_round_trip(store: WorkflowStore) -> None:
    task = Task.new("order-review", version=1, input={"order": 7}).with_tenant(ACME)
    result = await store.enqueue(task)
    assert isinstance(result, Admitted) and result.created
    [lease] = await store.claim("worker-1", batch=8)
    assert (lease.tenant, lease.task_id, lease.name, lease.version, lease.input) == (
        ACME, result.task_id, "order-review", 1, {"order": 7})
    assert (await store.get(ACME, result.task_id)).status is RunStatus.RUNNING

    await store.complete(lease, {"verdict": "ok"})
    done = await store.get(ACME, result.task_id)
    assert done.status is RunStatus.FINISHED and done.result == {"verdict": "ok"}
    events = await store.events(ACME, result.task_id)
    assert [e.type for e in events] == ["RunCreated", "RunFinished"]
    assert events[0].data["kind"] == "task" and events[1].data == {"answer": {"verdict": "ok"}}
    # Completing twice is a write under a lease that no longer holds a running task.
    with pytest.raises(LeaseLost):
        await store.complete(lease, {"verdict": "again"})


async def test_quota_is_a_value_and_writes_nothing(
    store: WorkflowStore, admin_conn: asyncpg.Connection
) -> None:
    await store.set_tenant_policy(ACME, TenantPolicy(max_non_terminal=2, max_leases=20))
    assert (await store.get_tenant_policy(ACME)).max_non_terminal == 2
    await _enqueue(store, ACME, 2)
    before = await _counts(admin_conn, ACME)

    refused = await store.enqueue(Task.new("order-review", input={}).with_tenant(ACME))
    assert isinstance(refused, QuotaExceeded)
    assert (refused.limit, refused.limit_value, refused.current) == ("max_non_terminal", 2, 2)
    assert await _counts(admin_conn, ACME) == before
    # Another tenant under its own limit is still admitted.
    assert isinstance(await store.enqueue(Task.new("x", input={}).with_tenant(GLOBEX)),
                      Admitted)
    # A task that ends frees its place.
    [lease] = await store.claim("worker-1", batch=1)
    await store.complete(lease)
    assert isinstance(await store.enqueue(Task.new("x").with_tenant(lease.tenant)), Admitted)


async def test_budget_and_cell_refusals_are_values(
    db: Database, store: WorkflowStore, admin_conn: asyncpg.Connection
) -> None:
    await store.set_tenant_policy(ACME, TenantPolicy(monthly_spend_cap_micros=0))
    before = await _counts(admin_conn, ACME)
    spent = await store.enqueue(Task.new("order-review").with_tenant(ACME))
    assert isinstance(spent, BudgetExhausted) and spent.limit == "monthly_spend_cap_micros"
    assert await _counts(admin_conn, ACME) == before

    await _enqueue(store, GLOBEX, 1)  # the cell now holds one queued task
    full = WorkflowStore(db, max_queued_runs=1)
    before = await _counts(admin_conn, GLOBEX)
    overloaded = await full.enqueue(Task.new("order-review").with_tenant(GLOBEX))
    assert isinstance(overloaded, Overloaded)
    assert (overloaded.queued, overloaded.limit_value) == (1, 1)
    assert overloaded.shed == ("batch", "interactive")  # every new task, at this level
    assert await _counts(admin_conn, GLOBEX) == before


async def test_past_the_batch_level_new_batch_tasks_are_refused_interactive_ones_taken(
    db: Database, store: WorkflowStore, admin_conn: asyncpg.Connection
) -> None:
    await _enqueue(store, GLOBEX, 4)  # the cell holds four: 80% of five, the batch level
    shedding = WorkflowStore(db, max_queued_runs=5)
    before = await _counts(admin_conn, ACME)
    batch = await shedding.enqueue(Task.new("nightly", priority="batch").with_tenant(ACME))
    assert isinstance(batch, Overloaded) and batch.shed == ("batch",)
    assert (batch.queued, batch.limit_value) == (4, 4)
    assert await _counts(admin_conn, ACME) == before
    interactive = await shedding.enqueue(Task.new("order-review").with_tenant(ACME))
    assert isinstance(interactive, Admitted)


async def test_idempotency_key_answers_the_first_enqueue(store: WorkflowStore) -> None:
    task = Task.new("order-review", input={"order": 1}).with_tenant(ACME)
    first = await store.enqueue(task, idempotency_key="order-1")
    again = await store.enqueue(task, idempotency_key="order-1")
    assert isinstance(first, Admitted) and isinstance(again, Admitted)
    assert again.task_id == first.task_id and not again.created
    with pytest.raises(Conflict):
        await store.enqueue(Task.new("order-review", input={"order": 2}).with_tenant(ACME),
                            idempotency_key="order-1")


async def test_claim_is_fair_across_tenants_and_bounded(store: WorkflowStore) -> None:
    await _enqueue(store, ACME, 50)
    await _enqueue(store, GLOBEX, 5)
    leases = await store.claim("worker-1", batch=10)
    assert Counter(x.tenant for x in leases) == {ACME: 5, GLOBEX: 5}
    with pytest.raises(ValidationFailed):
        await store.claim("worker-1", batch=101)
    with pytest.raises(ValidationFailed):
        await store.claim("worker-1", batch=0)


async def test_claim_respects_max_leases(store: WorkflowStore) -> None:
    await store.set_tenant_policy(ACME, TenantPolicy(max_leases=3))
    await _enqueue(store, ACME, 10)
    held = await store.claim("worker-1", batch=10)
    assert len(held) == 3
    assert await store.claim("worker-2", batch=10) == []
    await store.complete(held[0])
    assert len(await store.claim("worker-2", batch=10)) == 1


async def test_concurrent_claimers_never_share_a_task(
    database_dsn: str, store: WorkflowStore
) -> None:
    tenants = [TenantId.parse(f"tenant-{i}") for i in range(4)]
    for tenant in tenants:
        await store.set_tenant_policy(tenant, TenantPolicy())
        await _enqueue(store, tenant, 10)
    async with WorkflowStore.connect(database_dsn) as other:
        claimed: list[TaskLease] = []
        while True:
            rounds = await asyncio.gather(store.claim("worker-a", batch=3),
                                          other.claim("worker-b", batch=3),
                                          store.claim("worker-c", batch=3))
            got = [x for batch in rounds for x in batch]
            if not got:
                break
            claimed += got
    assert len(claimed) == 40
    assert len({(x.tenant, x.task_id) for x in claimed}) == 40


async def test_a_stale_lease_changes_nothing(
    store: WorkflowStore, admin_conn: asyncpg.Connection
) -> None:
    [task_id] = await _enqueue(store, ACME)
    await store.signal(ACME, task_id, "approved", {"by": "dana"})
    [stale] = await store.claim("worker-a", batch=1)
    # worker-a stalls past its lease; worker-b claims the task again (the epoch moves on).
    await admin_conn.execute("UPDATE runs SET lease_expires_at = now() - interval '1 s'")
    [current] = await store.claim("worker-b", batch=1)
    assert current.task_id == task_id and current.epoch == stale.epoch + 1
    before = await _counts(admin_conn, ACME)

    with pytest.raises(LeaseLost):
        await store.complete(stale, {"verdict": "stale"})
    with pytest.raises(LeaseLost):
        await store.fail(stale, "stale")
    with pytest.raises(LeaseLost):
        await store.signals(stale)
    with pytest.raises(LeaseLost):
        await store.wait(stale)
    with pytest.raises(LeaseLost):
        await store.release(stale)
    assert await store.renew([stale, current]) == {stale}
    assert await _counts(admin_conn, ACME) == before
    row = await admin_conn.fetchrow("SELECT status, lease_owner, lease_epoch FROM runs")
    assert row is not None and tuple(row) == ("running", "worker-b", current.epoch)

    # The current holder still has everything, including the unconsumed signal.
    [signal] = await store.signals(current)
    assert (signal.name, signal.data) == ("approved", {"by": "dana"})
    await store.fail(current, "rejected upstream", details={"code": 7})
    failed = await store.get(ACME, task_id)
    assert failed.status is RunStatus.FAILED
    assert failed.error == {"message": "rejected upstream", "ours": False, "details": {"code": 7}}


async def test_signals_are_scoped_by_tenant_and_consumed_once(
    store: WorkflowStore, admin_conn: asyncpg.Connection
) -> None:
    [task_id] = await _enqueue(store, ACME)
    before = await _counts(admin_conn, ACME)
    with pytest.raises(NotFound):
        await store.signal(GLOBEX, task_id, "approved", {"by": "mallory"})
    with pytest.raises(NotFound):
        await store.get(GLOBEX, task_id)
    with pytest.raises(NotFound):
        await store.events(GLOBEX, task_id)
    assert await _counts(admin_conn, ACME) == before

    await store.signal(ACME, task_id, "note", {"n": 1})
    await store.signal(ACME, task_id, "approved", {"n": 2})
    [lease] = await store.claim("worker-1", batch=1)
    assert [(s.name, s.data) for s in await store.signals(lease)] == [
        ("note", {"n": 1}), ("approved", {"n": 2})]
    assert await store.signals(lease) == []
    # A later holder does not get them again either.
    await store.release(lease)
    [again] = await store.claim("worker-2", batch=1)
    assert await store.signals(again) == []
    await store.complete(again)
    with pytest.raises(Conflict):  # an ended task takes no more signals
        await store.signal(ACME, task_id, "late")
    types = [e.type for e in await store.events(ACME, task_id)]
    assert types.count("Signalled") == 2 and types.count("SignalConsumed") == 2


async def test_a_waiting_task_holds_no_lease_until_signalled(store: WorkflowStore) -> None:
    [task_id] = await _enqueue(store, ACME)
    [lease] = await store.claim("worker-1", batch=1)
    assert await store.wait(lease) is True
    assert (await store.get(ACME, task_id)).status is RunStatus.WAITING
    assert await store.claim("worker-1", batch=8) == []

    await store.signal(ACME, task_id, "approved", {"by": "dana"})
    assert (await store.get(ACME, task_id)).status is RunStatus.QUEUED
    [resumed] = await store.claim("worker-2", batch=8)
    assert resumed.epoch == lease.epoch + 1
    # A signal already waiting keeps the lease: read it instead of parking.
    await store.signal(ACME, task_id, "more")
    assert await store.wait(resumed) is False
    assert [s.name for s in await store.signals(resumed)] == ["approved", "more"]
    await store.complete(resumed, "ok")


async def test_a_cancel_requested_through_the_platform_ends_a_task_at_its_wait(
    db: Database, store: WorkflowStore
) -> None:
    [task_id] = await _enqueue(store, ACME)
    [lease] = await store.claim("worker-1", batch=1)
    await cancel_run(db, ACME, task_id)  # what POST /v1/runs/{id}/cancel does
    assert (await store.get(ACME, task_id)).cancel_requested
    assert await store.wait(lease) is False
    assert (await store.get(ACME, task_id)).status is RunStatus.CANCELLED
    assert [e.type for e in await store.events(ACME, task_id)][-2:] == [
        "CancelRequested", "RunCancelled"]


async def test_platform_workers_and_the_store_take_only_their_own_kind(
    db: Database, store: WorkflowStore
) -> None:
    [task_id] = await _enqueue(store, ACME)
    agent = await create_agent(db, ACME, "helper", AgentSpec(model="scripted",
                                                             system_prompt="Be brief."))
    run = await create_run(db, ACME, RunRequest(agent.agent_id, None, {"q": 1}, None,
                                                "interactive", None, b"\0" * 32))
    platform = await platform_leases.claim(db, "platform-worker", 10, 30.0)
    assert [x.run for x in platform] == [run.run_id]
    assert [x.task_id for x in await store.claim("library-worker", batch=10)] == [task_id]
    # An agent run is not a task: the store does not see it.
    with pytest.raises(NotFound):
        await store.get(ACME, run.run_id)
    with pytest.raises(NotFound):
        await store.signal(ACME, run.run_id, "approved")
    # Nor is an agent a task type.
    with pytest.raises(Conflict):
        await store.enqueue(Task.new("helper").with_tenant(ACME))


async def test_task_types_are_registered_in_order(store: WorkflowStore) -> None:
    with pytest.raises(ValidationFailed):
        await store.enqueue(Task.new("billing", version=2).with_tenant(ACME))
    await _enqueue(store, ACME, name="billing")
    assert isinstance(await store.enqueue(Task.new("billing", version=2).with_tenant(ACME)),
                      Admitted)
    with pytest.raises(ValidationFailed):
        await store.enqueue(Task.new("billing", version=4).with_tenant(ACME))
    registered = await store.register_task(ACME, "billing", 3)
    assert registered.version == 3
    with pytest.raises(NotFound):  # a tenant the store was never told about
        await store.enqueue(Task.new("billing").with_tenant(TenantId.parse("tenant-nobody")))
    with pytest.raises(ValidationFailed):  # a task needs its tenant
        await store.enqueue(Task.new("billing"))
    with pytest.raises(TypeError):
        Task.new("billing").with_tenant("tenant-acme")  # type: ignore[arg-type]


async def test_the_example_runs(database_dsn: str, admin_conn: asyncpg.Connection) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE),
        env={**os.environ, "TENANTRY_DATABASE_URL": database_dsn},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert "finished {'approved_by': 'dana'}" in out.decode()
    status = await admin_conn.fetchval(
        "SELECT status FROM runs WHERE tenant_id = 'tenant-acme' AND kind = 'task'")
    assert status == "finished"
