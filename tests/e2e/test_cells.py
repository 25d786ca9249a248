"""Two cells behind one `tenantry router`, as operators run them (docs/how-to/cells.md).

Each cell is its own Postgres cluster with a `tenantry api` and a `tenantry worker` process
(cells `eu-1` in region `eu`, `us-1` in region `us`); the global directory is a database of
its own; `tenantry cells add` registers both and `tenantry router` is the one base URL.
An EU and a US tenant each create agents and runs through that URL and the runs finish;
reading both databases shows each tenant's rows only in its own cell; an event stream
resumes through the router with Last-Event-ID (no gap, no repeat); a router restart loses
nothing; a region with no cell and a cell that is down are refused with problem+json."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx2
import orjson
import pytest

from tenantry.ids import RunId
from tenantry.testing.fake_model import FakeModelServer
from tenantry.testing.mcp_server import EffectsMcpServer
from tenantry.vault import MasterKey
from tests.support.api import TEST_MASTER_KEY
from tests.support.api_process import OPERATOR_TOKEN, ApiProcess, api_process
from tests.support.cells import ROUTER_TOKEN, RouterProcess, directory_database, start_router
from tests.support.harness import READY_MARK, _die_with_parent, tenantry_command, worker_env
from tests.support.outage import migrate
from tests.support.pgcluster import PgCluster
from tests.support.scripts import answer, call, scripted
from tests.support.sse import read_sse
from tests.support.waiting import until

pytestmark = pytest.mark.e2e

OPERATOR = {"Authorization": f"Bearer {ROUTER_TOKEN}"}
#: Every table a tenant's rows live in that these runs write.
TENANT_TABLES = ("tenants", "api_keys", "agents", "agent_versions", "runs", "run_events")


@dataclass
class Cell:
    name: str
    region: str
    cluster: PgCluster
    api: ApiProcess
    worker: subprocess.Popen[bytes]
    worker_log: Path
    master_key: MasterKey
    blob_dir: Path  # the worker's: where its runs' blobs are written

    def dsn(self) -> str:
        return self.cluster.dsn()


@dataclass
class Platform:
    cells: dict[str, Cell]
    directory_dsn: str
    root: Path
    router: RouterProcess
    tenants: dict[str, tuple[str, dict[str, str], str]] = field(default_factory=dict)
    models: dict[str, FakeModelServer] = field(default_factory=dict)

    def logs(self) -> str:
        parts = [self.router.tail()]
        for cell in self.cells.values():
            parts += [cell.api.tail(), cell.worker_log.read_text(errors="replace")[-2000:]]
        return "\n".join(parts)


def _cli(*argv: str, directory: str, root: Path) -> subprocess.CompletedProcess[str]:
    env = worker_env(root / "cli-data", lease_seconds=None, pool_max=None)
    env["TENANTRY_DIRECTORY_URL"] = directory
    return subprocess.run([*tenantry_command(), *argv], env=env, capture_output=True,
                          text=True, check=False, timeout=60)


@contextlib.asynccontextmanager
async def _cell(name: str, region: str, root: Path, model_url: str,
                master_key: MasterKey = TEST_MASTER_KEY) -> AsyncIterator[Cell]:
    with PgCluster(root / "pg") as cluster:
        await migrate(cluster.dsn(), root)
        key = master_key.encoded()
        identity = {"TENANTRY_CELL": name, "TENANTRY_REGION": region}
        async with api_process(cluster.dsn(), root / "api", master_key=key,
                               env=identity) as api:
            # Model accounts are each cell's own, in its region: an EU tenant's model calls
            # may only go to an EU account (the rule of one cell, kept across cells).
            async with httpx2.AsyncClient(timeout=30) as client:
                r = await client.post(f"{api.base_url}/admin/v1/model-accounts",
                                      headers=api.operator, json={
                                          "account_id": f"fake-{region}", "provider": "openai",
                                          "base_url": model_url, "models": ["scripted"],
                                          "region": region})
                assert r.status_code == 201, r.text
            env = {**worker_env(root / "worker-data", lease_seconds=None, pool_max=None,
                                master_key=key), **identity}
            log = root / "worker.err"
            with log.open("wb") as err:
                worker = subprocess.Popen(
                    [*tenantry_command(), "worker", "--processes", "1", "--database-url",
                     cluster.dsn(), "--concurrency", "20"], env=env,
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                    start_new_session=True, preexec_fn=_die_with_parent)
            try:
                yield Cell(name, region, cluster, api, worker, log, master_key,
                           root / "worker-data" / "blobs")
            finally:
                worker.terminate()
                try:
                    worker.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.wait()


@pytest.fixture(scope="module")
async def platform(admin_dsn: str, tmp_path_factory: pytest.TempPathFactory
                   ) -> AsyncIterator[Platform]:
    root = tmp_path_factory.mktemp("cells")
    # eu-2: a second EU cell with a master key of its own and its own model server (so a
    # model call shows which cell made it), where a tenant moves to.
    async with FakeModelServer() as model, FakeModelServer() as model_eu2, \
            directory_database(admin_dsn) as directory, \
            _cell("eu-1", "eu", root / "eu-1", model.base_url) as eu, \
            _cell("us-1", "us", root / "us-1", model.base_url) as us, \
            _cell("eu-2", "eu", root / "eu-2", model_eu2.base_url,
                  MasterKey.generate()) as eu2:
        for cell in (eu, us, eu2):
            added = _cli("cells", "add", cell.name, "--region", cell.region, "--api-url",
                         cell.api.base_url, "--operator-token", OPERATOR_TOKEN,
                         "--database-url", cell.dsn(), "--blob-dir", str(cell.blob_dir),
                         *(["--dedicated"] if cell is eu2 else []),
                         directory=directory, root=root)
            assert added.returncode == 0, added.stderr
        listed = _cli("cells", "list", directory=directory, root=root)
        assert listed.returncode == 0 and "eu-1" in listed.stdout and "us-1" in listed.stdout
        router = await start_router(directory, root / "router")
        platform = Platform({"eu": eu, "us": us, "eu-2": eu2}, directory, root, router,
                            models={"eu-1": model, "eu-2": model_eu2})
        try:
            for cell in (eu, us, eu2):
                await until(lambda c=cell: _ready(c), f"{cell.name}'s worker claiming", 60,
                            platform.logs)
            yield platform
        finally:
            await platform.router.stop()


async def _ready(cell: Cell) -> bool:
    return READY_MARK in cell.worker_log.read_bytes()


async def _tenant(client: httpx2.AsyncClient, region: str) -> tuple[str, dict[str, str], str]:
    r = await client.post("/admin/v1/tenants", headers=OPERATOR,
                          json={"name": f"{region} tenant", "region": region})
    assert r.status_code == 201, r.text
    tenant_id = r.json()["tenant_id"]
    r = await client.post(f"/admin/v1/tenants/{tenant_id}/api-keys", headers=OPERATOR)
    assert r.status_code == 201, r.text
    key = {"Authorization": f"Bearer {r.json()['api_key']}"}
    r = await client.post("/v1/agents", headers=key, json={
        "name": f"{region} agent", "model": "scripted", "system_prompt": "Be brief."})
    assert r.status_code == 201, r.text
    return tenant_id, key, r.json()["agent_id"]


async def _run(client: httpx2.AsyncClient, key: dict[str, str], agent: str,
               run_input: object) -> str:
    r = await client.post("/v1/runs", headers=key, json={"agent_id": agent, "input": run_input})
    assert r.status_code == 202, r.text
    run_id: str = r.json()["run_id"]
    return run_id


async def _finished(client: httpx2.AsyncClient, key: dict[str, str], runs: list[str]) -> bool:
    for run_id in runs:
        r = await client.get(f"/v1/runs/{run_id}", headers=key)
        assert r.status_code == 200, r.text
        if r.json()["status"] != "finished":
            return False
    return True


async def _rows(dsn: str, tenant: str) -> dict[str, int]:
    conn = await asyncpg.connect(dsn)
    try:
        return {t: await conn.fetchval(f"SELECT count(*) FROM {t} WHERE tenant_id = $1", tenant)
                for t in TENANT_TABLES}
    finally:
        await conn.close()


async def test_eu_and_us_tenants_run_through_one_url_and_stay_in_their_cells(
    platform: Platform,
) -> None:
    async with httpx2.AsyncClient(base_url=platform.router.base_url, timeout=30) as client:
        runs: dict[str, list[str]] = {}
        for region in ("eu", "us"):
            tenant, key, agent = await _tenant(client, region)
            platform.tenants[region] = (tenant, key, agent)
            r = await client.get(f"/admin/v1/tenants/{tenant}", headers=OPERATOR)
            assert r.json()["home_cell"] == f"{region}-1" and r.json()["region"] == region
            runs[region] = [await _run(client, key, agent, scripted(answer(f"{region} {i}")))
                            for i in range(3)]
        for region in ("eu", "us"):
            _, key, _ = platform.tenants[region]
            await until(lambda k=key, r=runs[region]: _finished(client, k, r),
                        f"{region} runs finished through the router", 60, platform.logs)
            r = await client.get(f"/v1/runs/{runs[region][0]}", headers=key)
            assert r.json()["answer"] == f"{region} 0"
        # The EU key cannot see the US tenant's run, though the router fronts both.
        r = await client.get(f"/v1/runs/{runs['us'][0]}", headers=platform.tenants["eu"][1])
        assert r.status_code == 404
    for region, other in (("eu", "us"), ("us", "eu")):
        tenant = platform.tenants[region][0]
        own = await _rows(platform.cells[region].dsn(), tenant)
        assert own["runs"] == 3 and own["run_events"] > 3 and own["agents"] == 1, own
        assert set((await _rows(platform.cells[other].dsn(), tenant)).values()) == {0}


async def test_an_event_stream_resumes_through_the_router(platform: Platform) -> None:
    _, key, agent = platform.tenants["eu"]
    async with httpx2.AsyncClient(base_url=platform.router.base_url, timeout=30) as client:
        run_id = await _run(client, key, agent, scripted({**answer("slow"), "delay_ms": 3000}))
        first: list[int] = []
        async with client.stream("GET", f"/v1/runs/{run_id}/events", headers=key) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            async for event in read_sse(r):
                first.append(event.id)
                break  # the client goes away mid-run, after the first event
        # Streamed, not buffered: those events came while the run was still going.
        r = await client.get(f"/v1/runs/{run_id}", headers=key)
        assert r.json()["status"] != "finished"
        rest: list[int] = []
        types: list[str] = []
        async with client.stream("GET", f"/v1/runs/{run_id}/events",
                                 headers={**key, "Last-Event-ID": str(first[-1])}) as r:
            assert r.status_code == 200
            async for event in read_sse(r):
                rest.append(event.id)
                types.append(event.event)
        # The whole log, read straight from the cell's API: nothing missing, nothing twice.
        r = await client.get(f"/v1/runs/{run_id}/events",
                             headers={**key, "Accept": "application/json"})
        whole = [e["seq"] for e in r.json()["events"]]
    assert first + rest == whole == list(range(1, len(whole) + 1))
    assert types[-1] == "RunFinished", types


async def test_a_router_restart_loses_nothing(platform: Platform) -> None:
    tenant, key, agent = platform.tenants["us"]
    old = platform.router
    await old.stop()
    platform.router = await start_router(platform.directory_dsn, platform.root / "router",
                                         port=int(old.base_url.rsplit(":", 1)[1]))
    async with httpx2.AsyncClient(base_url=platform.router.base_url, timeout=30) as client:
        r = await client.get("/v1/runs", headers=key)
        assert r.status_code == 200, r.text
        assert len(r.json()["data"]) == 3  # every run from before the restart
        run_id = await _run(client, key, agent, scripted(answer("after restart")))
        await until(lambda: _finished(client, key, [run_id]), "a run after the restart", 60,
                    platform.logs)
        r = await client.get(f"/admin/v1/tenants/{tenant}", headers=OPERATOR)
        assert r.status_code == 200 and r.json()["home_cell"] == "us-1"


async def test_a_tenant_moves_to_another_cell_under_load(platform: Platform) -> None:
    """12 runs inside a 4 s tool call and one waiting for approval; `tenantry cells move`
    while a client keeps creating runs. The client is told 503 tenant_moving (never a 500,
    never lost), the runs in flight are handed back and finish in eu-2 (its own model server
    answers their next steps), the approval is decided there, the tenant's secret opens
    under eu-2's master key, eu-1 keeps none of its rows, and no effect happens twice."""
    eu1, eu2 = platform.cells["eu"], platform.cells["eu-2"]
    async with EffectsMcpServer() as tools, \
            httpx2.AsyncClient(base_url=platform.router.base_url, timeout=30) as client:
        r = await client.post("/admin/v1/tenants", headers=OPERATOR,
                              json={"name": "Mover", "region": "eu", "cell": "eu-1"})
        assert r.status_code == 201 and r.json()["home_cell"] == "eu-1", r.text
        tenant = r.json()["tenant_id"]
        r = await client.post(f"/admin/v1/tenants/{tenant}/api-keys", headers=OPERATOR)
        key = {"Authorization": f"Bearer {r.json()['api_key']}"}
        r = await client.put(f"/admin/v1/tenants/{tenant}/secrets/crm", headers=OPERATOR,
                             json={"value": "crm-token"})
        assert r.status_code in (200, 201), r.text
        r = await client.post(f"/admin/v1/tenants/{tenant}/tool-servers", headers=OPERATOR,
                              json={"name": "effects", "url": tools.url,
                                    "honours_idempotency_keys": True, "secret": "crm"})
        assert r.status_code == 201, r.text
        agents = {}
        for name, extra in (("busy", {}), ("careful", {"needs_approval": ["effect"]})):
            r = await client.post("/v1/agents", headers=key, json={
                "name": name, "model": "scripted", "system_prompt": "Be brief.",
                "tools": ["effect", "slow"], **extra})
            assert r.status_code == 201, r.text
            agents[name] = r.json()["agent_id"]
        busy = [await _run(client, key, agents["busy"], scripted(
            call("slow", seconds=4.0), call("effect", note=f"busy-{i}"), answer(f"done {i}")))
            for i in range(12)]
        waiting = await _run(client, key, agents["careful"], scripted(
            call("effect", note="approved in eu-2"), answer("{last_tool_result}")))

        async def under_way() -> bool:
            pending = (await client.get("/v1/approvals", params={"status": "pending"},
                                        headers=key)).json()["data"]
            return bool(pending) and sum(c.tool == "slow" for c in tools.calls) == len(busy)

        await until(under_way, "every busy run in its slow call, one approval pending", 60,
                    platform.logs)
        env = worker_env(platform.root / "cli-data", lease_seconds=None, pool_max=None)
        env.update(TENANTRY_DIRECTORY_URL=platform.directory_dsn,
                   TENANTRY_MOVE_SOURCE_MASTER_KEY=eu1.master_key.encoded(),
                   TENANTRY_MOVE_TARGET_MASTER_KEY=eu2.master_key.encoded())
        mover = await asyncio.create_subprocess_exec(
            *tenantry_command(), "cells", "move", tenant, "--to", "eu-2", env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        # The runs not finished when the move began (all of them, unless this machine took
        # longer than the slow call to start the CLI): each must take its next step in eu-2.
        directory_conn = await asyncpg.connect(platform.directory_dsn)
        try:
            async def moving() -> bool:
                return mover.returncode is not None or await directory_conn.fetchval(
                    "SELECT state FROM tenants WHERE tenant_id = $1", tenant) == "moving"

            await until(moving, "the move begins", 60, platform.logs)
        finally:
            await directory_conn.close()
        eu1_conn = await asyncpg.connect(eu1.dsn())
        try:
            in_flight = [i for i, run in enumerate(busy) if await eu1_conn.fetchval(
                "SELECT status FROM runs WHERE run_id = $1", RunId.parse(run).uuid)
                != "finished"]
        finally:
            await eu1_conn.close()
        assert in_flight, "every busy run finished before the move began: no load to move"
        during: list[str] = []
        refused = 0
        while mover.returncode is None:  # a client that keeps going, and retries a 503
            r = await client.post("/v1/runs", headers=key, json={
                "agent_id": agents["busy"], "input": scripted(answer("during"))})
            if r.status_code == 503:
                assert r.json()["type"] == "tenant_moving", r.text
                assert r.headers["retry-after"] == "5"
                refused += 1
            else:
                assert r.status_code == 202, r.text
                during.append(r.json()["run_id"])
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(mover.wait(), 0.1)
        out, err = await mover.communicate()
        assert mover.returncode == 0, err.decode()
        assert f"moved {tenant} from eu-1 to eu-2" in out.decode()
        assert "copy rows" in err.decode()  # the progress bar, on stderr
        assert refused > 0

        r = await client.get(f"/admin/v1/tenants/{tenant}", headers=OPERATOR)
        assert r.json()["home_cell"] == "eu-2"
        pending = (await client.get("/v1/approvals", params={"status": "pending"},
                                    headers=key)).json()["data"]
        assert len(pending) == 1
        r = await client.post(f"/v1/approvals/{pending[0]['approval_id']}", headers=key,
                              json={"decision": "approve"})
        assert r.status_code == 200, r.text
        everything = [*busy, waiting, *during]
        await until(lambda: _finished(client, key, everything),
                    "every run finished after the move", 90, platform.logs)
        r = await client.get(f"/v1/runs/{waiting}", headers=key)
        assert r.json()["answer"] == "applied approved in eu-2"

    # eu-1 keeps nothing of the tenant, in any table that holds tenants' rows.
    conn = await asyncpg.connect(eu1.dsn())
    try:
        tables = [r[0] for r in await conn.fetch(
            "SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid "
            "WHERE a.attname = 'tenant_id' AND c.relkind IN ('r', 'p') "
            "AND c.relnamespace = 'public'::regnamespace AND c.relname <> 'frozen_tenants'")]
        for table in tables:
            assert await conn.fetchval(
                f'SELECT count(*) FROM "{table}" WHERE tenant_id = $1', tenant) == 0, table
    finally:
        await conn.close()
    assert (await _rows(eu2.dsn(), tenant))["runs"] == len(everything)
    # The runs in flight took their next steps in eu-2: its model server saw each one.
    seen_in_eu2 = b"".join(req.body for req in platform.models["eu-2"].requests)
    assert all(f"busy-{i}".encode() in seen_in_eu2 for i in in_flight), in_flight
    # Each effect once, each call with the secret eu-2 opened under its own master key.
    stats = tools.stats(include_calls=False)
    assert stats["duplicate_effects"] == 0
    effects = [c for c in tools.calls if c.tool == "effect"]
    assert sorted(c.arguments["note"] for c in effects) == sorted(
        [f"busy-{i}" for i in range(len(busy))] + ["approved in eu-2"])
    assert {c.authorization for c in effects} == {"Bearer crm-token"}


async def test_bad_input_region_with_no_cell_and_a_cell_that_is_down(platform: Platform) -> None:
    _, eu_key, _ = platform.tenants["eu"]
    _, us_key, _ = platform.tenants["us"]
    async with httpx2.AsyncClient(base_url=platform.router.base_url, timeout=30) as client:
        r = await client.post("/admin/v1/tenants", headers=OPERATOR,
                              json={"name": "Asia", "region": "ap"})
        assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
        assert r.json()["type"] == "region_not_served" and r.json()["region"] == "ap"
        # The US cell's API goes away: its tenant gets 503 naming us-1, never EU's data.
        us = platform.cells["us"].api.process
        us.terminate()
        await asyncio.wait_for(us.wait(), 30)
        r = await client.get("/v1/runs", headers=us_key)
        assert r.status_code == 503 and r.headers["retry-after"] == "5", r.text
        problem = orjson.loads(r.content)
        assert problem["type"] == "cell_unavailable" and problem["cell"] == "us-1"
        assert "us-1" in problem["detail"]
        # The EU tenant is not affected.
        assert (await client.get("/v1/runs", headers=eu_key)).status_code == 200
