"""The ``gvisor`` backend: the guest agent under gVisor's user-space kernel
(``runsc``), for hosts without a usable VM path.

Each instance is an OCI bundle: a shared, read-only root directory whose /usr (and the
/bin, /lib… symlinks into it) comes read-only from the host, the agent and the egress relay
read-only at /agent.py and /relay.py, and /work a tmpfs in the sandbox capped at
``disk_mib`` in all (its pages are the sentry's, inside the memory cgroup). This runsc
has no ``--preserve-fds``: the process's stdio is all it passes in, so stdin is the
agent's channel (a socket, used both ways) and stdout the relay's egress channel
(``child.guest_command``); stderr stays runsc's log. The agent runs as
uid 1000 with no capabilities, so user code is not root even inside gVisor. No network:
``runsc --network=none`` leaves only ``lo``. Memory, pids and cpu limits go in the spec's
``linux.resources``; runsc applies them to a cgroup v1 at ``tenantry/<id>``.

This Debian build of runsc (2022) only works with ``--platform=ptrace`` here: systrap does
not exist in it and the KVM platform hangs on these PVM hosts (notes/sandbox-facts.md).

The guest's processes are the sentry's, invisible to the host's process table: what an
execution left running is found with ``runsc ps`` and killed with ``runsc kill --pid``.
Every instance is in the host-wide registry (``registry``): the sandbox outlives
``runsc run``, so if the worker dies, its guardian kills the instance's cgroup."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tenantry.sandbox.backends import child
from tenantry.sandbox.backends.cgroups import PARENT, REQUIRED, ROOT, CgroupV1, remove_stale
from tenantry.sandbox.backends.child import (
    ChildInstance,
    guest_command,
    require_binary,
    stdio_channels,
)
from tenantry.sandbox.backends.orphans import process_dir, reap_dead, release_process_dir
from tenantry.sandbox.backends.registry import Backstop
from tenantry.sandbox.channel import AgentChannel
from tenantry.sandbox.egress.port import EgressPort
from tenantry.sandbox.types import Limits, SandboxUnavailable

logger = logging.getLogger(__name__)

SANDBOX_UID = 1000
#: gVisor's sentry and gofer live inside the memory limit with the guest's processes: at
#: 256 MiB a trivial Python was killed (measured), so no sandbox gets less than this.
MIN_MEMORY_MIB = 512
#: The sentry's and gofer's own threads count against the host pids cgroup (measured ~40
#: at idle under ptrace), so the host cap is the guest's cap plus this headroom; the
#: guest's own process cap is the agent's RLIMIT_NPROC (--nproc).
PIDS_HEADROOM = 256
NOFILE = 1024
READY_TIMEOUT_S = 30.0
#: Mounts cached in the sentry ("exclusive"): nothing but the sandbox changes /usr or /work
#: while it runs, and uncached ("shared") walks are ~30 s for `find /` under ptrace.
RUNSC_FLAGS = ("--platform=ptrace", "--network=none", "--file-access-mounts=exclusive")
#: Rounds of ps-and-kill after an execution before the sandbox is given up as lost (a
#: process that forks faster than runsc kills would otherwise keep it busy forever).
LEFTOVER_ROUNDS = 20


def _bind(source: Path | str, destination: str, *, writable: bool = False) -> dict[str, Any]:
    return {"destination": destination, "type": "bind", "source": str(source),
            "options": ["rbind", "rw" if writable else "ro", "nosuid", "nodev"]}


class GvisorInstance(ChildInstance):
    backend = "gvisor"

    def __init__(self, instance_id: str, directory: Path,
                 process: asyncio.subprocess.Process, owner: GvisorBackend,
                 channel: AgentChannel, egress: EgressPort) -> None:
        # process is `runsc run` (attached); runsc creates the cgroups from the spec's
        # cgroupsPath in every hierarchy but memory and cpuacct, which launch made first
        # (``CgroupV1.metered``: they outlive a lost sandbox, for its usage): a view of all.
        cgroup = CgroupV1(instance_id, {c: ROOT / c / PARENT / instance_id
                                        for c in (*REQUIRED, "cpuacct")})
        super().__init__(instance_id, directory, process, cgroup, channel, egress,
                         owner.forget)
        self._owner = owner
        self._paused = False
        self._state_lock = asyncio.Lock()

    async def pause(self) -> None:
        # Idempotent both ways: runsc refuses to pause a paused or resume a running one.
        async with self._state_lock:
            if not self._paused:
                await self._owner.runsc("pause", self.id)
                self._paused = True

    async def resume(self) -> None:
        async with self._state_lock:
            if self._paused:
                await self._owner.runsc("resume", self.id)
                self._paused = False

    async def apply_limits(self, limits: Limits) -> None:
        # runsc's sentry keeps its own view of the CPU count; the host quota is what binds.
        self.cgroup.set_cpus(limits.cpus)

    async def _guest_pids(self) -> set[int]:
        # This runsc's JSON is a bare list of pids.
        listed = json.loads(await self._owner.runsc("ps", "--format", "json", self.id) or "[]")
        return {int(p["PID"] if isinstance(p, dict) else p) for p in listed or ()}

    async def _take_baseline(self) -> None:
        self.baseline = frozenset(await self._guest_pids())

    async def _end_leftovers(self) -> None:
        for _ in range(LEFTOVER_ROUNDS):
            extra = await self._guest_pids() - self.baseline
            if not extra:
                return
            for pid in sorted(extra):
                # Gone meanwhile (it exited, or its parent's kill took it): not an error.
                with contextlib.suppress(SandboxUnavailable):
                    await self._owner.runsc("kill", "--pid", str(pid), self.id, "KILL")
        raise SandboxUnavailable(f"processes kept appearing after {LEFTOVER_ROUNDS} rounds")

    async def _stop(self) -> None:
        # SIGKILL the container first: `delete --force` alone waits for a stop that never
        # comes and gives up after 5 s ("context deadline exceeded"); after the kill it
        # takes ~30 ms. delete removes runsc's state and its cgroups. A paused container
        # (a kept activity sandbox) ignores the kill the same way — measured: 5.2 s to
        # destroy paused, 0.09 s running — so it is resumed first.
        if self._paused:
            with contextlib.suppress(SandboxUnavailable):
                await self._owner.runsc("resume", self.id)
            self._paused = False
        with contextlib.suppress(SandboxUnavailable):
            await self._owner.runsc("kill", self.id, "KILL")
        with contextlib.suppress(SandboxUnavailable):
            await self._owner.runsc("delete", "--force", self.id)
        # runsc also made a freezer cgroup (pause) that delete leaves behind: look again
        # at what exists, so the destroy that follows removes every one.
        self.cgroup = CgroupV1.existing(self.id)


class GvisorBackend:
    name = "gvisor"

    def __init__(self, state_dir: Path, agent_path: Path, *, relay_path: Path = child.RELAY_PATH,
                 ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        self.runsc_path = require_binary("runsc")
        if not CgroupV1.available():
            raise SandboxUnavailable("the gvisor backend needs cgroup v1 memory, cpu and pids "
                                     "controllers under /sys/fs/cgroup (not found)")
        self.state_dir = state_dir
        self.ready_timeout_s = ready_timeout_s
        state_dir.mkdir(parents=True, exist_ok=True)
        state_dir.chmod(0o700)
        # runsc's sandboxes outlive a worker killed -9 (they are not its children for
        # long): each worker process keeps its own runsc root and instance folders, and the
        # next backend to start on this host reaps those of processes that are gone.
        _reap_orphans(self.runsc_path, state_dir)
        self.backstop = Backstop(self.name)
        remove_stale("gv-")  # empty cgroups older than a minute: their sandbox is gone
        self.process_dir = process_dir(state_dir)
        self.runsc_root = self.process_dir / "runsc-root"
        self.runsc_root.mkdir(mode=0o700, exist_ok=True)
        self.agent_path = state_dir / "agent.py"
        shutil.copyfile(agent_path, self.agent_path)
        self.agent_path.chmod(0o644)
        self.relay_path = state_dir / "relay.py"
        shutil.copyfile(relay_path, self.relay_path)
        self.relay_path.chmod(0o644)
        self.browser_path = state_dir / "browser.py"
        shutil.copyfile(child.BROWSER_PATH, self.browser_path)
        self.browser_path.chmod(0o644)
        self.files_path = state_dir / "files.py"
        shutil.copyfile(child.FILES_PATH, self.files_path)
        self.files_path.chmod(0o644)
        self.rootfs = self._build_rootfs()
        self._instances: dict[str, GvisorInstance] = {}

    def _build_rootfs(self) -> Path:
        """Mount points only; everything real is mounted over them read-only. gVisor cannot
        create a mount point on a read-only root, so each one exists here."""
        rootfs = self.state_dir / "rootfs"
        for name in ("usr", "proc", "dev", "tmp", "work", "etc"):
            (rootfs / name).mkdir(parents=True, exist_ok=True)
        for name in ("agent.py", "relay.py", "browser.py", "files.py"):
            (rootfs / name).touch()
        for name in ("passwd", "group"):
            (rootfs / "etc" / name).touch()
        for name in child.ETC_FILES:
            host = Path("/etc") / name
            if host.is_dir():
                (rootfs / "etc" / name).mkdir(exist_ok=True)
            elif host.exists():
                (rootfs / "etc" / name).touch()
        for name in child.ROOT_LINKS:
            host, link = Path("/") / name, rootfs / name
            if host.is_symlink() and not link.is_symlink():
                link.symlink_to(host.readlink())
            elif host.is_dir() and not host.is_symlink():
                link.mkdir(exist_ok=True)
        rootfs.chmod(0o755)
        return rootfs

    def _spec(self, directory: Path, instance_id: str, limits: Limits) -> dict[str, Any]:
        memory = _memory_bytes(limits)
        fsize = limits.disk_mib * 1024 * 1024
        mounts: list[dict[str, Any]] = [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "nodev"]},
            # Capped in all (RLIMIT_FSIZE caps one file), in the sentry's memory cgroup.
            {"destination": "/work", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "nodev", f"size={fsize}", "mode=0700",
                         f"uid={SANDBOX_UID}", f"gid={SANDBOX_UID}"]},
            _bind("/usr", "/usr"),
            _bind(self.agent_path, "/agent.py"),
            _bind(self.relay_path, "/relay.py"),
            _bind(self.browser_path, "/browser.py"),
            _bind(self.files_path, "/files.py"),
            _bind(directory / "etc" / "passwd", "/etc/passwd"),
            _bind(directory / "etc" / "group", "/etc/group"),
        ]
        for name in child.ROOT_LINKS:
            host = Path("/") / name
            if host.is_dir() and not host.is_symlink():
                mounts.append(_bind(host, f"/{name}"))
        mounts += [_bind(Path("/etc") / n, f"/etc/{n}") for n in child.ETC_FILES
                   if (Path("/etc") / n).exists()]
        return {
            "ociVersion": "1.0.2",
            "hostname": "sandbox",
            "root": {"path": str(self.rootfs), "readonly": True},
            "process": {
                "terminal": False,
                "user": {"uid": SANDBOX_UID, "gid": SANDBOX_UID},
                "args": guest_command(limits.pids),
                "env": ["PATH=/usr/bin:/bin", "HOME=/work", "LANG=C.UTF-8"],
                "cwd": "/work",
                "capabilities": {k: [] for k in ("bounding", "effective", "permitted",
                                                 "inheritable", "ambient")},
                "noNewPrivileges": True,
                "rlimits": [{"type": "RLIMIT_NOFILE", "hard": NOFILE, "soft": NOFILE},
                            {"type": "RLIMIT_CORE", "hard": 0, "soft": 0},
                            # Not enforced by this runsc build (measured): a fork
                            # bomb exhausts the host cgroup and loses the sandbox.
                            {"type": "RLIMIT_NPROC", "hard": limits.pids,
                             "soft": limits.pids},
                            {"type": "RLIMIT_FSIZE", "hard": fsize, "soft": fsize}],
            },
            "mounts": mounts,
            "linux": {
                "cgroupsPath": f"/{PARENT}/{instance_id}",
                "resources": {
                    "memory": {"limit": memory, "swap": memory},
                    "pids": {"limit": limits.pids + PIDS_HEADROOM},
                    "cpu": {"period": 100_000, "quota": max(1000, int(limits.cpus * 100_000))},
                },
                "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
            },
        }

    def _prepare_dir(self, instance_id: str, limits: Limits) -> Path:
        directory = self.process_dir / instance_id
        directory.mkdir(mode=0o700)
        etc = directory / "etc"
        etc.mkdir()
        (etc / "passwd").write_text(f"root:x:0:0:root:/:/bin/sh\nsandbox:x:{SANDBOX_UID}:"
                                    f"{SANDBOX_UID}:sandbox:/work:/bin/sh\n")
        (etc / "group").write_text(f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\n")
        bundle = directory / "bundle"
        bundle.mkdir()
        spec = self._spec(directory, instance_id, limits)
        (bundle / "config.json").write_text(json.dumps(spec, indent=1))
        return directory

    async def runsc(self, *args: str) -> str:
        """Run a runsc management command; SandboxUnavailable with its output on failure."""
        process = await asyncio.create_subprocess_exec(
            self.runsc_path, *RUNSC_FLAGS, "--root", str(self.runsc_root), *args,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env={"PATH": child.HOST_PATH}, cwd="/",
        )
        output, _ = await process.communicate()
        text = output.decode(errors="replace")
        if process.returncode != 0:
            raise SandboxUnavailable(f"runsc {args[0]} failed ({process.returncode}): "
                                     f"{text.strip()[-500:]}")
        return text

    async def launch(self, limits: Limits) -> GvisorInstance:
        instance_id = f"gv-{secrets.token_hex(6)}"
        directory = self._prepare_dir(instance_id, limits)
        channel, egress, guest_agent, guest_egress = await stdio_channels()
        try:
            # Before it exists: its processes join the cgroup runsc makes for it (named as
            # it is), and `runsc run` ends with them.
            self.backstop.register(instance_id, cgroups=(instance_id,))
            # Ours, not runsc's (it uses them as they are, limit included): they outlive
            # a sandbox that dies, so what it used can still be read (ADR 0016).
            CgroupV1.metered(instance_id, memory_bytes=_memory_bytes(limits))
            log_file = await asyncio.to_thread(open, directory / "runsc.log", "wb")
            with log_file:
                process = await asyncio.create_subprocess_exec(
                    self.runsc_path, *RUNSC_FLAGS, "--root", str(self.runsc_root),
                    "run", "--bundle", str(directory / "bundle"), instance_id,
                    stdin=guest_agent.fileno(), stdout=guest_egress.fileno(),
                    stderr=log_file, env={"PATH": child.HOST_PATH}, cwd="/",
                )
        except BaseException:
            with contextlib.suppress(OSError):
                CgroupV1.existing(instance_id).destroy()
            self.backstop.forget(instance_id)
            channel.close()
            await egress.close()
            await asyncio.to_thread(shutil.rmtree, directory, True)
            raise
        finally:
            guest_agent.close()  # runsc has its copies (or never will)
            guest_egress.close()
        instance = GvisorInstance(instance_id, directory, process, self, channel, egress)
        self._instances[instance_id] = instance
        await instance.ready(self.ready_timeout_s, directory / "runsc.log", "gVisor")
        return instance

    def forget(self, instance_id: str) -> None:
        self._instances.pop(instance_id, None)
        self.backstop.forget(instance_id)

    async def close(self) -> None:
        for instance in list(self._instances.values()):
            await instance.destroy()
        self.backstop.close()
        # Shared with the other backends of this process: the last to close removes it.
        release_process_dir(self.process_dir)


def _memory_bytes(limits: Limits) -> int:
    return max(limits.memory_mib, MIN_MEMORY_MIB) * 1024 * 1024


def _reap_orphans(runsc: str, state_dir: Path) -> None:
    """Delete the sandboxes and folders of worker processes that no longer exist."""

    def delete_containers(home: Path) -> None:
        base = [runsc, *RUNSC_FLAGS, "--root", str(home / "runsc-root")]
        listed = subprocess.run([*base, "list", "--quiet"], capture_output=True, text=True,
                                check=False, env={"PATH": child.HOST_PATH})
        for container in listed.stdout.split():
            for command in (["kill", container, "KILL"], ["delete", "--force", container]):
                subprocess.run([*base, *command], capture_output=True, check=False,
                               env={"PATH": child.HOST_PATH})

    reap_dead(state_dir, delete_containers)


