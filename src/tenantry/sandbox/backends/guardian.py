"""The backstop that kills a worker's sandboxes when the worker is gone, however it went
(SIGKILL, OOM): a small process per backend, started by the worker in a session of its
own, that waits on the worker's pidfd and then kills every sandbox the worker registered
(``registry.Backstop``) — each sandbox's cgroup (thawed first: a frozen task ignores
SIGKILL) and its host process. Keyed by the host-wide registry, never by the worker's
data dir, so it works when that folder is gone too. Standard library only: it runs by
path (``python3 -I -S guardian.py``), importing nothing of the worker's.

``reap`` is also what any later backend start runs over records of dead workers (the
guardian itself may have been killed with its worker)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "tenantry"
SUFFIX = ".json"
KILL_WAIT_S = 10.0


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot): with the pid, who it is."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])


def alive(pid: int, started: int) -> bool:
    return start_time(pid) == started


def _cgroup_dirs(name: str) -> list[Path]:
    if not name or "/" in name or name.startswith("."):
        return []
    found = []
    for hierarchy in sorted(CGROUP_ROOT.iterdir()) if CGROUP_ROOT.is_dir() else ():
        directory = hierarchy / CGROUP_PARENT / name
        if (directory / "cgroup.procs").is_file():
            found.append(directory)
    return found


def kill_cgroup(name: str) -> None:
    """Thaw, SIGKILL every member until none is left, remove the directories."""
    dirs = _cgroup_dirs(name)
    for directory in dirs:
        with contextlib.suppress(OSError):
            if (directory / "freezer.state").exists():
                (directory / "freezer.state").write_text("THAWED")
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline:
        members: set[int] = set()
        for directory in dirs:
            with contextlib.suppress(OSError):
                members.update(int(p) for p in (directory / "cgroup.procs").read_text().split())
        if not members:
            break
        for pid in members:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    for directory in dirs:
        with contextlib.suppress(OSError):
            directory.rmdir()


def kill_record(record: dict[str, Any]) -> None:
    for name in record.get("cgroups") or ():
        kill_cgroup(str(name))
    for entry in record.get("processes") or ():
        pid, started = int(entry[0]), int(entry[1])
        if alive(pid, started):  # the same process, not one that reused its pid
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def reap(registry: Path, worker: tuple[int, int] | None = None) -> int:
    """Kill the sandboxes of ``worker`` (pid, start time), or of every worker that is gone
    when None; remove their records. Returns how many."""
    reaped = 0
    for path in sorted(registry.glob(f"*{SUFFIX}")) if registry.is_dir() else ():
        record = read_record(path)
        if record is None:
            # Half-written by a worker killed mid-write (renamed into place, so rare):
            # nothing to kill by; gone once old.
            with contextlib.suppress(OSError):
                if time.time() - path.stat().st_mtime > 60:
                    path.unlink()
            continue
        try:
            owner = (int(record["worker_pid"]), int(record["worker_start"]))
        except (KeyError, TypeError, ValueError):
            continue
        if worker is not None and owner != worker:
            continue
        if worker is None and alive(*owner):
            continue
        kill_record(record)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        reaped += 1
    return reaped


def watch(registry: Path, worker: tuple[int, int]) -> None:
    """Block until the worker is gone, then reap what it registered."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        pidfd = os.pidfd_open(worker[0])
    except ProcessLookupError:
        pidfd = None
    if pidfd is not None and alive(*worker):
        select.select([pidfd], [], [])  # readable once the process has exited
    reap(registry, worker)


if __name__ == "__main__":
    watch(Path(sys.argv[1]), (int(sys.argv[2]), int(sys.argv[3])))
