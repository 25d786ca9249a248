"""Moving a tenant between cells through the directory (ADR 0029): runs mid-flight and one
waiting for approval finish in the new cell, no effect twice, the old cell keeps nothing;
bad moves are refused before anything changes; an interrupted move resumes or rolls back."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from tenantry.cells import copy, directory, freeze
from tenantry.cells.freeze import MoveFailed
from tenantry.cells.move import Mover, Phase, set_cell_access
from tenantry.errors import Conflict, NotFound, ValidationFailed
from tenantry.ids import RunId
from tests.support.api import Api, serving_api
from tests.support.cells import directory_database
from tests.support.db import scratch_database
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker


@pytest.fixture
async def eu_2(admin_dsn: str, template_db: str) -> AsyncIterator[str]:
    async with scratch_database(admin_dsn, "tenantry_eu2", template=template_db) as dsn:
        yield dsn


@pytest.fixture
async def directory_conn(admin_dsn: str, database_dsn: str, eu_2: str,
                         tmp_path: Path) -> AsyncIterator[asyncpg.Connection]:
    """A directory of three cells: eu-1 (this test's database), eu-2, us-1 (no database:
    only ever refused)."""
    async with directory_database(admin_dsn) as directory_dsn:
        conn = await asyncpg.connect(directory_dsn)
        try:
            for cell, region, dsn in (("eu-1", "eu", database_dsn), ("eu-2", "eu", eu_2),
                                      ("us-1", "us", None)):
                await directory.add_cell(conn, cell, region=region,
                                         api_url="http://127.0.0.1:9", operator_token="t")
                if dsn is not None:
                    await set_cell_access(conn, cell, database_url=dsn,
                                          blob_dir=str(tmp_path / cell / "blobs"))
            yield conn
        finally:
            await conn.close()


async def _eu_tenant(api: Api, fakes: Fakes, directory_conn: asyncpg.Connection,
                     name: str = "Acme") -> tuple[str, dict[str, str], str]:
    tenant, h = await api.tenant(name, region="eu")
    await directory.record_tenant(directory_conn, tenant, region="eu", cell="eu-1")
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["effect", "slow"], needs_approval=["effect"])
    return tenant, h, agent


async def test_a_tenant_moves_with_a_run_in_flight_and_one_waiting_for_approval(
    api: Api, fakes: Fakes, database_dsn: str, eu_2: str, admin_conn: asyncpg.Connection,
    directory_conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    await api.model_account("fake-eu-1", fakes.model.base_url, region="eu")
    tenant, h, agent = await _eu_tenant(api, fakes, directory_conn)
    stays, _h_stays = await api.tenant("Stays", region="eu")
    blobs = tmp_path / "eu-1" / "blobs" / tenant
    blobs.mkdir(parents=True)
    (blobs / "report.txt.abc123").write_bytes(b"saved by a sandbox")
    steps: list[tuple[str, int, int]] = []
    async with running_worker(database_dsn, None, name="eu-1-worker"):
        waiting = await api.start(h, agent, scripted(call("effect", note="approved later"),
                                                     answer("{last_tool_result}")))
        in_flight = await api.start(h, agent, scripted(call("slow", seconds=1.0),
                                                       answer("carried over")))

        async def both_under_way() -> bool:
            pending = (await api.client.get("/v1/approvals", params={"status": "pending"},
                                            headers=h)).json()["data"]
            return bool(pending) and any(c.tool == "slow" for c in fakes.mcp.calls)

        await until(both_under_way, "one run waits for approval, one is in its slow call", 30)
        # A webhook endpoint, a delivery to it and an attempt in the history (ADR 0045):
        # rows with foreign keys to the run and the endpoint move too.
        endpoint = uuid.uuid4()
        await admin_conn.execute(
            "INSERT INTO webhook_endpoints (tenant_id, endpoint_id, slot, url)"
            " VALUES ($1, $2, 1, 'https://hooks.example/end')", tenant, endpoint)
        await admin_conn.execute(
            "INSERT INTO endpoint_deliveries (tenant_id, run_id, endpoint_id, state, attempts)"
            " VALUES ($1, $2, $3, 'delivered', 1)", tenant, RunId.parse(waiting).uuid, endpoint)
        await admin_conn.execute(
            "INSERT INTO webhook_attempts (tenant_id, delivery_id, run_id, endpoint_id, url,"
            " attempt, outcome, status_code) VALUES ($1, $2, $3, $4,"
            " 'https://hooks.example/end', 1, 'delivered', 204)",
            tenant, uuid.uuid4(), RunId.parse(waiting).uuid, endpoint)
        moved = await Mover(directory_conn, progress=lambda *s: steps.append(s)).move(
            tenant, "eu-2")
    assert moved.phase is Phase.DONE and moved.rows_copied and moved.blobs_copied == 1
    assert {s[0] for s in steps} == {"drain", "copy rows", "copy blobs", "switch", "resume",
                                     "clean source"}
    home = await directory.home_of(directory_conn, tenant)
    assert home is not None and (home.cell.name, home.state) == ("eu-2", "active")

    # Nothing of it is left in eu-1 (rows or blobs); the tenant that stayed is untouched.
    for table in await copy.tenant_tables(admin_conn):
        assert await admin_conn.fetchval(
            f"SELECT count(*) FROM {table.quoted} WHERE tenant_id = $1", tenant) == 0, table
    assert not blobs.exists()
    assert (tmp_path / "eu-2" / "blobs" / tenant / "report.txt.abc123").read_bytes() == \
        b"saved by a sandbox"
    assert await admin_conn.fetchval("SELECT count(*) FROM tenants WHERE tenant_id = $1",
                                     stays) == 1

    # In eu-2: the run in flight arrived queued after its slow call's step (handed back,
    # not finished in eu-1); the approval is decided there; both runs finish, each call once.
    target = await asyncpg.connect(eu_2)
    try:
        row = await target.fetchrow("SELECT status, steps FROM runs WHERE run_id = $1",
                                    RunId.parse(in_flight).uuid)
        assert (row["status"], row["steps"]) == ("queued", 1)
        for table in ("webhook_endpoints", "endpoint_deliveries", "webhook_attempts"):
            assert await target.fetchval(
                f"SELECT count(*) FROM {table} WHERE tenant_id = $1", tenant) == 1, table
    finally:
        await target.close()
    async with serving_api(eu_2) as api2:
        await api2.model_account("fake-eu-2", fakes.model.base_url, region="eu")
        async with running_worker(eu_2, None, name="eu-2-worker"):
            pending = (await api2.client.get("/v1/approvals", params={"status": "pending"},
                                             headers=h)).json()["data"]
            assert len(pending) == 1
            r = await api2.client.post(f"/v1/approvals/{pending[0]['approval_id']}",
                                       json={"decision": "approve"}, headers=h)
            assert r.status_code == 200, r.text
            for run in (waiting, in_flight):
                events = await api2.events_until_end(h, run)
                assert events[-1]["type"] == "RunFinished"
            assert (await api2.run(h, waiting))["answer"] == "applied approved later"
            assert (await api2.run(h, in_flight))["answer"] == "carried over"
    assert sorted(c.tool for c in fakes.mcp.calls) == ["effect", "slow"]
    assert await directory_conn.fetchval(
        "SELECT count(*) FROM moves WHERE tenant_id = $1 AND phase = 'done'", tenant) == 1


async def test_bad_moves_are_refused_before_anything_changes(
    api: Api, fakes: Fakes, directory_conn: asyncpg.Connection,
    admin_conn: asyncpg.Connection,
) -> None:
    tenant, _, _ = await _eu_tenant(api, fakes, directory_conn)
    mover = Mover(directory_conn)
    with pytest.raises(NotFound, match="No tenant"):
        await mover.begin("nobody", "eu-2")
    with pytest.raises(NotFound, match="No cell named 'mars-1'"):
        await mover.begin(tenant, "mars-1")
    with pytest.raises(ValidationFailed, match="already lives in cell 'eu-1'"):
        await mover.begin(tenant, "eu-1")
    with pytest.raises(ValidationFailed, match="serves region 'us'"):
        await mover.begin(tenant, "us-1")
    assert await directory_conn.fetchval("SELECT count(*) FROM moves") == 0
    home = await directory.home_of(directory_conn, tenant)
    assert home is not None and home.state == "active"
    assert await freeze.state_of(admin_conn, tenant) is None
    await mover.begin(tenant, "eu-2")
    with pytest.raises(Conflict, match="already being moved"):
        await mover.begin(tenant, "eu-2")


class _Interrupted(Exception):
    pass


def _stop_at(step: str):  # type: ignore[no-untyped-def]
    def progress(what: str, done: int, total: int) -> None:
        if what == step and done == total:
            raise _Interrupted(step)
    return progress


async def test_a_move_interrupted_in_its_copy_rolls_back_and_the_tenant_runs_at_home(
    api: Api, fakes: Fakes, database_dsn: str, eu_2: str, admin_conn: asyncpg.Connection,
    directory_conn: asyncpg.Connection,
) -> None:
    await api.model_account("fake-eu-1", fakes.model.base_url, region="eu")
    tenant, h, agent = await _eu_tenant(api, fakes, directory_conn)
    mover = Mover(directory_conn, progress=_stop_at("copy rows"))
    with pytest.raises(_Interrupted):  # inside the target's transaction: nothing kept
        await mover.move(tenant, "eu-2")
    move = (await directory_conn.fetch("SELECT move_id FROM moves"))[0]["move_id"]
    stopped = await Mover(directory_conn).get(move)
    assert stopped.phase is Phase.COPYING
    target = await asyncpg.connect(eu_2)
    try:
        assert await target.fetchval("SELECT count(*) FROM agents WHERE tenant_id = $1",
                                     tenant) == 0
        # Resumed, and stopped again after the rows committed there, before the switch.
        with pytest.raises(_Interrupted):
            await Mover(directory_conn, progress=_stop_at("copy blobs")).resume(stopped)
        stopped = await Mover(directory_conn).get(move)
        assert stopped.phase is Phase.COPYING
        assert await target.fetchval("SELECT count(*) FROM agents WHERE tenant_id = $1",
                                     tenant) == 1
        rolled = await Mover(directory_conn).rollback(stopped)
        assert rolled.phase is Phase.ROLLED_BACK
        for table in await copy.tenant_tables(target):
            assert await target.fetchval(
                f"SELECT count(*) FROM {table.quoted} WHERE tenant_id = $1", tenant) == 0
        assert await freeze.state_of(target, tenant) is None
    finally:
        await target.close()
    assert await freeze.state_of(admin_conn, tenant) is None
    home = await directory.home_of(directory_conn, tenant)
    assert home is not None and (home.cell.name, home.state) == ("eu-1", "active")
    async with running_worker(database_dsn, None):
        run = await api.start(h, agent, scripted(answer("still home")))
        await api.events_until_end(h, run)
    assert (await api.run(h, run))["answer"] == "still home"


async def test_a_move_interrupted_after_its_switch_resumes_to_the_end(
    api: Api, fakes: Fakes, eu_2: str, admin_conn: asyncpg.Connection,
    directory_conn: asyncpg.Connection,
) -> None:
    tenant, _, _ = await _eu_tenant(api, fakes, directory_conn)
    with pytest.raises(_Interrupted):
        await Mover(directory_conn, progress=_stop_at("switch")).move(tenant, "eu-2")
    move = await Mover(directory_conn).get(
        (await directory_conn.fetch("SELECT move_id FROM moves"))[0]["move_id"])
    assert move.phase is Phase.SWITCHED
    with pytest.raises(Conflict, match="move it back"):
        await Mover(directory_conn).rollback(move)
    # The source is away when the move is resumed: the tenant runs in eu-2 all the same;
    # only the source's cleaning waits for it.
    real = await directory_conn.fetchval("SELECT database_url FROM cells WHERE name = 'eu-1'")
    await directory_conn.execute("UPDATE cells SET database_url = $1 WHERE name = 'eu-1'",
                                 "postgresql://nobody@127.0.0.1:1/gone")
    with pytest.raises(MoveFailed, match="database is not answering"):
        await Mover(directory_conn).resume(move)
    home = await directory.home_of(directory_conn, tenant)
    assert home is not None and (home.cell.name, home.state) == ("eu-2", "active")
    move = await Mover(directory_conn).get(move.move_id)
    assert move.phase is Phase.SWITCHED and "not answering" in (move.detail or "")
    await directory_conn.execute("UPDATE cells SET database_url = $1 WHERE name = 'eu-1'",
                                 real)
    done = await Mover(directory_conn).resume(move)
    assert done.phase is Phase.DONE and done.detail is None
    assert await admin_conn.fetchval("SELECT count(*) FROM agents WHERE tenant_id = $1",
                                     tenant) == 0
    target = await asyncpg.connect(eu_2)
    try:
        assert await target.fetchval("SELECT home_cell FROM tenants WHERE tenant_id = $1",
                                     tenant) == "eu-2"
        assert await freeze.state_of(target, tenant) is None
    finally:
        await target.close()
