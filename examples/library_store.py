"""Tenantry's store as a library: one tenant's task, enqueued, claimed, signalled and done.

    .venv/bin/python examples/library_store.py

Uses the Postgres at TENANTRY_DATABASE_URL (migrating it if needed), else starts a throwaway
embedded one. See docs/how-to/library.md.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import asyncpg

from tenantry.db.embedded import EmbeddedPostgres
from tenantry.db.migrate import migrate
from tenantry.store import (
    Admitted,
    Task,
    TenantId,
    TenantPolicy,
    WorkflowStore,
    new_worker_id,
)


async def main(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)  # the schema, once (a no-op when it is up to date)
    try:
        await migrate(conn)
    finally:
        await conn.close()

    async with WorkflowStore.connect(dsn) as store:
        tenant = TenantId.parse("tenant-acme")  # from authenticated identity, never a body
        await store.set_tenant_policy(tenant, TenantPolicy(max_non_terminal=1_000, max_leases=20))

        task = Task.new("order-review", version=1, input={"order": 1042}).with_tenant(tenant)
        result = await store.enqueue(task)  # Admitted | Overloaded | QuotaExceeded | ...
        if not isinstance(result, Admitted):
            raise SystemExit(f"refused: {result.detail}")
        task_id = result.task_id

        worker_id = new_worker_id("reviewer")
        [lease] = await store.claim(worker_id, batch=8)  # fair across tenants
        assert await store.wait(lease)  # park until a human decides: no worker is held

        await store.signal(tenant, task_id, "approved", {"by": "dana"})  # queued again
        [lease] = await store.claim(worker_id, batch=8)  # a new lease, a new epoch
        [decision] = await store.signals(lease)  # consumed under that epoch, once
        await store.complete(lease, {"approved_by": decision.data["by"]})

        done = await store.get(tenant, task_id)
        print(task_id, done.status.value, done.result)
        for event in await store.events(tenant, task_id):
            print(f"  {event.seq} {event.type}")


if __name__ == "__main__":
    url = os.environ.get("TENANTRY_DATABASE_URL")
    if url:
        asyncio.run(main(url))
    else:
        with tempfile.TemporaryDirectory(prefix="tenantry-example-") as data:
            postgres = EmbeddedPostgres(Path(data))
            try:
                asyncio.run(main(postgres.start()))
            finally:
                postgres.stop()
