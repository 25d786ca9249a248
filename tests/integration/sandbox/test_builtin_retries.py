"""A built-in code call cut short, on every backend: the call's idempotency key
reaches the code (its environment and a file); a call whose effects stay in the sandbox is
made again with the same key on a sandbox restored from the last save, so nothing of the
interrupted attempt is there — even in a process that still holds the run's sandbox."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import asyncpg

from tenantry.db import Database
from tenantry.sandbox.manager import SandboxManager
from tenantry.sandbox.pool import PooledDriver
from tenantry.tools.gateway import ToolGateway, ToolResult
from tests.support.api import Api
from tests.support.blob_stores import directory_blobs
from tests.support.sandbox import TEST_LIMITS
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import TEST_ENGINE, Fakes, running_worker

#: Appends to a file in the sandbox, then shows what it found: the key from the environment
#: and from the file, how many attempts the file saw, and whether an earlier call's file is
#: still there.
ATTEMPT = """
import os
with open("attempts.txt", "a") as f:
    f.write("x")
print(json.dumps({"env": os.environ["TENANTRY_IDEMPOTENCY_KEY"],
                  "file": open("/tmp/tenantry/idempotency-key").read(),
                  "attempts": open("attempts.txt").read(),
                  "earlier": os.path.exists("earlier.txt")}))
""".replace("print(", "import json\nprint(", 1)


class CutShortAfterCode(ToolGateway):
    """Makes the code call, then 'crashes' before its result can be saved."""

    async def call(self, *args: Any, **kwargs: Any) -> ToolResult:
        result = await super().call(*args, **kwargs)
        if args[2] == "run_python":
            raise asyncio.CancelledError
        return result


async def test_a_code_call_cut_short_runs_again_afresh_with_the_same_key(
    api: Api, fakes: Fakes, database_dsn: str, db: Database, driver: PooledDriver,
    tmp_path: Path, admin_conn: asyncpg.Connection,
) -> None:
    # One manager for both workers: the process that retries still holds the sandbox the
    # interrupted attempt wrote in (a database outage mid-step leaves it so).
    manager = SandboxManager(driver, directory_blobs(db, tmp_path / "blobs"),
                             limits=TEST_LIMITS[driver.backend], hibernate_after=0)
    _, h = await api.tenant()
    agent = await api.agent(h, tools=["write_file", "run_python"])
    run_id = await api.start(h, agent, scripted(
        call("write_file", path="earlier.txt", content="a finished call's file"),
        call("run_python", code=ATTEMPT), answer("{last_tool_result}")))
    short = dataclasses.replace(TEST_ENGINE, lease_seconds=1.0)
    try:
        async with running_worker(database_dsn, fakes.model.base_url, settings=short,
                                  sandboxes=manager, gateway=CutShortAfterCode,
                                  name="a") as worker_a:
            async def cut_short() -> bool:
                return worker_a.engine.stats.steps >= 2 and not worker_a.active

            await until(cut_short, "worker A made the code call and stopped", 180)
        types = [r["type"] for r in await admin_conn.fetch(
            "SELECT type FROM run_events ORDER BY seq")]
        assert types == ["RunCreated", "ModelReplied", "ToolCompleted", "ModelReplied",
                         "ToolStarted"]
        async with running_worker(database_dsn, fakes.model.base_url, sandboxes=manager,
                                  name="b"):
            events = await api.events_until_end(h, run_id, within=180)
    finally:
        await manager.destroy_all()
    started = next(e["data"] for e in events if e["type"] == "ToolStarted")
    assert started["tool"] == "run_python" and started["fresh_sandbox"] is True
    completed = [e["data"] for e in events if e["type"] == "ToolCompleted"]
    assert [c["tool"] for c in completed] == ["write_file", "run_python"]
    code = completed[1]
    seen = json.loads(json.loads(code["result"])["stdout"])
    # The same key, in the environment and in the file.
    assert seen["env"] == seen["file"] == code["key"] == started["key"]
    # The first attempt's file is not there: one attempt in a fresh sandbox, restored from
    # the last save (none: so the earlier call's file went too, and the model reads that).
    assert seen["attempts"] == "x" and seen["earlier"] is False
    assert code["sandbox"]["id"] != completed[0]["sandbox"]["id"]
    assert code["sandbox"]["restarted"] is True and "restarted" not in completed[0]["sandbox"]
    assert (await api.run(h, run_id))["status"] == "finished"
