"""`tenantry up` as a user runs it: a subprocess on the embedded Postgres, driven over HTTP,
then shut down cleanly."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx2
import pytest

from tenantry.db.embedded import EmbeddedPostgres
from tests.support.api import free_port
from tests.support.sse import read_sse
from tests.support.up_process import scripted_agent
from tests.support.waiting import until

pytestmark = pytest.mark.e2e
TOKEN = "op_e2e_token"


@pytest.fixture
async def platform(tmp_path: Path) -> AsyncIterator[tuple[str, subprocess.Popen[str], Path]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENANTRY_")}
    env.update(TENANTRY_DATA_DIR=str(tmp_path / "data"), TENANTRY_PORT=str(port),
               TENANTRY_OPERATOR_TOKEN=TOKEN, TENANTRY_LOG_FORMAT="json")
    tenantry = Path(sys.executable).parent / "tenantry"
    proc = subprocess.Popen([str(tenantry), "up", "--demo"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    async with httpx2.AsyncClient(base_url=base, timeout=5) as client:
        for _ in range(300):
            if proc.poll() is not None:
                raise AssertionError(f"tenantry up exited: {proc.communicate()}")
            try:
                if (await client.get("/healthz")).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            await asyncio.sleep(0.1)
        else:
            proc.kill()
            raise AssertionError("tenantry up did not answer within 30 s")
    try:
        yield base, proc, tmp_path / "data"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        # Never leave a Postgres behind, even when the platform had to be killed.
        EmbeddedPostgres(tmp_path / "data").stop()


async def test_up_serves_the_whole_flow_on_embedded_postgres_and_stops_cleanly(
    platform: tuple[str, subprocess.Popen[str], Path],
) -> None:
    base, proc, data_dir = platform
    assert (data_dir / "postgres" / "PG_VERSION").exists(), "embedded Postgres not in data dir"
    async with httpx2.AsyncClient(base_url=base, timeout=10) as c:
        h, agent = await scripted_agent(c, TOKEN, "E2E")
        run = (await c.post("/v1/runs", json={"agent_id": agent, "input": "go"},
                            headers=h)).json()
        assert run["status"] == "queued"
        # The worker inside `up` drives it with the built-in scripted (echo) model.
        async with c.stream("GET", run["events_url"], headers=h) as stream:
            events = [e async for e in read_sse(stream)]
        assert [(e.id, e.event) for e in events] == [
            (1, "RunCreated"), (2, "ModelReplied"), (3, "RunFinished")]
        finished = (await c.get(f"/v1/runs/{run['run_id']}", headers=h)).json()
        assert finished["status"] == "finished" and finished["answer"] == "You said: go"
        assert finished["usage"]["input_tokens"] > 0 and finished["cost_micros"] > 0

    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    # A token the operator supplied is not echoed back.
    assert "operator token: (as configured" in out and TOKEN not in out
    # The embedded Postgres was stopped with the platform.
    assert not (data_dir / "postgres" / "postmaster.pid").exists()


async def test_demo_banner_curl_starts_a_run(
    platform: tuple[str, subprocess.Popen[str], Path],
) -> None:
    _base, proc, _ = platform
    assert proc.stdout is not None
    banner = ""
    while "watch it:" not in banner:
        line = await asyncio.to_thread(proc.stdout.readline)
        assert line, "banner ended early"
        banner += line
    lines = [line.strip() for line in banner.splitlines()]
    curl = next(line for line in lines if line.startswith("curl -s -X POST"))
    result = subprocess.run(shlex.split(curl), capture_output=True, text=True, timeout=10,
                            check=True)
    assert re.search(r'"run_id":"run_[0-9a-f]{32}","status":"queued"', result.stdout)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert proc.returncode == 0


async def test_up_serves_tenants_with_logins_that_are_no_superuser(
    platform: tuple[str, subprocess.Popen[str], Path],
) -> None:
    """The embedded cluster's superuser runs the migrations only: the platform's pools log
    in as the powerless login (ADR 0011), so SQL that leaves their role holds nothing."""
    base, _, data_dir = platform
    async with httpx2.AsyncClient(base_url=base, timeout=10) as c:  # the console's pool too
        form = (await c.get("/console/login")).text
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', form)
        assert csrf is not None, form
        r = await c.post("/console/login", data={"token": TOKEN, "csrf": csrf[1]})
        assert r.status_code == 303, r.text
        for page in ("/console/runs", "/console/tenants"):
            assert (await c.get(page)).status_code == 200, page
        assert "Demo tenant" in (await c.get("/console/tenants")).text
    embedded = EmbeddedPostgres(data_dir)  # the running server, as its owner sees it
    conn = await asyncpg.connect(embedded.start())
    try:
        logins = await conn.fetch(
            "SELECT DISTINCT a.usename, r.rolsuper, r.rolbypassrls FROM pg_stat_activity a "
            "JOIN pg_roles r ON r.rolname = a.usename "
            "WHERE a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()")
    finally:
        await conn.close()
    assert {r["usename"] for r in logins} == {"tenantry_login", "tenantry_console_login"}
    assert not any(r["rolsuper"] or r["rolbypassrls"] for r in logins)


ACTIVITY = """
def handle(value, context):
    return {"doubled": value["n"] * 2, "key": context.idempotency_key}
"""


async def test_up_runs_the_activity_dispatcher_and_stops_it_with_the_platform(
    platform: tuple[str, subprocess.Popen[str], Path],
) -> None:
    """A task published and enqueued over HTTP is run by the dispatcher inside `up` (on
    the backend `up` chose), its attempt is counted on /metrics, and SIGTERM stops all."""
    base, proc, _ = platform
    assert proc.stdout is not None
    banner = ""
    while "console:" not in banner:
        line = await asyncio.to_thread(proc.stdout.readline)
        assert line, "banner ended early"
        banner += line
    shown = re.search(r"^activity dispatcher: (\d+) slots on (\w+)", banner, re.MULTILINE)
    assert shown is not None, banner
    assert shown[1] == "4"  # TENANTRY_ACTIVITY_WORKER_SLOTS's default
    op = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient(base_url=base, timeout=10) as c:
        tenant = (await c.post("/admin/v1/tenants", json={"name": "Acts"}, headers=op)).json()
        key = (await c.post(f"/admin/v1/tenants/{tenant['tenant_id']}/api-keys",
                            headers=op)).json()["api_key"]
        h = {"Authorization": f"Bearer {key}"}
        code = base64.b64encode(ACTIVITY.encode()).decode()
        r = await c.post("/v1/activities", headers=h, json={
            "name": "double", "files": {"main.py": code}, "entrypoint": "main.py:handle"})
        assert r.status_code == 201, r.text
        r = await c.post("/v1/activity-tasks", headers=h,
                         json={"activity": "double", "input": {"n": 21}})
        assert r.status_code == 202, r.text
        task = r.json()
        async def ended() -> bool:
            status = (await c.get(task["task_url"], headers=h)).json()["status"]
            return status in ("finished", "failed", "cancelled")
        await until(ended, "the dispatcher inside `up` ends the task", 120.0)
        got = (await c.get(task["task_url"], headers=h)).json()
        assert got["status"] == "finished", got
        assert got["result"] == {"doubled": 42, "key": f"{task['task_id']}:double"}
        metrics = (await c.get("/metrics", headers=op)).text
        assert 'tenantry_activity_attempts_total{outcome="completed"} 1' in metrics, metrics
        assert re.search(r'^tenantry_activity_dead_letters\{tenant_class="[^"]+"\} 0$',
                         metrics, re.MULTILINE), metrics
        # The API's blob store and its worker loops' stores, one family, one series each.
        assert metrics.count("# TYPE tenantry_blob_store_errors_total counter") == 1, metrics
        assert 'tenantry_blob_store_errors_total{operation="write"} 0' in metrics, metrics
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
