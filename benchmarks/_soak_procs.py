"""What the soak benchmark reads about the platform's processes and logs (soak.py).

Every sample walks /proc once and sums, per group:

* ``platform``: the ``tenantry up`` process itself (API, worker loop, gateways);
* ``children``: every descendant of it (sandbox programs — QEMU, bwrap, runsc and what they
  start — and any short-lived helper such as ``pg_ctl``);
* ``postgres``: the embedded postmaster and all its descendants (backends come and go as
  pools open and close connections; a sample sums the ones alive). Empty with an external
  Postgres: a shared server's memory is not the platform's to account for;
* ``strays``: any other process whose command line names the platform's data directory
  (a sandbox program that lost its parent, for instance) — there should be none.

Per process: open file descriptors (entries of /proc/<pid>/fd), VmRSS (/proc/<pid>/status)
and PSS (/proc/<pid>/smaps_rollup). The resident memory the figures sum is **PSS**: VmRSS
counts a shared page once in every process that maps it, so a sum of VmRSS over Postgres
backends grows as each one touches more of the shared buffer pool (up to backends x
shared_buffers) and over microVM clones counts their template's pages once per clone; PSS
splits each shared page among its sharers, so the sum is the memory really resident. The
VmRSS sums are reported beside it (``vmrss_*``). A process that exits mid-read counts zero.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

GROUPS = ("platform", "children", "postgres", "strays")


@dataclass(frozen=True, slots=True)
class Usage:
    rss_kib: int = 0
    pss_kib: int = 0
    fds: int = 0
    processes: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.rss_kib + other.rss_kib, self.pss_kib + other.pss_kib,
                     self.fds + other.fds, self.processes + other.processes)


@dataclass(frozen=True, slots=True)
class Sample:
    at_s: float  # seconds since the load started
    groups: dict[str, Usage]
    programs: dict[str, int] = field(default_factory=dict)  # children by program name

    @property
    def total(self) -> Usage:
        found = Usage()
        for usage in self.groups.values():
            found = found + usage
        return found


def _stat(pid: int) -> tuple[int, str] | None:
    """(ppid, comm) of a live process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = text[text.index("(") + 1:text.rindex(")")]
    return int(text.rsplit(")", 1)[1].split()[1]), comm


def _process_table() -> dict[int, tuple[int, str]]:
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _stat(int(entry))
            if found is not None:
                table[int(entry)] = found
    return table


def _subtree(root: int, table: dict[int, tuple[int, str]]) -> set[int]:
    """``root`` and every process below it (empty if ``root`` is gone)."""
    if root not in table:
        return set()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return found


def _usage(pid: int) -> Usage:
    rss = pss = 0
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
                break
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss = int(line.split()[1])
                break
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return Usage()  # gone (or never readable): it holds nothing now
    return Usage(rss, pss, fds, 1)


def _names_dir(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def postmaster_pid(data_dir: Path) -> int | None:
    """The embedded Postgres's postmaster, from its pid file (None when not running)."""
    try:
        return int((data_dir / "postgres" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def sample(at_s: float, platform: int, data_dir: Path) -> Sample:
    table = _process_table()
    tree = _subtree(platform, table)
    postmaster = postmaster_pid(data_dir)
    postgres = _subtree(postmaster, table) if postmaster is not None else set()
    marker = str(data_dir).encode()
    me = os.getpid()
    known = tree | postgres
    strays = {pid for pid in table if pid not in known and pid != me
              and _names_dir(pid, marker)}
    members = {"platform": {platform} & tree, "children": tree - {platform},
               "postgres": postgres, "strays": strays}
    groups = {}
    for name, pids in members.items():
        total = Usage()
        for pid in pids:
            total = total + _usage(pid)
        groups[name] = total
    programs: dict[str, int] = {}
    for pid in members["children"] | strays:
        programs[table[pid][1]] = programs.get(table[pid][1], 0) + 1
    return Sample(at_s, groups, programs)


def slope_per_hour(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, in value units per hour."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return cov / var * 3600.0


def trend(samples: Sequence[Sample], group: str | None) -> dict[str, float]:
    """Slopes and end values of one group (None: all of them) over the given samples."""
    def pick(s: Sample) -> Usage:
        return s.total if group is None else s.groups[group]

    if not samples:
        return {}
    resident = [(s.at_s, pick(s).pss_kib / 1024) for s in samples]  # see the docstring
    vmrss = [(s.at_s, pick(s).rss_kib / 1024) for s in samples]
    fds = [(s.at_s, float(pick(s).fds)) for s in samples]
    return {
        "rss_mib_per_hour": round(slope_per_hour(resident), 1),
        "fds_per_hour": round(slope_per_hour(fds), 1),
        "rss_mib_start": round(resident[0][1], 1),
        "rss_mib_end": round(resident[-1][1], 1),
        "fds_start": int(fds[0][1]),
        "fds_end": int(fds[-1][1]),
        "vmrss_mib_per_hour": round(slope_per_hour(vmrss), 1),
        "vmrss_mib_start": round(vmrss[0][1], 1),
        "vmrss_mib_end": round(vmrss[-1][1], 1),
        "processes_end": pick(samples[-1]).processes,
    }


# -- logs --------------------------------------------------------------------------------

_PLAIN_ERROR = re.compile(r"\b(ERROR|CRITICAL)\b")
_PG_ERROR = re.compile(r"\b(ERROR|FATAL|PANIC):")


def json_entry(line: str) -> dict[str, object] | None:
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        entry = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return entry if isinstance(entry, dict) else None


def log_errors(lines: Iterable[str]) -> list[str]:
    """The platform's log lines that report an error: JSON lines at level error/critical or
    carrying a traceback (``exc``), and plain lines that start a traceback or say ERROR or
    CRITICAL (a library writing around the JSON logger)."""
    found = []
    for line in lines:
        text = line.strip()
        if not text:
            continue
        entry = json_entry(text)
        if entry is not None:
            if entry.get("level") in ("error", "critical") or "exc" in entry:
                found.append(text)
            continue
        if text.startswith("Traceback") or _PLAIN_ERROR.search(text):
            found.append(text)
    return found


def postgres_errors(lines: Iterable[str]) -> list[str]:
    return [line.strip() for line in lines if _PG_ERROR.search(line)]
