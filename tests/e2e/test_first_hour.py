"""The first hour, as a new user lives it: `tenantry up --demo` started as a process on a
fresh data dir, the README tour's steps over HTTP (a run that needs an approval, approved,
finished; `tenantry runs wait` instead of a sleep), a run in flight at Ctrl-C, and a second
start on the same data dir. The whole log stays free of ERROR lines and tracebacks, the
second start finds nothing left behind, and the demo key of the first start still works."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx2
import orjson
import pytest

from tenantry.db.embedded import EmbeddedPostgres
from tests.support.api import free_port
from tests.support.up_process import BIN, start_up, stop_up, up_env

pytestmark = pytest.mark.e2e
TOKEN = "op_first_hour"
# What must never appear on the happy path (log lines are JSON: TENANTRY_LOG_FORMAT=json).
BAD = re.compile(r'"level":"(error|critical)"|\bERROR\b|Traceback|Task was destroyed|'
                 r"CancelledError|KeyboardInterrupt")


def _up(data_dir: Path, port: int, log: Path) -> subprocess.Popen[str]:
    return start_up(up_env(data_dir, port, TOKEN), log, demo=True)


def _stop(proc: subprocess.Popen[str], log: Path) -> str:
    return stop_up(proc, log)


def _no_errors(log: str, what: str) -> None:
    bad = [line[:600] for line in log.splitlines() if BAD.search(line)]
    assert not bad, f"{what}: ERROR or traceback on the happy path:\n" + "\n".join(bad)


def _demo_key(log: str) -> str:
    found = re.search(r"^demo tenant: demo  api key: (tnt_\S+)", log, re.MULTILINE)
    assert found is not None, log[:2000]
    return found[1]


def _wait(url: str, key: str, run: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`tenantry runs wait`, as the tour runs it (key and URL from the environment)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENANTRY_")}
    env.update(TENANTRY_URL=url, TENANTRY_API_KEY=key)
    return subprocess.run([str(BIN / "tenantry"), "runs", "wait", run, *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_tour_and_ctrl_c_leave_a_clean_log_and_a_restart_keeps_the_demo_key(
    tmp_path: Path,
) -> None:
    tools = subprocess.Popen([sys.executable, "-m", "tenantry.testing.mcp_server",
                              "--port", "0"], text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    data_dir, port = tmp_path / "data", free_port()
    base = f"http://127.0.0.1:{port}"
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    proc: subprocess.Popen[str] | None = None
    try:
        assert tools.stdout is not None
        ready = tools.stdout.readline()
        assert ready.startswith("READY "), ready
        mcp_url = ready.split()[1]

        proc = _up(data_dir, port, first_log)
        op = {"Authorization": f"Bearer {TOKEN}"}
        with httpx2.Client(base_url=base, timeout=10) as c:
            assert c.post("/admin/v1/tenants", headers=op, json={
                "name": "Acme", "tenant_id": "acme"}).status_code == 201
            key = c.post("/admin/v1/tenants/acme/api-keys", headers=op).json()["api_key"]
            h = {"Authorization": f"Bearer {key}"}
            r = c.post("/admin/v1/tenants/acme/tool-servers", headers=op, json={
                "name": "effects", "url": mcp_url, "honours_idempotency_keys": True})
            assert r.status_code == 201, r.text
            r = c.post("/v1/agents", headers=h, json={
                "name": "support-bot", "model": "scripted", "system_prompt": "Answer briefly.",
                "tools": ["effect", "echo"], "needs_approval": ["effect"],
                "limits": {"max_steps": 20}})
            assert r.status_code == 201, r.text
            agent = r.json()["agent_id"]
            script = [{"tool_calls": [{"name": "effect",
                                       "arguments": {"note": "refund {input}"}}]},
                      {"text": "Done: {last_tool_result}"}]
            run = c.post("/v1/runs", headers={**h, "Idempotency-Key": "order-42"}, json={
                "agent_id": agent, "input": {"input": "order 42", "script": script}}
            ).json()["run_id"]

            waited = _wait(base, key, run, "--status", "waiting", "--timeout", "30")
            assert (waited.returncode, waited.stdout) == (0, "waiting\n"), waited
            # Someone watches the waiting run live, and closes the stream before approving
            # (as the console's run page does when left): the stream's wait is cancelled.
            with c.stream("GET", f"/v1/runs/{run}/events", headers=h) as stream:
                lines = stream.iter_lines()
                assert next(line for line in lines if line.startswith("event: ")) == (
                    "event: RunCreated")
            approvals = c.get("/v1/approvals", params={"status": "pending"}, headers=h).json()
            [approval] = approvals["data"]
            r = c.post(f"/v1/approvals/{approval['approval_id']}", headers=h,
                       json={"decision": "approve"})
            assert r.status_code == 200, r.text
            done = _wait(base, key, run, "--timeout", "30")  # default: finished
            assert (done.returncode, done.stdout) == (0, "finished\n"), done
            answer = c.get(f"/v1/runs/{run}", headers=h).json()["answer"]
            assert answer == "Done: applied refund order 42"
            # A run that ended cannot reach another status: exit 1 at once, saying which.
            ended = _wait(base, key, run, "--status", "waiting", "--timeout", "30")
            assert (ended.returncode, ended.stdout) == (1, "finished\n"), ended
            bad = _wait(base, key, run, "--status", "parked")
            assert bad.returncode == 2 and "not a run status" in bad.stderr, bad

            # A run in flight at Ctrl-C: its model call (a minute long) is under way.
            slow = c.post("/v1/runs", headers=h, json={"agent_id": agent, "input": {
                "input": "x", "script": [{"text": "slow", "delay_ms": 60_000}]}}
            ).json()["run_id"]
            assert _wait(base, key, slow, "--status", "running").returncode == 0
            timed_out = _wait(base, key, slow, "--timeout", "0.5")
            assert (timed_out.returncode, timed_out.stdout) == (1, "running\n"), timed_out
            assert "timed out after 0.5 s; the run is running" in timed_out.stderr
        first_pid = proc.pid
        first = _stop(proc, first_log)
        _no_errors(first, "first start")
        # The built-in scripted model's uvicorn says nothing the API's does not.
        for line in ("Started server process", "Application startup complete"):
            assert first.count(line) == 1, line
        demo_key = _demo_key(first)

        proc = _up(data_dir, port, second_log)
        with httpx2.Client(base_url=base, timeout=10) as c:
            # The key the first start printed still works: a user's pasted curl too.
            r = c.get("/v1/runs", headers={"Authorization": f"Bearer {demo_key}"})
            assert r.status_code == 200, r.text
        second = _stop(proc, second_log)
        _no_errors(second, "second start")
        assert _demo_key(second) == demo_key
        assert "kept in the data dir" in second
        # A clean stop leaves nothing for the next start to reap. (Only the first start's
        # own: the bwrap backend's instance folders may live in a host-wide /tmp folder,
        # where a worker another test SIGKILLed may have left some.)
        reaped = [orjson.loads(line) for line in second.splitlines()
                  if line.startswith("{") and "left behind" in line]
        assert [r for r in reaped if r.get("pid") == first_pid] == [], reaped
        proc = None

        tools.send_signal(signal.SIGINT)
        _, tools_err = tools.communicate(timeout=30)
        assert tools.returncode == 0, tools_err
        _no_errors(tools_err, "the MCP test server")
    finally:
        for process in (proc, tools):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
        for pipe in (tools.stdout, tools.stderr):
            if pipe is not None:
                pipe.close()
        EmbeddedPostgres(data_dir).stop()  # never a Postgres left behind
