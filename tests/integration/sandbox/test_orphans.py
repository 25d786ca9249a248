"""A worker killed -9 leaves no sandbox running, on any backend, even when its data dir is
gone too: QEMU dies with its worker (parent-death signal); a paused bwrap sandbox is frozen
and ignores that signal, and gVisor's sandboxes outlive `runsc run` — for those the
worker's guardian (``backends/registry.py``) kills every sandbox it registered as soon as
the worker is gone, keyed by the host-wide registry, not by the worker's folders. The next
backend that starts on the host removes the folders a dead worker left."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from tenantry.sandbox import probe
from tenantry.sandbox.backends.cgroups import PARENT, ROOT
from tenantry.sandbox.pool import PooledDriver
from tests.support.sandbox import BACKENDS, require, sandbox_settings
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(600)

WORKER = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    from tenantry.sandbox import probe
    from tenantry.sandbox.types import Limits
    from tests.support.sandbox import TEST_LIMITS, sandbox_settings

    async def main() -> None:
        name, tmp = sys.argv[1], Path(sys.argv[2])
        backend = probe.build_backend(name, sandbox_settings(tmp, name))
        instance = await backend.launch(TEST_LIMITS[name])
        await instance.pause()  # as in a warm pool: paused is the common state
        print(instance.pid, backend.process_dir, flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
""")

#: A worker as `tenantry worker` runs one: a warm pool (paused sandboxes) and a sandbox
#: claimed for a run that has executed code; it prints the sandboxes' ids and host pids.
POOLED_WORKER = textwrap.dedent("""
    import asyncio, json, sys
    from pathlib import Path
    from tenantry.ids import RunId, TenantId
    from tenantry.sandbox import probe
    from tenantry.sandbox.pool import PooledDriver
    from tenantry.sandbox.types import Binding
    from tests.support.sandbox import TEST_LIMITS, sandbox_settings

    async def main() -> None:
        name, tmp = sys.argv[1], Path(sys.argv[2])
        limits = TEST_LIMITS[name]
        driver = PooledDriver(probe.build_backend(name, sandbox_settings(tmp, name)),
                              pool_size=1, limits=limits)
        driver.start()
        await driver.pool.wait_full(300)
        claimed = await driver.create(Binding(TenantId("tenant-a"), RunId.new()), limits)
        assert (await claimed.run_shell("echo claimed")).stdout == "claimed\\n"
        await driver.pool.wait_full(300)  # refilled: one paused in the pool
        boxes = [claimed.instance, *driver.pool._ready]
        print(json.dumps([[b.id, b.pid] for b in boxes]), flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too (reaped by whoever adopts it).
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _host_processes(instance_id: str, pid: int) -> set[int]:
    """Every host process of one sandbox: its cgroup's members (gVisor's sandbox and
    gofer, bwrap's tree, QEMU) and the process the worker started."""
    found = {pid}
    for name in (instance_id, f"microvm-{instance_id}"):
        procs = ROOT / "pids" / PARENT / name / "cgroup.procs"
        if procs.exists():
            found.update(int(p) for p in procs.read_text().split())
    return found


def _remove(directory: Path) -> None:
    """Delete a folder whose files a dying sandbox may be removing meanwhile (runsc)."""

    def vanished(function: object, path: str,
                 error: tuple[type[BaseException], BaseException, object]) -> None:
        if not isinstance(error[1], FileNotFoundError):
            raise error[1]

    shutil.rmtree(directory, onerror=vanished)
    assert not directory.exists()


async def test_a_killed_worker_leaves_no_sandbox_running(
    driver: PooledDriver, tmp_path: Path,
) -> None:
    name = driver.backend
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WORKER, name, str(tmp_path), stdout=asyncio.subprocess.PIPE,
        cwd=Path(__file__).parents[3])
    assert worker.stdout is not None
    line = await asyncio.wait_for(worker.stdout.readline(), 240)
    pid_text, folder_text = line.decode().split(maxsplit=1)
    sandbox_pid, folder = int(pid_text), Path(folder_text.strip())
    assert _alive(sandbox_pid)
    worker.send_signal(signal.SIGKILL)
    await worker.wait()
    # The next backend on this host (as a restarted worker's) removes what it left.
    assert folder.name == f"proc-{worker.pid}"
    reaper = probe.build_backend(name, sandbox_settings(tmp_path, name))
    await reaper.close()
    assert not await asyncio.to_thread(folder.exists)

    async def gone() -> bool:
        return not _alive(sandbox_pid)

    await until(gone, f"the {name} sandbox of the killed worker ended", 30)


GUARDED_WORKER = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    from tenantry.sandbox import probe
    from tests.support.sandbox import TEST_LIMITS, sandbox_settings

    async def main() -> None:
        name, tmp = sys.argv[1], Path(sys.argv[2])
        backend = probe.build_backend(name, sandbox_settings(tmp, name))
        instance = await backend.launch(TEST_LIMITS[name])
        await instance.pause()
        print(instance.id, instance.pid, backend.backstop.guardian_pid, flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
""")


@pytest.mark.parametrize("name", ["gvisor", "bwrap"])
async def test_a_later_start_kills_what_a_worker_and_its_guardian_left(
    name: str, tmp_path: Path,
) -> None:
    """The worker's guardian killed with it (an OOM kill of both, a `kill -9` of every
    tenantry process): the sandbox keeps running until any backend starts on the host,
    wherever its data dir is — the host-wide registry says whose it was."""
    require(name)
    data_dir = tmp_path / "data"
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-c", GUARDED_WORKER, name, str(data_dir),
        stdout=asyncio.subprocess.PIPE, cwd=Path(__file__).parents[3])
    assert worker.stdout is not None
    try:
        line = (await asyncio.wait_for(worker.stdout.readline(), 240)).decode().split()
        instance_id, pid, guardian = line[0], int(line[1]), int(line[2])
        processes = _host_processes(instance_id, pid)
        os.kill(guardian, signal.SIGKILL)
    finally:
        worker.send_signal(signal.SIGKILL)
        await worker.wait()
    await asyncio.to_thread(_remove, data_dir)
    # Nothing else ends it: a frozen bwrap sandbox ignores its parent-death signal, and
    # gVisor's sandbox is not the worker's child at all.
    assert any(_alive(p) for p in processes)
    later = probe.build_backend(name, sandbox_settings(tmp_path / "another-worker", name))
    await later.close()

    async def none_left() -> bool:
        return not any(_alive(p) for p in processes)

    await until(none_left, f"the {name} sandbox of the dead worker ended", 60)


@pytest.mark.parametrize("name", BACKENDS)
async def test_no_sandbox_outlives_its_worker_even_when_its_data_dir_is_gone(
    name: str, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    """The attack: a worker SIGKILLed with pooled (paused) and claimed sandboxes, its data
    dir deleted, and no other worker ever starting on the host: nothing of it may keep
    running (mining, holding the tenant's files) with nobody left to reap it."""
    require(name)
    if name == "microvm":
        request.getfixturevalue("guest_image")
    data_dir = tmp_path / "data"
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-c", POOLED_WORKER, name, str(data_dir),
        stdout=asyncio.subprocess.PIPE, cwd=Path(__file__).parents[3])
    assert worker.stdout is not None
    try:
        line = await asyncio.wait_for(worker.stdout.readline(), 540)
    finally:
        with_sandboxes = worker.returncode is None
        worker.send_signal(signal.SIGKILL)
        await worker.wait()
    assert with_sandboxes and line, "the worker did not start its sandboxes"
    boxes = json.loads(line)
    assert len(boxes) == 2  # one claimed, one pooled
    processes: set[int] = set()
    for instance_id, pid in boxes:
        processes |= _host_processes(instance_id, pid)
    await asyncio.to_thread(_remove, data_dir)

    async def none_left() -> bool:
        return not any(_alive(pid) for pid in processes)

    def left() -> str:
        return "\n".join(Path(f"/proc/{p}/cmdline").read_text().replace("\0", " ")[:200]
                         for p in processes if _alive(p))

    await until(none_left, f"every {name} sandbox process of the killed worker ended", 60,
                left)
