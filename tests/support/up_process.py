"""`tenantry up` as a person runs it: a real process on a fresh data dir, its whole log in
a file, stopped with Ctrl-C (SIGINT). Shared by the first-hour and README-tour tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx2

BIN = Path(sys.executable).parent  # the environment's `tenantry` and `python`


def up_env(data_dir: Path, port: int, token: str, **extra: str) -> dict[str, str]:
    """The environment without any TENANTRY_* of the caller's, plus what names this one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENANTRY_")}
    env.update(TENANTRY_DATA_DIR=str(data_dir), TENANTRY_PORT=str(port),
               TENANTRY_OPERATOR_TOKEN=token, TENANTRY_LOG_FORMAT="json", **extra)
    return env


def start_up(env: dict[str, str], log: Path, *, demo: bool) -> subprocess.Popen[str]:
    """`tenantry up [--demo]`, stdout and stderr into ``log``, once it answers /healthz."""
    port = env["TENANTRY_PORT"]
    with log.open("w") as out:
        proc = subprocess.Popen([str(BIN / "tenantry"), "up", *(["--demo"] if demo else [])],
                                env=env, text=True, stdout=out, stderr=subprocess.STDOUT)
    with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
        for _ in range(600):
            if proc.poll() is not None:
                raise AssertionError(f"tenantry up exited:\n{log.read_text()}")
            try:
                if client.get("/healthz").status_code == 200:
                    return proc
            except httpx2.TransportError:
                pass
            with contextlib.suppress(subprocess.TimeoutExpired):  # it exiting ends the wait
                proc.wait(timeout=0.1)
    proc.kill()
    raise AssertionError(f"tenantry up did not answer within 60 s:\n{log.read_text()}")


def stop_up(proc: subprocess.Popen[str], log: Path) -> str:
    """Ctrl-C, as a person stops `make up`: exit status 0, and the log it wrote."""
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    return text


async def scripted_agent(client: httpx2.AsyncClient, token: str,
                         name: str) -> tuple[dict[str, str], str]:
    """A new tenant ``name``, its API key's headers and an agent on the scripted model,
    through the running platform's API (``token``: its operator token)."""
    op = {"Authorization": f"Bearer {token}"}
    tenant = (await client.post("/admin/v1/tenants", json={"name": name}, headers=op)).json()
    key = (await client.post(f"/admin/v1/tenants/{tenant['tenant_id']}/api-keys",
                             headers=op)).json()["api_key"]
    h = {"Authorization": f"Bearer {key}"}
    agent = (await client.post("/v1/agents", json={"name": name.lower(), "model": "scripted",
                                                    "system_prompt": "hi"}, headers=h)).json()
    return h, str(agent["agent_id"])
