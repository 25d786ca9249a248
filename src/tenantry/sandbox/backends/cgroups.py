"""Per-sandbox cgroup v1 limits (memory, cpu, pids; freezer where mounted).

This host family is hybrid: memory, cpu and pids are v1 controllers under
``/sys/fs/cgroup/<controller>/`` (notes/sandbox-facts.md). Every sandbox gets
``/sys/fs/cgroup/<controller>/tenantry/<name>``; the sandbox's first process joins it before
it execs (``wrap``), so nothing runs unconfined between spawn and limit. A v2-only host is
refused with a clear error rather than silently running without limits."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shlex
import signal
import time
from collections.abc import Callable
from pathlib import Path

from tenantry.sandbox.types import SandboxUnavailable

ROOT = Path("/sys/fs/cgroup")
PARENT = "tenantry"
#: The controllers a sandbox cannot run without.
REQUIRED = ("memory", "cpu", "pids")
#: Controllers used when present: pause/resume of a pooled sandbox; its CPU time (cpuacct
#: is its own hierarchy on this host family, not joined with cpu).
OPTIONAL = ("freezer", "cpuacct")
CFS_PERIOD_US = 100_000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def _is_v1(directory: Path) -> bool:
    # A v1 hierarchy has a ``tasks`` file; a v2 one never does.
    return (directory / "tasks").exists() and (directory / "cgroup.procs").exists()


def _hierarchies(root: Path) -> list[str]:
    """Every v1 hierarchy mounted under ``root``, once each (``cpu`` and ``cpuacct`` are
    links to ``cpu,cpuacct``): runsc places a sandbox in all of them, not only ours."""
    seen: dict[Path, str] = {}
    for entry in sorted(root.iterdir()) if root.is_dir() else ():
        with contextlib.suppress(OSError):
            if _is_v1(entry):
                seen.setdefault(entry.resolve(), entry.name)
    return sorted(seen.values())


def _write(path: Path, value: str) -> None:
    path.write_text(value)


class CgroupV1:
    """One sandbox's cgroups. Built by ``create``; removed by ``destroy`` (idempotent)."""

    def __init__(self, name: str, dirs: dict[str, Path]) -> None:
        self.name = name
        self.dirs = dirs
        self.destroyed = False

    @staticmethod
    def available(root: Path = ROOT) -> bool:
        return all(_is_v1(root / controller) for controller in REQUIRED)

    @classmethod
    def existing(cls, name: str, root: Path = ROOT) -> CgroupV1:
        """A view of a sandbox's cgroups that exist already (to destroy what a dead
        worker left: thawed, killed, removed)."""
        if not _NAME.match(name):
            raise ValueError(f"bad cgroup name {name!r}")
        return cls(name, {c: root / c / PARENT / name for c in _hierarchies(root)
                          if (root / c / PARENT / name).is_dir()})

    @classmethod
    def create(
        cls,
        name: str,
        *,
        memory_bytes: int | None,
        cpus: float | None,
        pids: int | None,
        root: Path = ROOT,
    ) -> CgroupV1:
        if not _NAME.match(name):
            raise ValueError(f"bad cgroup name {name!r}")
        missing = [c for c in REQUIRED if not _is_v1(root / c)]
        if missing:
            raise SandboxUnavailable(
                f"cgroup v1 controller(s) {', '.join(missing)} not mounted under {root}; "
                "this backend needs the v1 memory, cpu and pids hierarchies (cgroup v2 is "
                "not supported yet)"
            )

        def limit(group: CgroupV1) -> None:
            group._set_memory(memory_bytes)
            group.set_cpus(cpus)
            group.set_pids(pids)

        controllers = [c for c in (*REQUIRED, *OPTIONAL) if c in REQUIRED or _is_v1(root / c)]
        return cls._made(name, controllers, root, limit)

    @classmethod
    def metered(cls, name: str, *, memory_bytes: int, root: Path = ROOT) -> CgroupV1:
        """The memory and cpuacct cgroups of a sandbox whose runtime makes the others
        (runsc), made before it starts so that they are ours: runsc uses a pre-created
        cgroup as it is and removes only those it made, so what the sandbox used can be
        read after it died (a lost gVisor sandbox's cgroups are gone before its channel
        says so). runsc leaves a pre-created cgroup's settings alone: the memory limit is
        set here. Removed by ``destroy`` with the rest (``existing``)."""
        if not _NAME.match(name):
            raise ValueError(f"bad cgroup name {name!r}")
        controllers = ["memory", *(["cpuacct"] if _is_v1(root / "cpuacct") else [])]
        return cls._made(name, controllers, root,
                         lambda group: group._set_memory(memory_bytes))

    @classmethod
    def _made(cls, name: str, controllers: list[str], root: Path,
              limit: Callable[[CgroupV1], None]) -> CgroupV1:
        """The sandbox's directory under each controller, made, then ``limit``ed; a limit
        that cannot be set removes them all again (no half-limited group is left)."""
        dirs: dict[str, Path] = {}
        for controller in controllers:
            directory = root / controller / PARENT / name
            directory.mkdir(parents=True, exist_ok=True)
            dirs[controller] = directory
        group = cls(name, dirs)
        try:
            limit(group)
        except BaseException:
            group.destroy()
            raise
        return group

    def _set_memory(self, memory_bytes: int | None) -> None:
        memory = self.dirs["memory"]
        value = "-1" if memory_bytes is None else str(int(memory_bytes))
        memsw = memory / "memory.memsw.limit_in_bytes"
        # memsw must stay >= limit_in_bytes; set both so swap cannot dodge the cap. When
        # lowering from unlimited, the plain limit goes first.
        _write(memory / "memory.limit_in_bytes", value)
        if memsw.exists():
            _write(memsw, value)

    def set_cpus(self, cpus: float | None) -> None:
        cpu = self.dirs["cpu"]
        _write(cpu / "cpu.cfs_period_us", str(CFS_PERIOD_US))
        quota = -1 if cpus is None else max(1000, int(cpus * CFS_PERIOD_US))
        _write(cpu / "cpu.cfs_quota_us", str(quota))

    def set_pids(self, pids: int | None) -> None:
        _write(self.dirs["pids"] / "pids.max", "max" if pids is None else str(int(pids)))

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` preceded by a shell that moves itself into every cgroup, then execs it:
        the limits hold from the first instruction. Run as root (cgroup.procs is root's)."""
        joins = " && ".join(
            f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in self.dirs.values()
        )
        return ["/bin/sh", "-c", f'{joins} && exec "$@"', "sh", *argv]

    def add(self, pid: int) -> None:
        for directory in self.dirs.values():
            _write(directory / "cgroup.procs", str(pid))

    def pids(self) -> list[int]:
        try:
            text = (self.dirs["memory"] / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(line) for line in text.split()]

    def oom_killed(self) -> bool:
        """Whether the kernel's OOM killer has killed anything in this cgroup."""
        try:
            text = (self.dirs["memory"] / "memory.oom_control").read_text()
        except OSError:
            return False
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value) > 0
        # Older kernels have no oom_kill counter: hitting the limit is the best signal.
        with contextlib.suppress(OSError, ValueError):
            return int((self.dirs["memory"] / "memory.failcnt").read_text()) > 0
        return False

    # Freezer (v1): pause a pooled sandbox without killing it.
    @property
    def can_freeze(self) -> bool:
        return "freezer" in self.dirs

    def freeze(self) -> None:
        if self.can_freeze:
            _write(self.dirs["freezer"] / "freezer.state", "FROZEN")

    def thaw(self) -> None:
        if self.can_freeze:
            _write(self.dirs["freezer"] / "freezer.state", "THAWED")

    def freezer_state(self) -> str | None:
        if not self.can_freeze:
            return None
        try:
            return (self.dirs["freezer"] / "freezer.state").read_text().strip()
        except OSError:
            return None

    def kill_all_but(self, keep: frozenset[int], wait_s: float = 5.0) -> int:
        """SIGKILL every member not in ``keep`` (frozen meanwhile, where a freezer is
        mounted, so nothing forks past the kill) and wait until they have left. Returns
        how many were killed; OSError if some would not leave."""
        extra = self._all_members() - keep
        if not extra:
            return 0  # the common case: the agent ended the execution's session itself
        killed: set[int] = set()
        deadline = time.monotonic() + wait_s
        while extra:
            self.freeze()
            while self.freezer_state() == "FREEZING" and time.monotonic() < deadline:
                time.sleep(0.002)
            for pid in self._all_members() - keep:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            self.thaw()  # SIGKILL acts on a frozen task once thawed
            if time.monotonic() > deadline:
                raise OSError(errno.EBUSY, f"cgroup {self.name}: processes would not end")
            time.sleep(0.002)
            extra = self._all_members() - keep
        return len(killed)

    def destroy(self, wait_s: float = 5.0) -> None:
        """SIGKILL whatever is left, then remove the directories. Idempotent. Blocks at most
        ``wait_s`` for killed processes to leave (normally they already have)."""
        if self.destroyed:
            return
        # A frozen task does not act on SIGKILL until thawed.
        with contextlib.suppress(OSError):
            self.thaw()
        deadline = time.monotonic() + wait_s
        while True:
            members = self._all_members()
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not members:
                break
            if time.monotonic() > deadline:
                raise OSError(errno.EBUSY, f"cgroup {self.name} still has processes {members}")
            time.sleep(0.01)
        for directory in self.dirs.values():
            self._rmdir(directory, deadline)
        self.destroyed = True

    def _all_members(self) -> set[int]:
        members: set[int] = set()
        for directory in self.dirs.values():
            with contextlib.suppress(OSError):
                members.update(int(p) for p in (directory / "cgroup.procs").read_text().split())
        return members

    @staticmethod
    def _rmdir(directory: Path, deadline: float) -> None:
        while True:
            try:
                directory.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                # EBUSY while an exiting task is still being uncharged: brief, retry.
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def pss_kib(self) -> int | None:
        """Proportional set size of the cgroup's processes (None when none can be read)."""
        return pss_kib_of(self.pids())

    # Accounting (accounting.Meter): CPU time and the memory peak of every member, past
    # and present — the kernel keeps them for the cgroup, whatever exited or was killed.
    def cpu_ns(self) -> int | None:
        directory = self.dirs.get("cpuacct")
        if directory is None:
            return None
        try:
            return int((directory / "cpuacct.usage").read_text())
        except (OSError, ValueError):
            return None

    def peak_memory_bytes(self) -> int | None:
        try:
            return int((self.dirs["memory"] / "memory.max_usage_in_bytes").read_text())
        except (KeyError, OSError, ValueError):
            return None

    def reset_peak_memory(self) -> bool:
        """The peak restarts from what is charged now (v1: writing 0 resets it)."""
        try:
            _write(self.dirs["memory"] / "memory.max_usage_in_bytes", "0")
        except (KeyError, OSError):
            return False
        return True


#: A sandbox's cgroup is empty only between ``create`` and its first process joining
#: (milliseconds): one empty for longer belongs to a sandbox whose worker died.
STALE_AFTER_S = 60.0


def remove_stale(prefix: str, root: Path = ROOT) -> int:
    """Remove empty sandbox cgroups named ``prefix``* left by workers that died (their
    processes died with them; the directories did not). Returns how many went."""
    removed = 0
    now = time.time()
    for controller in _hierarchies(root):
        parent = root / controller / PARENT
        for directory in parent.glob(f"{prefix}*") if parent.is_dir() else ():
            try:
                if now - directory.stat().st_mtime < STALE_AFTER_S:
                    continue
                if (directory / "cgroup.procs").read_text().strip():
                    continue  # someone is in it: not ours to judge
                directory.rmdir()
                removed += 1
            except OSError:
                continue  # raced with its owner, or gone already
    return removed


def pss_kib_of(pids: list[int]) -> int | None:
    total: int | None = None
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue  # exited meanwhile, or a kernel thread
        for line in text.splitlines():
            if line.startswith("Pss:"):
                total = (total or 0) + int(line.split()[1])
                break
    return total
