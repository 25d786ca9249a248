"""An agent calls an activity as a tool, on real sandboxes (every backend) and a real
Postgres, with a real worker, the fake model over HTTP and the dispatcher (ADR 0015): the
run parks with its slot free (another run of the tenant, held to one running, finishes
meanwhile), the task runs in a fresh sandbox and sees the call's key, and the run resumes
with the result in its ToolCompleted and its answer. A failing activity and a
dead-lettered one are the call's errors, an oversized result is capped, and the run goes on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import orjson
import pytest

from tenantry.activities.tasks.dispatcher import Dispatcher
from tenantry.db import Database
from tenantry.ids import RunId
from tenantry.sandbox.pool import PooledDriver
from tenantry.vault import MasterKey, Vault
from tests.support.activities import ECHO_KEY, publish_activity, tasks_of
from tests.support.api import Api
from tests.support.replay import check_and_record
from tests.support.sandbox import TEST_LIMITS
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

pytestmark = pytest.mark.timeout(900)

#: Hang guards for waits (never asserted as durations): microvm runs under TCG here.
WITHIN = 600.0


@pytest.fixture
async def dispatcher(db: Database, driver: PooledDriver) -> AsyncIterator[Dispatcher]:
    """Made, not started: each test starts it when it is time for tasks to run."""
    d = Dispatcher(db, Vault(db, MasterKey.generate()), driver, slots=2, poll_seconds=0.05,
                   heartbeat_every=0.2, limits=TEST_LIMITS[driver.backend])
    try:
        yield d
    finally:
        await d.stop()


async def _status(admin_conn: asyncpg.Connection, run_id: str) -> tuple[Any, ...]:
    row = await admin_conn.fetchrow("SELECT status, lease_owner FROM runs WHERE run_id = $1",
                                    RunId.parse(run_id).uuid)
    return tuple(row)


async def test_a_run_parks_without_its_slot_and_resumes_with_the_activitys_result(
    api: Api, fakes: Fakes, database_dsn: str, db: Database, admin_conn: asyncpg.Connection,
    dispatcher: Dispatcher,
) -> None:
    tenant, h = await api.tenant()
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/policy", headers=api.operator,
                             json={"max_running": 1})
    assert r.status_code == 200, r.text
    await publish_activity(api, h, "send_invoice", ECHO_KEY)
    caller = await api.agent(h, "caller", tools=["activity:send_invoice"])
    other = await api.agent(h, "other")
    async with running_worker(database_dsn, fakes.model.base_url) as worker:
        run_id = await api.start(h, caller, scripted(
            call("send_invoice", order=7), answer("invoiced: {last_tool_result}")))
        async def parked() -> bool:
            return await _status(admin_conn, run_id) == ("waiting", None)
        await until(parked, "the run parks for its activity", WITHIN)

        async def let_go() -> bool:  # the driver's task ends just after the commit
            return worker.active == 0

        await until(let_go, "nothing holds the parked run in memory", WITHIN)
        [task] = await tasks_of(admin_conn, run_id)
        key = f"{run_id}:2:0"
        assert task["status"] == "queued" and task["idempotency_key"] == key
        assert task["tenant_id"] == task["parent_tenant"] == tenant
        # Its slot is free: the tenant may run one at a time, and this one finishes.
        second = await api.start(h, other, scripted(answer("meanwhile")))
        await api.events_until_end(h, second, within=WITHIN)
        assert (await api.run(h, second))["answer"] == "meanwhile"
        assert await _status(admin_conn, run_id) == ("waiting", None)
        dispatcher.start()
        events = await api.events_until_end(h, run_id, within=WITHIN)
    assert [e["type"] for e in events] == [
        "RunCreated", "ModelReplied", "ActivityRequested", "ActivityReturned",
        "ToolCompleted", "ModelReplied", "RunFinished"]
    requested, returned, completed = (events[i]["data"] for i in (2, 3, 4))
    task_id = str(RunId(task["run_id"]))
    assert requested == {**requested, "key": key, "tool": "activity:send_invoice",
                         "task_id": task_id, "activity": "send_invoice", "version": 1}
    # The guest saw the call's key and the call's arguments as its input.
    seen = {"key": key, "input": {"order": 7}}
    assert returned == {**returned, "key": key, "task_id": task_id, "status": "finished",
                        "result": seen}
    assert completed["key"] == key and orjson.loads(completed["result"]) == seen
    run = await api.run(h, run_id)
    assert run["status"] == "finished"
    answer_text = str(run["answer"])
    assert answer_text.startswith("invoiced: ") and key in answer_text
    assert orjson.loads(answer_text.removeprefix("invoiced: ")) == seen
    got = (await api.client.get(f"/v1/activity-tasks/{task_id}", headers=h)).json()
    assert got["status"] == "finished" and got["result"] == seen and got["attempts"] == 1
    assert dispatcher.outcomes["completed"] == 1
    # The trace shows the wait for the task as the call's tool time, then the requeue.
    trace = (await api.client.get(f"/v1/runs/{run_id}/trace", headers=h)).json()
    waited = [s for s in trace["spans"] if s["label"] == "activity activity:send_invoice"]
    assert [(s["kind"], s["detail"]["task_id"], s["detail"]["status"]) for s in waited] == \
        [("tool", task_id, "finished")]
    assert "queued after the activity" in [s["label"] for s in trace["spans"]]
    await check_and_record(db, tenant, run_id, "activity-tool-finished")


FAILS = """
def handle(value, context):
    raise RuntimeError("the ledger is closed")
"""

BIG = """
def handle(value, context):
    return {"blob": "x" * 20000}
"""

CRASHES = """
import ctypes

def handle(value, context):
    ctypes.string_at(0)  # a segfault: it kills the step, the poison-pill kind
"""


async def test_failed_dead_lettered_and_oversized_activities_are_told_to_the_model(
    api: Api, fakes: Fakes, database_dsn: str, db: Database, admin_conn: asyncpg.Connection,
    dispatcher: Dispatcher,
) -> None:
    tenant, h = await api.tenant()
    await publish_activity(api, h, "close_books", FAILS)
    await publish_activity(api, h, "poison", CRASHES, max_sandbox_deaths=1)
    await publish_activity(api, h, "export", BIG)
    agent = await api.agent(h, tools=["activity:close_books", "activity:poison@1",
                                      "activity:export"])
    dispatcher.start()
    async with running_worker(database_dsn, fakes.model.base_url):
        run_id = await api.start(h, agent, scripted(
            call("close_books"), call("poison", payload="x"), call("export"),
            answer("{tool_results}")))
        events = await api.events_until_end(h, run_id, within=WITHIN)
    assert [e["type"] for e in events] == [
        "RunCreated", "ModelReplied", "ActivityRequested", "ActivityReturned",
        "ToolCompleted", "ModelReplied", "ActivityRequested", "ActivityReturned",
        "ToolCompleted", "ModelReplied", "ActivityRequested", "ActivityReturned",
        "ToolCompleted", "ModelReplied", "RunFinished"]
    failed, dead, big = events[4]["data"], events[8]["data"], events[12]["data"]
    assert failed["tool"] == "activity:close_books" and "result" not in failed
    assert failed["error"].startswith("the activity failed: exit_code: 1")
    assert dead["tool"] == "activity:poison@1"
    assert dead["error"].startswith("the activity was dead-lettered")
    assert "crashed" in dead["error"]
    assert events[7]["data"]["status"] == "dead_lettered"
    # A result over the 8 KiB tool-output cap reaches the model capped; the log's ending
    # (and the task) keep all of it.
    assert events[11]["data"]["result"] == {"blob": "x" * 20000}
    assert big["truncated"] is True and big["output_bytes"] == len('{"blob":""}') + 20000
    assert len(big["result"].encode()) == 8192
    run = await api.run(h, run_id)
    assert run["status"] == "finished"
    told = str(run["answer"])
    assert "ERROR: the activity failed" in told and "ERROR: the activity was dead-lettered" in told
    statuses = [t["status"] for t in await tasks_of(admin_conn, run_id)]
    assert statuses == ["failed", "waiting", "finished"]  # the second: a dead letter
    await check_and_record(db, tenant, run_id, "activity-tool-errors")
