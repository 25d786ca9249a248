"""A real ``tenantry api`` process beside the chaos harness's workers: the API as operators
run it (its own pool, LISTEN connection and exception handling), on a loopback port.

Started with the same environment rules as the workers (``harness.worker_env``); nothing
here imports pytest."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2

from tests.support.harness import ChaosError, _die_with_parent, tenantry_command, worker_env
from tests.support.pgcluster import free_port

OPERATOR_TOKEN = "op_chaos_token"


@dataclass(eq=False, slots=True)
class ApiProcess:
    process: asyncio.subprocess.Process
    base_url: str
    stderr: Path

    @property
    def operator(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {OPERATOR_TOKEN}"}

    def log(self) -> str:
        try:
            return self.stderr.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 20) -> str:
        state = "running" if self.process.returncode is None else (
            f"exited {self.process.returncode}")
        return "\n".join([f"--- api pid {self.process.pid}, {state}: {self.stderr}",
                          *self.log().splitlines()[-lines:]])


@asynccontextmanager
async def api_process(
    dsn: str, log_dir: Path, *, master_key: str | None = None,
    pool_max: int | None = None, ready_within: float = 60.0, command: str = "api",
    env: dict[str, str] | None = None, program: Sequence[str] | None = None,
    environ: Callable[[dict[str, str]], dict[str, str]] | None = None,
) -> AsyncIterator[ApiProcess]:
    """``tenantry api`` on ``dsn`` until the block ends (SIGTERM, then SIGKILL). ``pool_max``
    None: the production pool size. ``command="up"``: the API and a worker in one process
    (it migrates ``dsn`` first). ``env``: more settings (a cell's TENANTRY_CELL, ...).
    ``program`` and ``environ``: another ``tenantry`` and what it needs of the environment
    (as :class:`~tests.support.harness.WorkerFleet`'s)."""
    _make_dir(log_dir)
    extra = env or {}
    env = worker_env(log_dir / "api-data", lease_seconds=None, pool_max=pool_max,
                     master_key=master_key)
    env["TENANTRY_OPERATOR_TOKEN"] = OPERATOR_TOKEN
    env.update(extra)
    if environ is not None:
        env = environ(env)
    port = free_port()
    stderr = log_dir / "api.err"
    with (log_dir / "api.out").open("wb") as out, stderr.open("wb") as err:
        process = await asyncio.create_subprocess_exec(
            *(program or tenantry_command()), command, "--database-url", dsn, "--host",
            "127.0.0.1", "--port", str(port), stdin=asyncio.subprocess.DEVNULL, stdout=out,
            stderr=err,
            env=env, start_new_session=True, preexec_fn=_die_with_parent)
    api = ApiProcess(process, f"http://127.0.0.1:{port}", stderr)
    try:
        await _wait_ready(api, ready_within)
        yield api
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 15)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()


def _make_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


async def _wait_ready(api: ApiProcess, within: float) -> None:
    deadline = time.monotonic() + within
    async with httpx2.AsyncClient(base_url=api.base_url, timeout=2) as client:
        while True:
            if api.process.returncode is not None:
                raise ChaosError(f"the API exited before it was ready\n{api.tail()}")
            with contextlib.suppress(httpx2.TransportError):
                if (await client.get("/healthz")).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise ChaosError(f"the API not ready after {within:.0f}s\n{api.tail()}")
            await asyncio.sleep(0.05)
