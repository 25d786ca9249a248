"""No silent downgrade of isolation: real ``tenantry`` processes on a
host where the stronger sandbox backends are missing (a PATH without runsc, an
image folder where no guest image was built), or where the worker is not root (a microVM
without its network namespace and cgroup). A production worker below
TENANTRY_SANDBOX_MIN_BOUNDARY exits 2 with one line and drives nothing; ``tenantry up``
(development) falls back and says so in its banner; ``tenantry sandbox probe`` names the
boundary in force and what it runs without."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

from tests.support.api import Api, free_port
from tests.support.harness import tenantry_command
from tests.support.sandbox import hosts_path, placeholder_image_dir, unbuilt_image_dir
from tests.support.waiting import until

#: Run as uid 65534 (nobody) but able to read the root-owned interpreter and code: a worker
#: that is simply not root, which is what the microvm backend's confinement depends on.
NOT_ROOT = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
            "--inh-caps=+dac_read_search,+dac_override",
            "--ambient-caps=+dac_read_search,+dac_override", "--"]


def only_bwrap_env(tmp: Path, **extra: str) -> dict[str, str]:
    """No runsc, no guest image built: of the three backends only bwrap works here."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENANTRY_")}
    env.update(PATH=hosts_path(tmp, without=("runsc",)),
               TENANTRY_DATA_DIR=str(tmp / "data"),
               TENANTRY_SANDBOX_IMAGE_DIR=str(unbuilt_image_dir(tmp)),
               TENANTRY_LOG_FORMAT="json", **extra)
    return env


def tenantry(*args: str, env: dict[str, str], prefix: list[str] | None = None
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*(prefix or []), *tenantry_command(), *args], env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def assert_refused(result: subprocess.CompletedProcess[str], says: list[str]) -> None:
    shown = f"stdout: {result.stdout!r}\nstderr: {result.stderr!r}"
    assert result.returncode == 2, shown
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), shown
    assert "Traceback" not in result.stderr + result.stdout, shown
    for text in says:
        assert text in lines[0], shown


async def test_a_worker_whose_boundary_is_below_the_minimum_refuses_and_runs_nothing(
    api: Api, database_dsn: str, tmp_path: Path,
) -> None:
    _, h = await api.tenant()
    agent = await api.agent(h)
    run_id = await api.start(h, agent, "hello")
    env = only_bwrap_env(tmp_path, TENANTRY_DATABASE_URL=database_dsn,
                         TENANTRY_SANDBOX_MIN_BOUNDARY="microvm")
    result = await asyncio.to_thread(tenantry, "worker", env=env)
    assert_refused(result, says=[
        "sandbox boundary in force would be bwrap", "TENANTRY_SANDBOX_MIN_BOUNDARY=microvm",
        "microvm: no guest image built", "gvisor: runsc not found",
        "set TENANTRY_SANDBOX_MIN_BOUNDARY lower"])
    assert (await api.run(h, run_id))["status"] == "queued"  # nobody drove it


def test_a_configured_weak_backend_is_refused_like_a_probed_one(tmp_path: Path) -> None:
    env = only_bwrap_env(tmp_path, TENANTRY_SANDBOX_BACKEND="bwrap",
                         TENANTRY_DATABASE_URL="postgresql://postgres@127.0.0.1:5432/none")
    result = tenantry("worker", env=env)
    assert_refused(result, says=["would be bwrap", "TENANTRY_SANDBOX_BACKEND=bwrap is "
                                 "configured", "TENANTRY_SANDBOX_MIN_BOUNDARY=gvisor"])


def test_a_configured_backend_that_cannot_run_here_is_one_line(tmp_path: Path) -> None:
    env = only_bwrap_env(tmp_path, TENANTRY_SANDBOX_BACKEND="gvisor",
                         TENANTRY_DATABASE_URL="postgresql://postgres@127.0.0.1:5432/none")
    result = tenantry("worker", env=env)
    assert_refused(result, says=["TENANTRY_SANDBOX_BACKEND=gvisor cannot run here: runsc "
                                 "not found (Debian package runsc)"])


def test_code_execution_off_by_choice_is_not_a_downgrade(tmp_path: Path) -> None:
    # It gets past the boundary check to the database (absent here): its error, not ours.
    env = only_bwrap_env(tmp_path, TENANTRY_SANDBOX_BACKEND="none",
                         TENANTRY_SANDBOX_MIN_BOUNDARY="microvm",
                         TENANTRY_DATABASE_URL="postgresql://postgres@127.0.0.1:5432/"
                                               "tenantry_no_such_db")
    result = tenantry("worker", env=env)
    assert_refused(result, says=["no database 'tenantry_no_such_db'"])


def test_a_worker_that_is_not_root_gets_a_degraded_microvm_and_refuses(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENANTRY_")}
    env.update(TENANTRY_DATA_DIR=str(tmp_path / "data"),
               TENANTRY_SANDBOX_IMAGE_DIR=str(placeholder_image_dir(tmp_path)),
               TENANTRY_DATABASE_URL="postgresql://postgres@127.0.0.1:5432/none")
    probe = tenantry("sandbox", "probe", env=env, prefix=NOT_ROOT)
    assert probe.returncode == 0, probe.stderr
    assert ("boundary in force: microvm, degraded: no network namespace, no cgroup limits, "
            "no unprivileged uid (the worker is not root) (probed)") in probe.stdout
    assert "minimum TENANTRY_SANDBOX_MIN_BOUNDARY=gvisor: NOT met" in probe.stdout
    # gVisor works here, yet the probe's first choice is a microVM running unconfined:
    # it ranks below gVisor, so the default minimum refuses it.
    result = tenantry("worker", env=env, prefix=NOT_ROOT)
    assert_refused(result, says=["would be microvm, degraded: no network namespace",
                                 "TENANTRY_SANDBOX_MIN_BOUNDARY=gvisor",
                                 "run the worker as root"])


def test_sandbox_probe_names_the_boundary_in_force_and_the_minimum(tmp_path: Path) -> None:
    result = tenantry("sandbox", "probe", env=only_bwrap_env(
        tmp_path, TENANTRY_SANDBOX_MIN_BOUNDARY="microvm"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:3] == [
        f"no  microvm: no guest image built; run `tenantry sandbox build-image` "
        f"(looked in {tmp_path / 'no-image'})",
        "no  gvisor: runsc not found (Debian package runsc)",
        "ok  bwrap (development only: shares the host kernel)"], result.stdout
    assert "boundary in force: bwrap (probed)" in lines
    assert "degradations: none" in lines
    assert ("minimum TENANTRY_SANDBOX_MIN_BOUNDARY=microvm: NOT met; `tenantry worker` "
            "refuses to start, `tenantry up` starts with a warning") in lines


async def test_a_development_start_falls_back_and_says_so(
    database_dsn: str, tmp_path: Path,
) -> None:
    port = free_port()
    env = only_bwrap_env(tmp_path, TENANTRY_DATABASE_URL=database_dsn,
                         TENANTRY_SANDBOX_MIN_BOUNDARY="microvm", TENANTRY_PORT=str(port),
                         TENANTRY_OPERATOR_TOKEN="op_boundary", TENANTRY_SANDBOX_POOL_SIZE="0")
    out, err = tmp_path / "up.out", tmp_path / "up.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = await asyncio.create_subprocess_exec(*tenantry_command(), "up", env=env,
                                                    stdout=stdout, stderr=stderr)
    try:
        async def started() -> bool:
            assert proc.returncode is None, f"tenantry up exited: {err.read_text()}"
            return "sandbox boundary in force: bwrap" in err.read_text() and \
                "operator token" in out.read_text()

        await until(started, "tenantry up serving with its worker's sandbox boundary logged",
                    60, details=lambda: out.read_text() + err.read_text())
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
    banner = out.read_text().splitlines()
    warning = [line for line in banner if line.startswith("warning: ")]
    assert len(warning) == 1, banner
    assert "sandbox boundary in force is bwrap, weaker than " \
           "TENANTRY_SANDBOX_MIN_BOUNDARY=microvm" in warning[0]
    assert "`tenantry up` starts anyway" in warning[0]
    assert proc.returncode == 0, err.read_text()
