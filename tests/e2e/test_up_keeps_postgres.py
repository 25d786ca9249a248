"""`tenantry up` keeps its embedded Postgres alive: the postmaster SIGKILLed under a running
platform is noticed, said once, started again and said back; the API and the worker carry
on by themselves (a run created afterwards finishes) and Ctrl-C still stops everything."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import httpx2
import pytest

from tenantry.db.embedded import EmbeddedPostgres
from tests.support.api import free_port
from tests.support.up_process import scripted_agent, start_up, stop_up, up_env
from tests.support.waiting import until

pytestmark = pytest.mark.e2e
TOKEN = "op_e2e_keeper"


@pytest.mark.timeout(300)
async def test_up_restarts_its_postgres_killed_under_it(tmp_path: Path) -> None:
    data_dir, log = tmp_path / "data", tmp_path / "up.log"
    port = free_port()
    proc = start_up(up_env(data_dir, port, TOKEN), log, demo=False)
    try:
        await _kill_and_recover(f"http://127.0.0.1:{port}", data_dir, log)
        text = stop_up(proc, log)
        assert "Traceback" not in text, text[-3000:]
        assert not (data_dir / "postgres" / "postmaster.pid").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with contextlib.suppress(Exception):  # never leave a Postgres behind
            EmbeddedPostgres(data_dir).stop()


async def _kill_and_recover(base: str, data_dir: Path, log: Path) -> None:
    async with httpx2.AsyncClient(base_url=base, timeout=10) as c:
        h, agent = await scripted_agent(c, TOKEN, "Keeper")

        postmaster = int((data_dir / "postgres" / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGKILL)

        async def said(text: str) -> bool:
            return text in await asyncio.to_thread(log.read_text)

        stopped = f"embedded Postgres stopped (postmaster pid {postmaster} is gone)"
        await until(lambda: said(stopped), "up says its Postgres stopped", 60,
                    lambda: log.read_text()[-3000:])
        await until(lambda: said("embedded Postgres is back"), "up restarts its Postgres",
                    120, lambda: log.read_text()[-3000:])
        said_stopped = (await asyncio.to_thread(log.read_text)).count(stopped)
        assert said_stopped == 1  # one line, not one per poll

        run: dict[str, str] = {}

        async def run_created() -> bool:
            # Until the pools drop their connections to the dead server, a 503 at most.
            r = await c.post("/v1/runs", json={"agent_id": agent, "input": "again"},
                             headers=h)
            assert r.status_code in (202, 503), r.text
            run.update(r.json() if r.status_code == 202 else {})
            return r.status_code == 202

        await until(run_created, "the API takes a run again", 60, lambda: log.read_text()[-3000:])

        async def finished() -> bool:
            got = (await c.get(f"/v1/runs/{run['run_id']}", headers=h)).json()
            return bool(got["status"] == "finished")

        await until(finished, "the worker inside up drives the new run", 120,
                    lambda: log.read_text()[-3000:])
        got = (await c.get(f"/v1/runs/{run['run_id']}", headers=h)).json()
        assert got["answer"] == "You said: again", got

        async def ready() -> bool:
            return (await c.get("/readyz")).status_code == 200

        await until(ready, "/readyz is ready again", 60, lambda: log.read_text()[-3000:])
