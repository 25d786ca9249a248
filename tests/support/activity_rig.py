"""One rig for the activity tests on real sandboxes and a real Postgres (ADRs 0013, 0014,
0016, and the activity chaos): a store, a vault, dispatchers with test-sized timings (stopped on
the way out), publishing from source text, enqueueing, waiting for a task to settle, and
reading back its attempts and usage facts. What differs between the test files — default
slots, the default settings of a published version, whether the sandboxes handed out are
recorded, whether an attempt carries its event's seq — are the rig's parameters."""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from tenantry.activities import Bundle
from tenantry.activities.code.versions import ActivitySettings
from tenantry.activities.tasks.dispatcher import Dispatcher
from tenantry.activities.tasks.store import ActivityStore, ActivityTask
from tenantry.db import Database
from tenantry.ids import RunId, TenantId
from tenantry.runs import log
from tenantry.sandbox import Binding, Limits, Sandbox, SandboxDriver
from tenantry.sandbox.pool import PooledDriver
from tenantry.store import Admitted, WorkflowStore
from tenantry.vault import MasterKey, Vault
from tests.support.activities import dispatcher_options
from tests.support.waiting import until

#: A hang guard for waits (never asserted as a duration): microvm runs under TCG.
WITHIN = 600.0


class RecordingDriver:
    """The session's driver, remembering each sandbox it handed out (to look at after)."""

    def __init__(self, driver: PooledDriver) -> None:
        self.driver = driver
        self.backend = driver.backend
        self.egress = driver.egress  # its sandboxes' proxy: a dispatcher takes refusals there
        self.sandboxes: list[Sandbox] = []

    async def create(self, binding: Binding, limits: Limits) -> Sandbox:
        sandbox = await self.driver.create(binding, limits)
        self.sandboxes.append(sandbox)
        return sandbox

    async def close(self) -> None:
        """The session's driver outlives the test."""


def settled_now(task: ActivityTask) -> bool:
    """Whether the task has ended or been dead-lettered."""
    return task.status.terminal or task.dead_lettered


class ActivityRig:
    """``slots``: a dispatcher's default slots. ``defaults``: the settings every published
    version starts from (over a 30 s timeout and no backoff). ``record``: dispatchers get a
    :class:`RecordingDriver` (``sandboxes`` then lists what they were handed), and whatever
    a failed test left is destroyed. ``with_seq``: each attempt read back carries its
    event's ``seq`` (to order attempts against other events)."""

    def __init__(self, db: Database, driver: PooledDriver, *, slots: int = 1,
                 defaults: Mapping[str, Any] | None = None, record: bool = False,
                 with_seq: bool = False) -> None:
        self.db = db
        self.driver = driver
        self.store = ActivityStore(db)
        self.vault = Vault(db, MasterKey.generate())
        self.dispatchers: list[Dispatcher] = []
        self.slots = slots
        self.defaults: dict[str, Any] = {"timeout_s": 30.0, "backoff_s": 0.0,
                                         **(defaults or {})}
        self.recording = RecordingDriver(driver) if record else None
        self.with_seq = with_seq

    @property
    def sandboxes(self) -> list[Sandbox]:
        """Every sandbox the rig's dispatchers were handed (``record=True`` only)."""
        assert self.recording is not None, "the rig does not record sandboxes"
        return self.recording.sandboxes

    def dispatcher(self, **kw: Any) -> Dispatcher:
        """A started dispatcher; ``driver=`` puts another driver in front of it."""
        driver: SandboxDriver = kw.pop("driver", self.recording or self.driver)
        options = dispatcher_options(self.driver.backend, **{"slots": self.slots, **kw})
        d = Dispatcher(self.db, self.vault, driver, **options)
        self.dispatchers.append(d)
        d.start()
        return d

    async def publish(self, tenant: TenantId, name: str, code: str, **settings: Any) -> None:
        bundle = Bundle({"main.py": textwrap.dedent(code).encode()}, "main.py:handle")
        await self.store.publish(tenant, name, bundle,
                                 ActivitySettings(**{**self.defaults, **settings}))

    async def enqueue(self, tenant: TenantId, name: str, input: Any = None) -> RunId:
        result = await self.store.enqueue(tenant, name, input)
        assert isinstance(result, Admitted), result
        return result.task_id

    async def settled(self, tenant: TenantId, task: RunId) -> ActivityTask:
        """The task once it has ended or been dead-lettered."""
        async def check() -> bool:
            return settled_now(await self.store.get(tenant, task))
        await until(check, f"task {task} settles", WITHIN)
        return await self.store.get(tenant, task)

    async def run(self, tenant: TenantId, name: str, input: Any = None
                  ) -> tuple[RunId, ActivityTask]:
        """Enqueue a task and wait for it to settle."""
        task = await self.enqueue(tenant, name, input)
        return task, await self.settled(tenant, task)

    async def attempts(self, tenant: TenantId, task: RunId) -> list[dict[str, Any]]:
        async with self.db.tenant_tx(tenant) as conn:
            events = await log.read(conn, tenant, task, limit=1000)
        return [e.data | {"seq": e.seq} if self.with_seq else e.data
                for e in events if e.type == "ActivityAttempted"]

    async def facts(self, tenant: TenantId, task: RunId) -> list[dict[str, Any]]:
        """The task's usage facts, read as its tenant (row-level security applies)."""
        async with self.db.tenant_tx(tenant) as conn:
            rows = await conn.fetch(
                "SELECT * FROM sandbox_usage_facts WHERE tenant_id = $1 AND run_id = $2"
                " ORDER BY seq", tenant.value, task.uuid)
        return [dict(r) for r in rows]

    async def close(self) -> None:
        for d in self.dispatchers:
            await d.stop()
        for sandbox in self.recording.sandboxes if self.recording else ():
            await sandbox.destroy()  # whatever a failed test left


@asynccontextmanager
async def activity_rig(db: Database, driver: PooledDriver, *,
                       tenants: Iterable[TenantId] = (), **options: Any
                       ) -> AsyncIterator[ActivityRig]:
    """A rig whose ``tenants`` exist, its dispatchers stopped on the way out."""
    for tenant in tenants:
        await WorkflowStore(db).ensure_tenant(tenant)
    rig = ActivityRig(db, driver, **options)
    try:
        yield rig
    finally:
        await rig.close()


async def heartbeat_renews(admin_conn: asyncpg.Connection, task: RunId) -> None:
    """Wait until the task's attempt has its sandbox (``ActivityStarted``) and then until
    its lease is renewed once more: that renewal is the attempt's heartbeat, so the guest is
    running its code. A renewal alone would not say so: the dispatcher renews the lease
    while the sandbox is still being made too (a cold pool), and a lease taken then ends the
    attempt before it has a sandbox at all."""
    async def started() -> bool:
        return bool(await admin_conn.fetchval(
            "SELECT count(*) FROM run_events WHERE run_id = $1 AND type = 'ActivityStarted'",
            task.uuid))
    await until(started, "the attempt has its sandbox", WITHIN)

    async def lease_expires_at() -> Any:
        return await admin_conn.fetchval(
            "SELECT lease_expires_at FROM runs WHERE run_id = $1 AND status = 'running'",
            task.uuid)
    first = await lease_expires_at()

    async def renewed() -> bool:
        return await lease_expires_at() != first
    await until(renewed, "the attempt's heartbeat renews the lease", WITHIN)


async def steal_lease(admin_conn: asyncpg.Connection, task: RunId) -> None:
    """Another dispatcher takes the task (as if its lease expired and a claim bumped the
    epoch): the holder's next fenced write finds the lease gone."""
    await admin_conn.execute(
        "UPDATE runs SET lease_epoch = lease_epoch + 1, lease_owner = 'thief',"
        " lease_expires_at = now() + interval '1 hour' WHERE run_id = $1", task.uuid)
