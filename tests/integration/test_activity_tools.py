"""Activities as tools without a sandbox (ADR 0015): publishing checks the activities a
version lists; /v1/runs refuses an activity or a task type as an agent; a run driven again
after a crash between enqueueing and parking finds the same task; a woken run whose task
still waits parks again without a second task; a cancelled task is the call's error."""

from __future__ import annotations

import asyncpg
import pytest

from tenantry.activities.tasks.store import ActivityStore
from tenantry.agents.spec import AgentSpec
from tenantry.db import Database
from tenantry.errors import Conflict
from tenantry.ids import AgentId, RunId, TenantId
from tenantry.runs import log
from tenantry.runs.activity_step import activity_request, await_activity
from tenantry.runs.decide import AwaitActivity, decide
from tenantry.runs.driver import RunDriver
from tenantry.runs.lease import Lease
from tenantry.runs.service import RunRequest, create_run
from tenantry.runs.state import RunState
from tenantry.runs.waiting import Parked
from tenantry.store import WorkflowStore
from tests.support.activities import ECHO_KEY, publish_activity, tasks_of
from tests.support.api import Api
from tests.support.replay import check_and_record
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

WITHIN = 60.0
#: The spec the tests' caller agents are published with (for deciding outside a worker).
ACTIVITY_CALLER = AgentSpec(model="scripted", system_prompt="Be brief.",
                            tools=("activity:send_invoice",))


async def test_publishing_refuses_activities_the_tenant_does_not_have(api: Api) -> None:
    tenant, h = await api.tenant()
    await publish_activity(api, h, "send_invoice", ECHO_KEY)
    bad = {
        "activity:nope": "names no activity of this tenant",
        "activity:send_invoice@2": "names no activity of this tenant at version 2",
    }
    for tool, message in bad.items():
        r = await api.client.post("/v1/agents", headers=h, json={
            "name": "a", "model": "scripted", "system_prompt": "x", "tools": [tool]})
        assert r.status_code == 409, r.text  # well formed: the tenant has no such activity
        assert r.json()["type"] == "conflict" and message in r.json()["detail"]
        assert r.json()["field"] == "tools"
    # Two tools the model would see as one name, and an activity entry that is no name.
    for tools in (["activity:send_invoice", "send_invoice"],
                  ["activity:send_invoice", "activity:send_invoice@1"], ["activity:"]):
        r = await api.client.post("/v1/agents", headers=h, json={
            "name": "a", "model": "scripted", "system_prompt": "x", "tools": tools})
        assert r.status_code in (400, 422), r.text
        assert r.json()["type"] == "validation_error", r.text
    listed = (await api.client.get("/v1/agents", headers=h)).json()["data"]
    assert [a["name"] for a in listed] == ["send_invoice"]  # the activity's own agent only
    # What exists publishes, pinned or not; a new version checks again.
    agent = await api.agent(h, tools=["activity:send_invoice@1"])
    r = await api.client.post(f"/v1/agents/{agent}/versions", headers=h, json={
        "model": "scripted", "system_prompt": "x", "tools": ["activity:other"]})
    assert r.status_code == 409 and "'activity:other'" in r.json()["detail"]
    r = await api.client.post(f"/v1/agents/{agent}/versions", headers=h, json={
        "model": "scripted", "system_prompt": "x", "tools": ["activity:send_invoice"]})
    assert r.status_code == 201, r.text
    del tenant


async def test_runs_refuse_an_activity_or_a_task_type_as_the_agent(api: Api, db: Database,
                                                                   admin_conn: asyncpg.Connection
                                                                   ) -> None:
    tenant, h = await api.tenant()
    await publish_activity(api, h, "send_invoice", ECHO_KEY)
    activity = await ActivityStore(db).version(TenantId(tenant), "send_invoice")
    task_type = await WorkflowStore(db).register_task(TenantId(tenant), "nightly")
    for agent_id, said in ((activity.agent_id, "is an activity"),
                           (task_type.agent_id, "is a library task type")):
        r = await api.client.post("/v1/runs", headers=h,
                                  json={"agent_id": str(agent_id), "input": "go"})
        assert r.status_code == 409, r.text
        assert r.json()["type"] == "conflict" and said in r.json()["detail"]
    # The library's run creation refuses it too; nothing was written either way.
    request = RunRequest(agent_id=AgentId(activity.agent_id.uuid), version=None, input="go",
                         webhook_url=None, priority="interactive", idempotency_key=None,
                         request_sha256=b"x")
    with pytest.raises(Conflict, match="is an activity"):
        await create_run(db, TenantId(tenant), request)
    assert await admin_conn.fetchval("SELECT count(*) FROM runs") == 0
    spec = (await api.client.get("/openapi.json")).json()["paths"]["/v1/runs"]["post"]
    assert "activity" in spec["responses"]["409"]["description"]


async def test_a_crash_after_enqueueing_finds_the_same_task_and_a_woken_run_parks_again(
    api: Api, fakes: Fakes, database_dsn: str, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    tenant, h = await api.tenant()
    await publish_activity(api, h, "send_invoice", ECHO_KEY)
    agent = await api.agent(h, tools=["activity:send_invoice"])
    # The run exists, no worker yet: its model's first reply will be slot 2, so the call's
    # key is known. A worker that enqueued the task and died before recording it left it.
    run_id = await api.start(h, agent, scripted(call("send_invoice", order=7),
                                                answer("{last_tool_result}")))
    key = f"{run_id}:2:0"
    found = await ActivityStore(db).version(TenantId(tenant), "send_invoice")
    left = await create_run(db, TenantId(tenant), activity_request(
        found, {"order": 7}, idempotency_key=key, priority="interactive",
        parent=RunId.parse(run_id)), kind="activity")
    async with running_worker(database_dsn, fakes.model.base_url) as worker:
        async def parked() -> bool:
            row = await admin_conn.fetchrow("SELECT status, lease_owner FROM runs "
                                            "WHERE run_id = $1", RunId.parse(run_id).uuid)
            return tuple(row) == ("waiting", None)
        await until(parked, "the run parks for its activity", WITHIN)
        tasks = await tasks_of(admin_conn, run_id)
        assert [(RunId(t["run_id"]), t["idempotency_key"]) for t in tasks] == \
            [(left.run_id, key)]
        # Woken while the task still waits (nothing ended it): it parks again, no new task.
        await admin_conn.execute("UPDATE runs SET status = 'queued' WHERE run_id = $1",
                                 RunId.parse(run_id).uuid)
        async def claimed_and_parked() -> bool:
            return await parked() and await admin_conn.fetchval(
                "SELECT lease_epoch FROM runs WHERE run_id = $1", RunId.parse(run_id).uuid) == 2
        await until(claimed_and_parked, "the woken run parks again", WITHIN)
        assert len(await tasks_of(admin_conn, run_id)) == 1
        assert worker.active == 0
        # The task is cancelled before any dispatcher ran it (through the tasks' own route;
        # the race test below cancels through the runs'): the call's error, and on.
        r = await api.client.post(f"/v1/activity-tasks/{left.run_id}/cancel", headers=h)
        assert r.json()["status"] == "cancelled"
        events = await api.events_until_end(h, run_id, within=WITHIN)
    types = [e["type"] for e in events]
    assert types == ["RunCreated", "ModelReplied", "ActivityRequested", "ActivityReturned",
                     "ToolCompleted", "ModelReplied", "RunFinished"]
    requested, returned, completed = events[2]["data"], events[3]["data"], events[4]["data"]
    assert requested["task_id"] == returned["task_id"] == str(left.run_id)
    assert requested["key"] == completed["key"] == key
    assert returned["status"] == "cancelled"
    assert "cancelled" in completed["error"] and "result" not in completed
    assert "ERROR: the activity task was cancelled" in str((await api.run(h, run_id))["answer"])
    await check_and_record(db, tenant, run_id, "activity-tool-cancelled")


async def test_an_activity_the_tenant_cannot_admit_is_the_calls_error(
    api: Api, fakes: Fakes, worker: object, admin_conn: asyncpg.Connection,
) -> None:
    tenant, h = await api.tenant()
    await publish_activity(api, h, "send_invoice", ECHO_KEY)
    agent = await api.agent(h, tools=["activity:send_invoice"])
    # One run not yet ended is all this tenant may have: its own task is refused.
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/policy", headers=api.operator,
                             json={"max_queued": 1})
    assert r.status_code == 200, r.text
    run_id = await api.start(h, agent, scripted(call("send_invoice", order=7),
                                                answer("{last_tool_result}")))
    events = await api.events_until_end(h, run_id, within=WITHIN)
    assert [e["type"] for e in events] == ["RunCreated", "ModelReplied", "ToolCompleted",
                                           "ModelReplied", "RunFinished"]
    assert "not enqueued" in events[2]["data"]["error"]
    assert await tasks_of(admin_conn, run_id) == []


async def test_an_ending_that_races_the_park_sends_the_run_back_to_the_queue(
    api: Api, fakes: Fakes, database_dsn: str, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    """A worker holds the run and read its log; the task ends (its ending is appended, but
    the run is running, so nothing queues it); then the worker parks it. The park sees an
    event it did not read and queues the run instead of leaving it waiting forever."""
    tenant, h = await api.tenant()
    await publish_activity(api, h, "send_invoice", ECHO_KEY)
    agent = await api.agent(h, tools=["activity:send_invoice"])
    async with running_worker(database_dsn, fakes.model.base_url) as worker:
        run_id = await api.start(h, agent, scripted(call("send_invoice", order=7),
                                                    answer("{last_tool_result}")))
        run = RunId.parse(run_id)
        async def parked() -> bool:
            return await admin_conn.fetchval("SELECT status FROM runs WHERE run_id = $1",
                                             run.uuid) == "waiting"
        await until(parked, "the run parks for its activity", WITHIN)
        [task] = await tasks_of(admin_conn, run_id)
        # A worker of ours holds it now (a claim, as the fair claim makes one) and reads it.
        epoch = await admin_conn.fetchval(
            "UPDATE runs SET status = 'running', lease_epoch = lease_epoch + 1, "
            "lease_owner = 'racing', lease_expires_at = now() + interval '1 hour' "
            "WHERE run_id = $1 RETURNING lease_epoch", run.uuid)
        driver = RunDriver(worker.engine, Lease(TenantId(tenant), run, epoch))
        async with db.tenant_tx(TenantId(tenant)) as conn:
            driver.state = RunState.fold(await log.read(conn, TenantId(tenant), run))
        waiting = decide(driver.state, ACTIVITY_CALLER, run_id)
        assert waiting == AwaitActivity(f"{run_id}:2:0", str(RunId(task["run_id"])))
        # The task ends before the park.
        r = await api.client.post(f"/v1/runs/{RunId(task['run_id'])}/cancel", headers=h)
        assert r.json()["status"] == "cancelled"
        assert await admin_conn.fetchval("SELECT status FROM runs WHERE run_id = $1",
                                         run.uuid) == "running"
        with pytest.raises(Parked):
            await await_activity(driver, waiting)
        row = await admin_conn.fetchrow("SELECT status, lease_owner FROM runs "
                                        "WHERE run_id = $1", run.uuid)
        # Back in the queue, so the live worker of this test may already have claimed it
        # again (its claims wake at once): never left waiting, never still the racer's.
        assert (row["status"], row["lease_owner"]) in {
            ("queued", None), ("running", worker.engine.worker), ("finished", None)}, tuple(row)
        events = await api.events_until_end(h, run_id, within=WITHIN)
    assert [e["type"] for e in events][-4:] == ["ActivityReturned", "ToolCompleted",
                                                "ModelReplied", "RunFinished"]
    assert len(await tasks_of(admin_conn, run_id)) == 1
