"""The ``bwrap`` backend: bubblewrap namespaces, a seccomp deny-list, rlimits
and cgroup v1 limits around the guest agent. It shares the host kernel, so it is for local
development only and is never presented as equal to ``microvm`` or ``gvisor``.

Process chain (each step execs the next, so the agent's pid tree stays one line):
``sh`` (joins the cgroups, as root) → ``prlimit`` (rlimits) → ``setpriv`` (drops to an
unprivileged host uid, one per instance, leased host-wide: ``uids``) → ``bwrap``
(user/pid/net/... namespaces, uid 1000 inside, read-only /usr, a size-capped tmpfs /work,
seccomp) → ``sh``, which starts the egress relay beside the agent (``guest_command``) and
runs ``python3 -I /agent.py``. The agent speaks on a socket that is the process's stdin;
its stdout is the egress channel, served once the sandbox is bound. Every instance is in
the host-wide registry (``registry``): killed by its worker's guardian if the worker dies
without destroying it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

from tenantry.sandbox.backends.cgroups import CgroupV1, remove_stale
from tenantry.sandbox.backends.child import (
    BROWSER_PATH,
    ETC_FILES,
    FILES_PATH,
    HOST_PATH,
    RELAY_PATH,
    ROOT_LINKS,
    ChildInstance,
    guest_command,
    require_binary,
    stdio_channels,
)
from tenantry.sandbox.backends.orphans import process_dir, reap_dead, release_process_dir
from tenantry.sandbox.backends.registry import Backstop
from tenantry.sandbox.backends.seccomp import deny_list_program
from tenantry.sandbox.backends.uids import UidAllocator, UidLease
from tenantry.sandbox.channel import AgentChannel
from tenantry.sandbox.egress.port import EgressPort
from tenantry.sandbox.types import Limits, SandboxUnavailable

log = logging.getLogger(__name__)

SANDBOX_UID = 1000
NOFILE = 1024
READY_TIMEOUT_S = 30.0
#: Names for the sandbox's own users, not the host's.
PASSWD = (f"root:x:0:0:root:/:/bin/sh\n"
          f"sandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:/work:/bin/sh\n")
GROUP = f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\n"


def root_layout() -> list[str]:
    """bwrap arguments recreating the host's top-level /bin, /lib... symlinks (or ro-binds
    on a host without merged /usr)."""
    args: list[str] = []
    for name in ROOT_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), f"/{name}"]
        elif path.is_dir():
            args += ["--ro-bind", str(path), f"/{name}"]
    for name in ETC_FILES:
        if (Path("/etc") / name).exists():
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return args


class BwrapInstance(ChildInstance):
    backend = "bwrap"

    def __init__(self, instance_id: str, directory: Path, process: asyncio.subprocess.Process,
                 cgroup: CgroupV1, host_uid: int, owner: BwrapBackend, channel: AgentChannel,
                 egress: EgressPort) -> None:
        # process is the outer bwrap: the sandbox dies with it (--die-with-parent inside).
        super().__init__(instance_id, directory, process, cgroup, channel, egress,
                         owner._forget)
        self.host_uid = host_uid

    async def _end_leftovers(self) -> None:
        # Freezing first: a process that forks as fast as it is killed cannot outrun it.
        await asyncio.to_thread(self.cgroup.kill_all_but, self.baseline)

    async def pause(self) -> None:
        if not self.cgroup.can_freeze:
            return  # no freezer here: a paused instance just idles
        self.cgroup.freeze()
        # FREEZING until every task has stopped; the kernel offers no event to await.
        while self.cgroup.freezer_state() == "FREEZING":  # noqa: ASYNC110
            await asyncio.sleep(0.002)

    async def resume(self) -> None:
        self.cgroup.thaw()

    async def apply_limits(self, limits: Limits) -> None:
        self.cgroup.set_cpus(limits.cpus)
        self.cgroup.set_pids(limits.pids)


class BwrapBackend:
    name = "bwrap"

    def __init__(self, state_dir: Path, agent_path: Path, *, relay_path: Path = RELAY_PATH,
                 ready_timeout_s: float = READY_TIMEOUT_S,
                 uids: UidAllocator | None = None) -> None:
        for binary in ("bwrap", "prlimit", "setpriv"):
            require_binary(binary)
        if not CgroupV1.available():
            raise SandboxUnavailable("the bwrap backend needs cgroup v1 memory, cpu and pids "
                                     "controllers under /sys/fs/cgroup (not found)")
        log.warning("sandbox backend 'bwrap' is for development only: it shares the host "
                    "kernel and is not a tenant boundary")
        self.state_dir = state_dir
        self.ready_timeout_s = ready_timeout_s
        state_dir.mkdir(parents=True, exist_ok=True)
        state_dir.chmod(0o700)
        # Per worker process, so what a killed worker left is known to be orphaned (its
        # sandboxes died with it: --die-with-parent) and the next start removes it.
        shared = _instances_dir(state_dir)
        reap_dead(shared, _destroy_cgroups_of)
        self.process_dir = process_dir(shared, mode=0o711)  # bwrap's uid must traverse
        remove_stale("bw-")
        self.uids = uids or UidAllocator()
        self.backstop = Backstop(self.name)
        # Read once: edits to the source tree cannot change sandboxes started later.
        self._agent = agent_path.read_bytes()
        self._relay = relay_path.read_bytes()
        self._browser = BROWSER_PATH.read_bytes()
        self._files = FILES_PATH.read_bytes()
        self._seccomp = deny_list_program()
        self._instances: dict[str, BwrapInstance] = {}
        self._leases: dict[str, UidLease] = {}

    def _forget(self, instance_id: str) -> None:
        self._instances.pop(instance_id, None)
        self.backstop.forget(instance_id)
        lease = self._leases.pop(instance_id, None)
        if lease is not None:
            lease.release()  # after the cgroup is gone: nothing runs as that uid any more

    def _prepare_dir(self, instance_id: str, uid: int) -> Path:
        directory = self.process_dir / instance_id
        directory.mkdir(mode=0o700)
        os.chown(directory, uid, uid)  # the instance's own uid, and no other, may enter
        return directory

    def _argv(self, directory: Path, uid: int, limits: Limits,
              fds: dict[str, int]) -> list[str]:
        fsize = limits.disk_mib * 1024 * 1024
        bwrap = [
            "bwrap", "--unshare-all", "--unshare-user", "--disable-userns",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            "--hostname", "sandbox", "--ro-bind", "/usr", "/usr", *root_layout(),
            "--ro-bind-data", str(fds["passwd"]), "/etc/passwd",
            "--ro-bind-data", str(fds["group"]), "/etc/group",
            "--ro-bind-data", str(fds["agent"]), "/agent.py",
            "--ro-bind-data", str(fds["relay"]), "/relay.py",
            "--ro-bind-data", str(fds["browser"]), "/browser.py",
            "--ro-bind-data", str(fds["files"]), "/files.py",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
            # /work is a tmpfs capped at disk_mib in all (RLIMIT_FSIZE caps one file):
            # its pages are charged to the sandbox's memory cgroup, never the host's disk.
            "--size", str(fsize), "--perms", "0700", "--tmpfs", "/work", "--chdir", "/work",
            "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/work",
            "--setenv", "LANG", "C.UTF-8",
            "--seccomp", str(fds["seccomp"]),
            "--", *guest_command(limits.pids),
        ]
        setpriv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
        prlimit = ["prlimit", f"--nofile={NOFILE}:{NOFILE}", "--core=0:0",
                   f"--fsize={fsize}:{fsize}", "--"]
        return [*prlimit, *setpriv, *bwrap]

    def _open_fds(self) -> dict[str, int]:
        """What bwrap reads through descriptors rather than paths: it runs as an
        unprivileged uid and needs to reach nothing of ours but the work directory."""
        fds: dict[str, int] = {}
        try:
            for name, data in (("seccomp", self._seccomp), ("agent", self._agent),
                               ("relay", self._relay), ("browser", self._browser),
                               ("files", self._files),
                               ("passwd", PASSWD.encode()),
                               ("group", GROUP.encode())):
                fds[name] = _memfd(name, data)
        except BaseException:
            for fd in fds.values():
                os.close(fd)
            raise
        return fds

    async def launch(self, limits: Limits) -> BwrapInstance:
        lease = self.uids.lease()
        uid = lease.uid
        instance_id = f"bw-{os.urandom(6).hex()}"
        directory: Path | None = None
        cgroup: CgroupV1 | None = None
        process: asyncio.subprocess.Process | None = None
        channel: AgentChannel | None = None
        egress: EgressPort | None = None
        try:
            directory = self._prepare_dir(instance_id, uid)
            cgroup = CgroupV1.create(instance_id, memory_bytes=limits.memory_mib * 1024 * 1024,
                                     cpus=limits.cpus, pids=limits.pids)
            # Before its first process: every one of them joins the cgroup (``wrap``).
            self.backstop.register(instance_id, cgroups=(instance_id,))
            channel, egress, guest_agent, guest_egress = await stdio_channels()
            fds = self._open_fds()
            try:
                log_file = await asyncio.to_thread(open, directory / "bwrap.log", "wb")
                with log_file:
                    process = await asyncio.create_subprocess_exec(
                        *cgroup.wrap(self._argv(directory, uid, limits, fds)),
                        stdin=guest_agent.fileno(), stdout=guest_egress.fileno(), stderr=log_file,
                        pass_fds=tuple(fds.values()), cwd="/", env={"PATH": HOST_PATH},
                    )
            finally:
                for fd in fds.values():
                    os.close(fd)
                guest_agent.close()  # the sandbox has its copies (or never will)
                guest_egress.close()
            instance = BwrapInstance(instance_id, directory, process, cgroup, uid, self,
                                     channel, egress)
            self._instances[instance_id] = instance
            self._leases[instance_id] = lease
        except BaseException:
            if channel is not None:
                channel.close()
            if egress is not None:
                await egress.close()
            await _cleanup(directory, cgroup, process)
            self.backstop.forget(instance_id)
            lease.release()
            raise
        await instance.ready(self.ready_timeout_s, directory / "bwrap.log", "bwrap")
        return instance

    async def close(self) -> None:
        for instance in list(self._instances.values()):
            await instance.destroy()
        self.backstop.close()
        release_process_dir(self.process_dir)  # the last of this process's backends


async def _cleanup(directory: Path | None, cgroup: CgroupV1 | None,
                   process: asyncio.subprocess.Process | None) -> None:
    """Undo a launch that failed before its instance existed."""
    if cgroup is not None:
        await asyncio.to_thread(cgroup.destroy)
    if process is not None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
    if directory is not None:
        await asyncio.to_thread(shutil.rmtree, directory, True)


def _destroy_cgroups_of(home: Path) -> None:
    """A dead worker's sandboxes: a paused one is frozen, and a frozen process ignores the
    parent-death SIGKILL until thawed — so it outlives its worker until its cgroup is
    destroyed (thawed, killed, removed) here."""
    for instance in home.glob("bw-*"):
        with contextlib.suppress(OSError, ValueError):
            CgroupV1.existing(instance.name).destroy()


def _instances_dir(state_dir: Path) -> Path:
    """Where instance directories go. bwrap runs as an unprivileged uid and must reach its
    work directory by path (bind sources are resolved as that uid), so: under state_dir
    when every parent lets others through (o+x), else a root-owned directory in /tmp."""
    if all(p.stat().st_mode & 0o001 for p in state_dir.resolve().parents):
        state_dir.chmod(0o711)  # traversable, not listable
        return state_dir
    fallback = Path(tempfile.gettempdir()) / f"tenantry-bwrap-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        fallback.mkdir(mode=0o711)
    info = fallback.lstat()
    # /tmp is shared: refuse a directory (or symlink) someone else planted there.
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise SandboxUnavailable(f"{fallback} is not a private directory of this user; "
                                 "remove it or give the bwrap backend a state directory "
                                 "whose parents are o+x")
    log.info("bwrap state directory %s is not reachable by unprivileged users; instance "
             "directories go to %s", state_dir, fallback)
    return fallback


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(f"tenantry-{name}", 0)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


