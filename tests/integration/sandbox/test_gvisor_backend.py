"""The gvisor backend on this host: the guest agent under runsc (ptrace platform, no
network, a read-only root, cgroup v1 limits). Real runsc processes; needs root."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tenantry.sandbox.backends.bwrap as bwrap_module
from tenantry.sandbox import channel as channel_module
from tenantry.sandbox.backends.cgroups import PARENT, ROOT
from tenantry.sandbox.backends.gvisor import MIN_MEMORY_MIB, GvisorBackend, GvisorInstance
from tenantry.sandbox.types import Limits, SandboxUnavailable

AGENT = Path(channel_module.__file__).parent / "guest" / "agent.py"


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[GvisorBackend]:
    backend = GvisorBackend(tmp_path / "state", AGENT)
    yield backend
    await backend.close()


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


async def exec_(instance: GvisorInstance, **fields: object) -> dict[str, object]:
    return await instance.channel.request("exec", timeout=60, **{"timeout_s": 30, **fields})


async def test_runs_code_and_destroy_removes_everything(backend: GvisorBackend) -> None:
    instance = await backend.launch(Limits())
    cgroup_dirs = [ROOT / c / PARENT / instance.id for c in ("memory", "cpu", "pids")]
    assert instance.alive and all(d.is_dir() for d in cgroup_dirs)
    pids = instance.cgroup.pids()
    assert pids

    reply = await exec_(instance, argv=["python3", "-c", "print(6*7)"])
    assert reply["exit_code"] == 0 and reply["stdout"] == "42\n"
    assert (instance.pss_kib() or 0) > 0
    assert instance.id in await backend.runsc("list")

    await instance.destroy()
    assert not instance.alive
    assert not instance.directory.exists()
    assert not any(d.exists() for d in cgroup_dirs)
    assert not any(running(pid) for pid in [*pids, instance.process.pid])
    assert instance.id not in await backend.runsc("list")
    await instance.destroy()  # idempotent


async def test_files_persist_between_executions(backend: GvisorBackend) -> None:
    instance = await backend.launch(Limits())
    await exec_(instance, shell="echo kept > note.txt")
    reply = await exec_(instance, python="print(open('/work/note.txt').read(), end='')")
    assert reply["stdout"] == "kept\n"
    assert (instance.directory / "work" / "note.txt").read_text() == "kept\n"


async def test_confinement(backend: GvisorBackend) -> None:
    instance = await backend.launch(Limits())
    probe = (
        "import os, socket\n"
        "print(os.getuid())\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=5)\n"
        "    print('connected')\n"
        "except OSError as exc:\n"
        "    print('no network', exc.errno)\n"
        "print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))\n"
        "try:\n"
        "    open('/usr/evil', 'w')\n"
        "except OSError:\n"
        "    print('usr read-only')\n"
        "print(os.path.exists('/root'), os.path.exists('/home'))\n"
    )
    reply = await exec_(instance, python=probe)
    lines = str(reply["stdout"]).splitlines()
    assert lines[0] == "1000"
    assert lines[1].startswith("no network")
    assert lines[2] == "['lo']"
    assert lines[3] == "usr read-only"
    assert lines[4] == "False False"


async def test_limits_reach_the_cgroup_with_a_memory_floor(backend: GvisorBackend) -> None:
    instance = await backend.launch(Limits(memory_mib=128, cpus=0.5))
    memory = ROOT / "memory" / PARENT / instance.id / "memory.limit_in_bytes"
    assert int(memory.read_text()) == MIN_MEMORY_MIB * 1024 * 1024
    quota = ROOT / "cpu" / PARENT / instance.id / "cpu.cfs_quota_us"
    assert quota.read_text() == "50000\n"
    await instance.apply_limits(Limits(cpus=0.25))
    assert quota.read_text() == "25000\n"


async def test_pause_and_resume(backend: GvisorBackend) -> None:
    instance = await backend.launch(Limits())
    await instance.pause()
    assert '"paused"' in await backend.runsc("state", instance.id)
    await instance.resume()
    assert (await instance.channel.request("ping"))["ok"]


def test_missing_runsc_names_the_debian_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bwrap_module, "HOST_PATH", str(tmp_path))
    with pytest.raises(SandboxUnavailable, match="apt-get install runsc"):
        GvisorBackend(tmp_path / "state", AGENT)
