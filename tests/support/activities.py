"""Activities for tests: publish one over HTTP (or build a version body from source text),
look at the tasks a run's tool calls enqueued (ADR 0015), and a real dispatcher with
test-sized timings."""

from __future__ import annotations

import base64
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from tenantry.activities import Bundle
from tenantry.activities.tasks.dispatcher import Dispatcher
from tenantry.activities.tasks.store import ActivityStore
from tenantry.db import Database
from tenantry.ids import RunId, TenantId
from tenantry.sandbox.pool import PooledDriver
from tenantry.store import Admitted, TenantPolicy, WorkflowStore
from tenantry.vault import Vault
from tests.support.api import TEST_MASTER_KEY, Api
from tests.support.sandbox import TEST_LIMITS

#: Returns what the guest saw: its key and its input.
ECHO_KEY = """
def handle(value, context):
    return {"key": context.idempotency_key, "input": value}
"""


#: Hostile payloads, each ending its sandbox one way (the attempt and chaos tests): a
#: segfault, a memory bomb, a fork bomb, an endless loop.
SEGFAULT = """
    import ctypes
    def handle(value, context):
        ctypes.string_at(0)
"""
MEMORY_BOMB = """
    def handle(value, context):
        hog = []
        while True:
            hog.append(b"x" * (16 << 20))
"""
FORK_BOMB = """
    import os
    def handle(value, context):
        while True:
            try:
                os.fork()
            except OSError:
                pass
"""
LOOP = """
    def handle(value, context):
        while True:
            pass
"""


async def publish_activity(api: Api, headers: dict[str, str], name: str, code: str,
                           **settings: Any) -> dict[str, Any]:
    body = {"name": name, "entrypoint": "main.py:handle",
            "files": {"main.py": b64(code)},
            "timeout_seconds": 60, **settings}
    r = await api.client.post("/v1/activities", json=body, headers=headers)
    assert r.status_code == 201, r.text
    published: dict[str, Any] = r.json()
    return published


async def queued_task(db: Database, tenant: TenantId, activity: str) -> RunId:
    """A queued task of a one-file activity that returns its input, published and enqueued
    through the library under the tenant's default policy: no HTTP, no sandbox."""
    await WorkflowStore(db).set_tenant_policy(tenant, TenantPolicy())
    store = ActivityStore(db)
    await store.publish(tenant, activity, Bundle(
        {"main.py": b"def handle(value, context):\n    return value\n"}, "main.py:handle"))
    queued = await store.enqueue(tenant, activity, {})
    assert isinstance(queued, Admitted)
    return queued.task_id


async def tasks_of(admin_conn: asyncpg.Connection, run_id: str) -> list[asyncpg.Record]:
    """The activity tasks whose parent is the run (``run_…`` id), oldest first."""
    return list(await admin_conn.fetch(
        "SELECT r.tenant_id, r.run_id, r.status, r.idempotency_key, p.tenant_id AS parent_tenant"
        " FROM runs r JOIN runs p ON p.tenant_id = r.tenant_id AND p.run_id = r.parent_run_id"
        " WHERE r.kind = 'activity' AND r.parent_run_id = $1 ORDER BY r.created_at",
        RunId.parse(run_id).uuid))


def b64(source: str) -> str:
    return base64.b64encode(textwrap.dedent(source).encode()).decode()


def version_body(source: str, **over: Any) -> dict[str, Any]:
    """A POST /v1/activities body (without its name) whose main.py is ``source``."""
    body: dict[str, Any] = {"files": {"main.py": b64(source)}, "entrypoint": "main.py:handle",
                            "timeout_seconds": 30,
                            "retry": {"max_attempts": 2, "backoff_seconds": 0}}
    body.update(over)
    return body


def dispatcher_options(backend: str, **over: Any) -> dict[str, Any]:
    """A dispatcher's keyword arguments for tests: one slot, quick polls and heartbeats,
    the backend's test limits; ``over`` wins."""
    return {"slots": 1, "poll_seconds": 0.05, "heartbeat_every": 0.2,
            "limits": TEST_LIMITS[backend], **over}


@asynccontextmanager
async def dispatching(db: Database, driver: PooledDriver, **over: Any
                      ) -> AsyncIterator[Dispatcher]:
    """A started dispatcher (one slot, quick polls), stopped on the way out."""
    dispatcher = Dispatcher(db, Vault(db, TEST_MASTER_KEY), driver,
                            **dispatcher_options(driver.backend, **over))
    dispatcher.start()
    try:
        yield dispatcher
    finally:
        await dispatcher.stop()
