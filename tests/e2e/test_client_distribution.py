"""The client SDK installs alone (ADR 0038): the `tenantry-client` wheel built from
clients/python, installed into a fresh virtualenv, brings none of the server's packages, and
a tenant's program run with that environment's Python (nothing of this checkout on its path)
creates an agent, starts a run, waits for it and reads its events from a real platform."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest

from tests.support.api import free_port
from tests.support.up_process import start_up, stop_up, up_env

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
SERVER_ONLY = {"fastapi", "starlette", "uvicorn", "asyncpg", "cryptography", "jinja2", "typer",
               "rich", "mcp", "pgserver", "pydantic", "tenantry"}

PROGRAM = """
import importlib.util
from tenantry.client import Client, Event

print("server:", [m for m in ("tenantry.runs", "tenantry.api") if importlib.util.find_spec(m)])
client = Client()
agent = client.agents.create("alone-bot", model="scripted", system_prompt="Answer briefly.")
print("agent:", agent.agent_id, agent.version)
started = client.runs.create(agent.agent_id, {"input": "the client alone",
                                              "script": [{"text": "Hello from {input}"}]})
run = client.runs.wait(started.run_id, timeout=60)
print("run:", run.status, repr(run.answer))
print("events:", [e.type for e in client.runs.events(started.run_id) if isinstance(e, Event)])
"""


def _run(*command: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True,
                          timeout=300, check=False, env=env, cwd=cwd)
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _pins(tmp_path: Path) -> Path:
    """The lock's versions without its hashes (pip turns hash-checking on for a constraint
    with one, and a wheel built here has none)."""
    pins = re.findall(r"^([A-Za-z0-9_.-]+==[^\s;\\]+)", (ROOT / "requirements.lock").read_text(),
                      flags=re.M)
    path = tmp_path / "pins.txt"
    path.write_text("\n".join(pins) + "\n")
    return path


def test_the_client_wheel_installs_alone_and_drives_a_run(tmp_path: Path) -> None:
    pip = [sys.executable, "-m", "pip"]
    _run(*pip, "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir",
         tmp_path / "dist", ROOT / "clients" / "python")
    [wheel] = (tmp_path / "dist").glob("tenantry_client-*.whl")
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    _run(*pip, "--python", python, "install", "--quiet", "--constraint", _pins(tmp_path), wheel)

    installed = _run(python, "-c", "import importlib.metadata as m\n"
                     "print('\\n'.join(d.metadata['Name'].lower() for d in m.distributions()))")
    names = set(installed.split())
    assert {"tenantry-client", "httpx2", "orjson"} <= names, names
    assert not names & SERVER_ONLY, names & SERVER_ONLY

    port = free_port()
    env = up_env(tmp_path / "data", port, "op_alone")
    proc = start_up(env, tmp_path / "up.log", demo=False)
    try:
        with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                           headers={"Authorization": "Bearer op_alone"}) as operator:
            assert operator.post("/admin/v1/tenants", json={
                "name": "Alone", "tenant_id": "alone"}).status_code == 201
            key = operator.post("/admin/v1/tenants/alone/api-keys").json()["api_key"]
        # The program's environment names the platform and nothing of this checkout.
        program_env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                       "TENANTRY_URL": f"http://127.0.0.1:{port}", "TENANTRY_API_KEY": key}
        out = _run(python, "-c", PROGRAM, env=program_env, cwd=tmp_path)
    finally:
        stop_up(proc, tmp_path / "up.log")

    assert "server: []\n" in out, out
    assert re.search(r"^agent: agt_[0-9a-f]{32} 1$", out, flags=re.M), out
    assert "run: finished 'Hello from the client alone'\n" in out, out
    assert "events: ['RunCreated', 'ModelReplied', 'RunFinished']\n" in out, out
