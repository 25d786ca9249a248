"""A worker killed -9 leaves no sandbox running, even a paused one from its warm pool: QEMU
dies with its worker (parent-death signal; a stopped VM is not a frozen process); a paused
bwrap sandbox is frozen and ignores that signal, and gVisor's sandboxes outlive `runsc run`
— both are destroyed by the next backend that starts on the host."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from pathlib import Path

from tenantry.sandbox import probe
from tenantry.sandbox.pool import PooledDriver
from tests.support.sandbox import sandbox_settings
from tests.support.waiting import until

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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too (reaped by whoever adopts it).
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ")[1][0] != "Z"


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
    # The next backend on this host (as a restarted worker's) removes what it left: for
    # gVisor that includes the sandbox itself, which outlives `runsc run`.
    assert folder.name == f"proc-{worker.pid}" and await asyncio.to_thread(folder.is_dir)
    reaper = probe.build_backend(name, sandbox_settings(tmp_path, name))
    await reaper.close()
    assert not await asyncio.to_thread(folder.exists)

    async def gone() -> bool:
        return not _alive(sandbox_pid)

    await until(gone, f"the {name} sandbox of the killed worker ended", 30)
