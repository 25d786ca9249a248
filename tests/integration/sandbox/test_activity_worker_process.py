"""`tenantry activity-worker` as a real process on bubblewrap: it runs a tenant's activity
task to its result with the scoped secret, counts the attempt on its --metrics-port, and
stops cleanly on SIGTERM; without the vault's master key it refuses to start with one
line."""

from __future__ import annotations

import asyncio
import signal
import textwrap
from pathlib import Path

import httpx2
import pytest

from tenantry.activities import Bundle
from tenantry.activities.code.versions import ActivitySettings
from tenantry.activities.tasks.store import ActivityStore
from tenantry.db import Database
from tenantry.ids import TenantId
from tenantry.store import Admitted, RunStatus, WorkflowStore
from tenantry.vault import MasterKey, Vault
from tests.support.api import free_port
from tests.support.harness import tenantry_command, worker_env
from tests.support.sandbox import require
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(300)

ACME = TenantId.parse("tenant-acme")
CODE = """
    import os
    def handle(value, context):
        return {"key": context.idempotency_key, "secret": os.environ.get("API_KEY"),
                "n": value["n"]}
"""


async def test_the_activity_worker_process_runs_a_task_and_stops_on_sigterm(
    db: Database, database_dsn: str, tmp_path: Path,
) -> None:
    require("bwrap")
    master = MasterKey.generate()
    await WorkflowStore(db).ensure_tenant(ACME)
    await Vault(db, master).put(ACME, "API_KEY", "acme-key")
    store = ActivityStore(db)
    await store.publish(ACME, "echo", Bundle({"main.py": textwrap.dedent(CODE).encode()},
                                             "main.py:handle"),
                        ActivitySettings(timeout_s=30.0, secrets=("API_KEY",)))
    queued = await store.enqueue(ACME, "echo", {"n": 3})
    assert isinstance(queued, Admitted)

    port = free_port()
    env = {**worker_env(tmp_path / "data", master_key=master.encoded()),
           "TENANTRY_SANDBOX_BACKEND": "bwrap", "TENANTRY_SANDBOX_MIN_BOUNDARY": "bwrap",
           "TENANTRY_OPERATOR_TOKEN": "op_metrics"}
    process = await asyncio.create_subprocess_exec(
        *tenantry_command(), "activity-worker", "--database-url", database_dsn,
        "--slots", "2", "--metrics-port", str(port), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        start_new_session=True)
    try:
        async def finished() -> bool:
            if process.returncode is not None:
                raise AssertionError(f"the worker exited {process.returncode}")
            return (await store.get(ACME, queued.task_id)).status.terminal
        await until(finished, "the activity worker finishes the task", 240.0)
        task = await store.get(ACME, queued.task_id)
        assert task.status is RunStatus.FINISHED, task
        assert task.result == {"key": f"{queued.task_id}:echo", "secret": "acme-key", "n": 3}
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
            refused = await c.get("/metrics")
            scraped = await c.get("/metrics", headers={"Authorization": "Bearer op_metrics"})
        assert refused.status_code == 401
        assert 'tenantry_activity_attempts_total{outcome="completed"} 1' in scraped.text
        assert 'tenantry_activity_attempts_total{outcome="failed"} 0' in scraped.text
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()[-2000:]


async def test_the_activity_worker_refuses_to_start_without_the_master_key(
    database_dsn: str, tmp_path: Path,
) -> None:
    env = {**worker_env(tmp_path / "data"), "TENANTRY_SANDBOX_BACKEND": "bwrap",
           "TENANTRY_SANDBOX_MIN_BOUNDARY": "bwrap"}
    process = await asyncio.create_subprocess_exec(
        *tenantry_command(), "activity-worker", "--database-url", database_dsn,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env)
    _, err = await asyncio.wait_for(process.communicate(), 60)
    lines = err.decode().strip().splitlines()
    assert process.returncode != 0
    assert lines == ["error: tenantry activity-worker needs the vault's master key (its "
                     "activities read their secrets): set TENANTRY_MASTER_KEY"], lines
