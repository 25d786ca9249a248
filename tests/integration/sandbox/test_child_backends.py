"""The two backends whose sandbox is one child process of the worker, on this host: gvisor
(the guest agent under runsc: ptrace platform, no network, a read-only root, cgroup v1
limits) and bwrap (bubblewrap + seccomp + rlimits + cgroup v1 around the guest agent).
Real processes, real cgroups; needs root (cgroup v1 writes).

What both must do is tested once, over both backends (``backend``). What only one has —
bwrap's seccomp filter and rlimits, gVisor's memory floor and ``runsc`` state — is in the
sections marked for that backend, on its own fixture."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import tenantry.sandbox.backends.child as child_module
from tenantry.sandbox.backends.bwrap import BwrapBackend
from tenantry.sandbox.backends.cgroups import PARENT, ROOT
from tenantry.sandbox.backends.child import ChildInstance
from tenantry.sandbox.backends.gvisor import MIN_MEMORY_MIB, GvisorBackend
from tenantry.sandbox.backends.uids import HOST_UID_BASE, UidAllocator
from tenantry.sandbox.probe import AGENT_PATH
from tenantry.sandbox.types import EXIT_KILLED, Limits, SandboxUnavailable

ChildBackend = BwrapBackend | GvisorBackend
BACKENDS: dict[str, type[ChildBackend]] = {"gvisor": GvisorBackend, "bwrap": BwrapBackend}


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    # Under pytest's 0700 base directory on purpose: bwrap runs as an unprivileged uid and
    # must not need to reach it.
    return tmp_path / "state"


@pytest.fixture(params=sorted(BACKENDS))
async def backend(request: pytest.FixtureRequest, state_dir: Path
                  ) -> AsyncIterator[ChildBackend]:
    backend = BACKENDS[request.param](state_dir, AGENT_PATH)
    yield backend
    await backend.close()


@pytest.fixture
async def bwrap(state_dir: Path) -> AsyncIterator[BwrapBackend]:
    backend = BwrapBackend(state_dir, AGENT_PATH)
    yield backend
    await backend.close()


@pytest.fixture
async def gvisor(state_dir: Path) -> AsyncIterator[GvisorBackend]:
    backend = GvisorBackend(state_dir, AGENT_PATH)
    yield backend
    await backend.close()


def running(pid: int) -> bool:
    """Whether the process still exists and is not a zombie (a killed sandbox process
    reparented to init may wait a moment to be reaped; it runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


async def exec_(instance: ChildInstance, **fields: object) -> dict[str, object]:
    return await instance.channel.request("exec", timeout=60, **{"timeout_s": 30, **fields})


# -- both backends ----------------------------------------------------------------------


async def test_runs_code_and_destroy_removes_everything(backend: ChildBackend) -> None:
    instance = await backend.launch(Limits())
    cgroup_dirs = [ROOT / c / PARENT / instance.id for c in ("memory", "cpu", "pids")]
    assert instance.alive and all(d.is_dir() for d in cgroup_dirs)
    pids = instance.cgroup.pids()
    assert pids
    if isinstance(backend, BwrapBackend):
        # bwrap's outer process is in the cgroup; runsc's is not (its sandbox is).
        assert instance.process.pid in pids

    reply = await exec_(instance, argv=["python3", "-c", "print(6*7)"])
    assert reply["exit_code"] == 0 and reply["stdout"] == "42\n"
    assert instance.directory.is_dir()
    assert (instance.pss_kib() or 0) > 0
    if isinstance(backend, GvisorBackend):
        assert instance.id in await backend.runsc("list")

    await instance.destroy()
    assert not instance.alive
    assert not instance.directory.exists()
    assert not any(d.exists() for d in cgroup_dirs)
    assert not any(running(pid) for pid in [*pids, instance.process.pid])
    if isinstance(backend, GvisorBackend):
        assert instance.id not in await backend.runsc("list")
    await instance.destroy()  # idempotent


async def test_files_persist_between_executions(backend: ChildBackend) -> None:
    instance = await backend.launch(Limits())
    await exec_(instance, shell="echo kept > note.txt")
    reply = await exec_(instance, python="print(open('/work/note.txt').read(), end='')")
    assert reply["stdout"] == "kept\n"


def _host_processes_with(marker: str) -> list[str]:
    """Command lines of host processes that mention ``marker`` (a bwrap sandbox's processes
    are host processes; gVisor's guest processes are its sentry's, seen with ``ps`` inside)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and running(int(entry.name)):
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmdline:
                found.append(cmdline)
    return found


#: The attack: processes that leave the execution's session — a setsid'd shell, and a
#: double fork that also calls setsid — each saying it runs before the execution returns.
ESCAPES = (
    "setsid sh -c 'echo up > up1; exec sleep 1717' & "
    "python3 -c \"import os, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        open('up2', 'w').write('up'); time.sleep(1718)\n"
    "    os._exit(0)\n\"; "
    "while [ ! -s up1 ] || [ ! -s up2 ]; do sleep 0.01; done; echo started"
)


async def test_nothing_an_execution_starts_outlives_it(backend: ChildBackend) -> None:
    instance = await backend.launch(Limits())
    reply = await exec_(instance, shell=ESCAPES)
    assert reply["exit_code"] == 0 and reply["stdout"] == "started\n", reply
    # The next execution (the same run's, or whoever it might talk to) finds none of them.
    seen = await exec_(instance, shell="ps -eo args")
    assert "sleep 171" not in str(seen["stdout"]) and "1718" not in str(seen["stdout"]), seen
    assert _host_processes_with("sleep 1717") == []
    assert _host_processes_with("1718") == []
    # The sandbox itself carries on.
    assert (await exec_(instance, shell="echo still here"))["stdout"] == "still here\n"


async def test_work_is_capped_in_all_not_only_per_file(backend: ChildBackend) -> None:
    """The attack: many files, each under the per-file cap (RLIMIT_FSIZE), whose sum is
    far above the sandbox's disk limit: the writes stop with ENOSPC inside the sandbox,
    and nothing of them lands on the host's disk."""
    instance = await backend.launch(Limits(disk_mib=16))
    fill = ("import errno\nwritten = 0\ntry:\n"
            "    for i in range(12):\n"
            "        with open(f'fill{i}', 'wb') as f:\n"
            "            for _ in range(4):\n"
            "                f.write(b'x' * (1 << 20)); written += 1\n"
            "except OSError as e:\n"
            "    print(errno.errorcode[e.errno], written)\n"
            "else:\n"
            "    print('wrote', written)\n")
    reply = await exec_(instance, python=fill)
    outcome, written = str(reply["stdout"]).split()
    assert outcome == "ENOSPC" and int(written) <= 16, reply
    on_host = sum(f.stat().st_size for f in instance.directory.rglob("*") if f.is_file())
    assert on_host < 1 << 20
    # What fits still works: the sandbox is full, not broken.
    assert (await exec_(instance, shell="rm fill*; echo ok > note; cat note"))["stdout"] == "ok\n"


async def test_confinement(backend: ChildBackend) -> None:
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


async def test_pause_and_resume(backend: ChildBackend) -> None:
    instance = await backend.launch(Limits())
    await instance.pause()
    if isinstance(backend, BwrapBackend):
        assert instance.cgroup.freezer_state() == "FROZEN"
    else:
        assert '"paused"' in await backend.runsc("state", instance.id)
    await instance.resume()
    assert (await instance.channel.request("ping"))["ok"]
    await instance.apply_limits(Limits(cpus=0.5))
    quota = (ROOT / "cpu" / PARENT / instance.id / "cpu.cfs_quota_us").read_text()
    assert quota == "50000\n"


@pytest.mark.parametrize(("name", "package"), [("gvisor", "apt-get install runsc"),
                                               ("bwrap", "bubblewrap")])
def test_a_missing_program_names_the_debian_package(
    name: str, package: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(child_module, "HOST_PATH", str(tmp_path))
    with pytest.raises(SandboxUnavailable, match=package):
        BACKENDS[name](tmp_path / "state", AGENT_PATH)


# -- bwrap only: the seccomp filter, rlimits and the host's view of its files ------------


async def test_bwrap_seccomp_denies_namespaces_and_ptrace(bwrap: BwrapBackend) -> None:
    instance = await bwrap.launch(Limits())
    reply = await exec_(instance, shell="unshare -U true")
    assert reply["exit_code"] != 0 and "Operation not permitted" in str(reply["stderr"])
    reply = await exec_(instance, shell="grep Seccomp: /proc/self/status")
    assert reply["stdout"] == "Seccomp:\t2\n"


async def test_bwrap_memory_limit_kills_the_execution_not_the_sandbox(
    bwrap: BwrapBackend,
) -> None:
    instance = await bwrap.launch(Limits(memory_mib=96))
    assert (ROOT / "memory" / PARENT / instance.id / "memory.limit_in_bytes").read_text() == (
        f"{96 * 1024 * 1024}\n"
    )
    reply = await exec_(instance, python="x = bytearray(400 * 1024 * 1024)\nprint('survived')")
    assert reply["exit_code"] == EXIT_KILLED
    assert instance.cgroup.oom_killed()
    assert (await instance.channel.request("ping"))["ok"]


async def test_bwrap_pids_limit_stops_a_fork_bomb(bwrap: BwrapBackend) -> None:
    instance = await bwrap.launch(Limits(pids=24))
    code = (
        "import subprocess\n"
        "children = []\n"
        "try:\n"
        "    for _ in range(64):\n"
        "        children.append(subprocess.Popen(['sleep', '30']))\n"
        "except OSError as exc:\n"
        "    print('stopped', exc.errno)\n"
        "for c in children: c.kill()\n"
    )
    reply = await exec_(instance, python=code)
    assert str(reply["stdout"]).startswith("stopped")
    assert (await instance.channel.request("ping"))["ok"]


async def test_bwrap_close_destroys_every_instance(state_dir: Path) -> None:
    backend = BwrapBackend(state_dir, AGENT_PATH)
    instances = [await backend.launch(Limits()) for _ in range(2)]
    await backend.close()
    assert not any(i.alive or i.directory.exists() for i in instances)


def _host_uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for {pid}")


async def test_bwrap_two_workers_never_share_a_host_uid(tmp_path: Path) -> None:
    """Two backends, as two worker processes on one host have, each with its own
    allocator over the host-wide leases (a folder of this test's, and a range of three
    uids, so that any reuse would show): every live sandbox has a uid no other has, and
    once the range is taken a launch is refused rather than doubled up."""
    leases = tmp_path / "uids"
    leases.mkdir()
    base = HOST_UID_BASE + 59_000
    workers = [BwrapBackend(tmp_path / f"state-{n}", AGENT_PATH,
                            uids=UidAllocator(leases, base=base, count=3)) for n in range(2)]
    try:
        instances = [await workers[0].launch(Limits()), await workers[1].launch(Limits()),
                     await workers[0].launch(Limits())]
        # The processes inside run as the instance's host uid: no two the same.
        uids = [_host_uid(instance.cgroup.pids()[-1]) for instance in instances]
        assert len(set(uids)) == 3 and all(base <= uid < base + 3 for uid in uids), uids
        with pytest.raises(SandboxUnavailable, match="no free sandbox uid"):
            await workers[1].launch(Limits())
        await instances[1].destroy()  # its uid is free again, for either worker
        again = await workers[0].launch(Limits())
        assert _host_uid(again.cgroup.pids()[-1]) == uids[1]
    finally:
        for worker in workers:
            await worker.close()


@pytest.fixture
def reachable_dir() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="tenantry-bwrap-test-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


async def test_bwrap_instance_dirs_live_under_a_reachable_state_dir(reachable_dir: Path) -> None:
    backend = BwrapBackend(reachable_dir / "state", AGENT_PATH)
    instance = await backend.launch(Limits())
    assert instance.directory.parent.parent == reachable_dir / "state"  # …/proc-<pid>/<id>
    assert (await exec_(instance, shell="echo ok"))["stdout"] == "ok\n"
    await backend.close()
    assert not instance.directory.exists()


# -- gvisor only: runsc's memory floor ---------------------------------------------------


async def test_gvisor_limits_reach_the_cgroup_with_a_memory_floor(gvisor: GvisorBackend) -> None:
    instance = await gvisor.launch(Limits(memory_mib=128, cpus=0.5))
    memory = ROOT / "memory" / PARENT / instance.id / "memory.limit_in_bytes"
    assert int(memory.read_text()) == MIN_MEMORY_MIB * 1024 * 1024
    quota = ROOT / "cpu" / PARENT / instance.id / "cpu.cfs_quota_us"
    assert quota.read_text() == "50000\n"
    await instance.apply_limits(Limits(cpus=0.25))
    assert quota.read_text() == "25000\n"
