"""A cell's side of moving a tenant (migration 0031, ADR 0029): a frozen tenant is refused
with a 503 while others go on; its run in flight is handed back at its next step and
resumes once, with no effect made twice; a locked tenant's rows cannot change; its rows copy
to another cell verified table by table, run there, and leave the first cell entirely."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tenantry.cells import copy, freeze
from tenantry.cells.freeze import Frozen
from tenantry.db import Database
from tenantry.ids import RunId, TenantId
from tenantry.vault import MasterKey, Vault
from tests.support.api import TEST_MASTER_KEY, Api, serving_api
from tests.support.db import login_dsn, scratch_database
from tests.support.history import migrate_originals
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker


@pytest.fixture
async def other_cell(admin_dsn: str, template_db: str) -> AsyncIterator[str]:
    """A second cell's database (on the same server: the copy only sees two databases)."""
    async with scratch_database(admin_dsn, "tenantry_cell", template=template_db) as dsn:
        yield dsn


async def test_a_moving_tenant_gets_503_and_another_tenant_goes_on(
    api: Api, fakes: Fakes, worker: object, admin_conn: asyncpg.Connection,
) -> None:
    moving, h_moving = await api.tenant("Moving")
    _, h_other = await api.tenant("Other")
    agent_moving = await api.agent(h_moving)
    agent_other = await api.agent(h_other)
    move = uuid.uuid4()
    await api.client.get("/v1/runs", headers=h_moving)  # its key is in the cache now
    await freeze.freeze(admin_conn, moving, move, Frozen.DRAINING)

    async def refused() -> bool:  # once the API process heard the freeze's notification
        r = await api.client.get("/v1/runs", headers=h_moving)
        return r.status_code == 503

    await until(refused, "the cached key is dropped", 10)
    for method, path, body in (("GET", "/v1/runs", None),
                               ("POST", "/v1/runs", {"agent_id": agent_moving, "input": "x"})):
        r = await api.client.request(method, path, json=body, headers=h_moving)
        assert r.status_code == 503, r.text
        assert r.headers["content-type"] == "application/problem+json"
        assert r.headers["retry-after"] == "5"
        assert r.json()["type"].endswith("tenant_moving")
    run = await api.start(h_other, agent_other, scripted(answer("fine")))
    await api.events_until_end(h_other, run)
    assert (await api.run(h_other, run))["answer"] == "fine"

    await freeze.unfreeze(admin_conn, moving, move)
    r = await api.client.get("/v1/runs", headers=h_moving)
    assert r.status_code == 200


async def test_a_run_in_flight_is_handed_back_at_its_next_step_and_resumes_once(
    api: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection,
) -> None:
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["effect", "slow"])
    move = uuid.uuid4()
    async with running_worker(database_dsn, fakes.model.base_url) as w:
        run = await api.start(h, agent, scripted(
            call("effect", note="one"), call("slow", seconds=1.0), call("effect", note="two"),
            answer("done")))

        async def in_slow_call() -> bool:
            return any(c.tool == "slow" for c in fakes.mcp.calls)

        await until(in_slow_call, "the run calls the slow tool", 30)
        await freeze.drain(admin_conn, tenant, move, within=60)
        run_uuid = RunId.parse(run).uuid
        row = await admin_conn.fetchrow(
            "SELECT status, lease_owner, steps FROM runs WHERE run_id = $1", run_uuid)
        # Back in the queue after the slow call's step, nobody's: the worker let it go.
        assert (row["status"], row["lease_owner"]) == ("queued", None)
        assert row["steps"] == 2
        assert await freeze.state_of(admin_conn, tenant) == (Frozen.LOCKED, move)
        assert w.active == 0
        await asyncio.sleep(0.5)  # the worker polls meanwhile and claims nothing of it
        assert await admin_conn.fetchval(
            "SELECT status FROM runs WHERE run_id = $1", run_uuid) == "queued"

        # Locked: nothing changes its rows, whatever the path.
        async with admin_conn.transaction():
            await admin_conn.execute("SET LOCAL ROLE tenantry_app")
            await admin_conn.execute("SELECT set_config('tenantry.tenant_id', $1, true)",
                                     tenant)
            with pytest.raises(asyncpg.PostgresError) as refused:
                await admin_conn.execute("UPDATE agents SET name = 'renamed'")
            assert refused.value.sqlstate == "TR020"
        r = await api.client.post("/v1/agents", json={"name": "new", "model": "scripted",
                                                      "system_prompt": "x"}, headers=h)
        assert r.status_code == 503

        await freeze.unfreeze(admin_conn, tenant, move)
        events = await api.events_until_end(h, run)
    assert events[-1]["type"] == "RunFinished"
    # Each call once: the hand-back came after the slow call's step was saved.
    assert [(c.tool, c.arguments) for c in fakes.mcp.calls] == [
        ("effect", {"note": "one"}), ("slow", {"seconds": 1.0}), ("effect", {"note": "two"})]


async def test_a_tenant_copies_to_another_cell_verified_runs_there_and_leaves_the_first(
    api: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection,
    other_cell: str,
) -> None:
    tenant, h = await api.tenant("Moving")
    stays, h_stays = await api.tenant("Stays")
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["effect"], needs_approval=["effect"])
    await api.agent(h_stays)
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/secrets/crm",
                             json={"value": "s3cret"}, headers=api.operator)
    assert r.status_code in (200, 201), r.text
    async with running_worker(database_dsn, fakes.model.base_url):
        finished = await api.start(h, agent, scripted(answer("earlier")))
        await api.events_until_end(h, finished)
        waiting = await api.start(h, agent, scripted(call("effect", note="after the move"),
                                                     answer("{last_tool_result}")))

        async def approval_pending() -> bool:
            page = (await api.client.get("/v1/approvals", params={"status": "pending"},
                                         headers=h)).json()
            return bool(page["data"])

        await until(approval_pending, "the run waits for approval", 30)
    move = uuid.uuid4()
    await freeze.drain(admin_conn, tenant, move, within=30)

    there_key = MasterKey.generate()
    target = await asyncpg.connect(other_cell)
    try:
        await freeze.freeze(target, tenant, move, Frozen.ARRIVING)
        copied = await copy.copy_rows(admin_conn, target, tenant,
                                      rewrap=(TEST_MASTER_KEY, there_key))
        assert copied["runs"].rows == 2 and copied["approvals"].rows == 1
        assert copied["run_events"].rows > 0 and copied["secrets"].rows == 1
        for table in ("runs", "approvals", "run_events", "secrets", "agents"):
            assert await target.fetchval(  # counted there, not taken from the copy's word
                f"SELECT count(*) FROM {table} WHERE tenant_id = $1", tenant) == \
                copied[table].rows
        await freeze.unfreeze(target, tenant, move)
        await freeze.freeze(admin_conn, tenant, move, Frozen.MOVED)
        deleted = await freeze.delete_tenant(admin_conn, tenant)
        assert deleted["runs"] == 2
    finally:
        await target.close()

    # The first cell holds none of its rows; the other tenant's are untouched.
    for table in await copy.tenant_tables(admin_conn):
        assert await admin_conn.fetchval(
            f"SELECT count(*) FROM {table.quoted} WHERE tenant_id = $1", tenant) == 0, table
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM agents WHERE tenant_id = $1", stays) == 1
    await freeze.unfreeze(admin_conn, tenant, move)

    # On the other cell, under its own master key: the secret opens, the approval is
    # decided, the run finishes, the effect happens once.
    there = await Database.connect(login_dsn(other_cell), min_size=1, max_size=2)
    try:
        assert await Vault(there, there_key).get(TenantId(tenant), "crm") == "s3cret"
    finally:
        await there.close()
    async with serving_api(other_cell) as api2, \
            running_worker(other_cell, fakes.model.base_url):
        page = (await api2.client.get("/v1/approvals", params={"status": "pending"},
                                      headers=h)).json()
        assert len(page["data"]) == 1
        r = await api2.client.post(f"/v1/approvals/{page['data'][0]['approval_id']}",
                                   json={"decision": "approve"}, headers=h)
        assert r.status_code == 200, r.text
        events = await api2.events_until_end(h, waiting)
        assert (await api2.run(h, waiting))["answer"] == "applied after the move"
        assert (await api2.run(h, finished))["answer"] == "earlier"
    assert events[-1]["type"] == "RunFinished"
    assert [c.arguments for c in fakes.mcp.calls] == [{"note": "after the move"}]


async def test_a_copy_between_cells_of_different_releases_is_refused(
    admin_dsn: str, admin_conn: asyncpg.Connection,
) -> None:
    async with scratch_database(admin_dsn, "tenantry_old",
                                prepare=lambda conn: migrate_originals(conn, upto=30)) as dsn:
        old = await asyncpg.connect(dsn)
        try:
            with pytest.raises(freeze.MoveFailed, match="schemas differ"):
                await copy.same_schema(admin_conn, old)
        finally:
            await old.close()
