"""What a sandbox used, as its host measures it (ADR 0016): CPU time and peak memory of
the sandbox's host processes — its cgroup (``cpuacct.usage``, ``memory.max_usage_in_bytes``)
for bwrap, gVisor and a microVM run as root; the QEMU process itself (``/proc/<pid>``:
utime + stime, ``VmHWM``) for a microVM without a cgroup. Never what the guest reports:
tenant code is hostile and the guest is its ground.

A pooled sandbox was launched and warmed before anyone claimed it: a ``Meter`` starts at
the claim (CPU from a baseline, the memory peak reset to what is charged then), so the
figures are the bound run's or attempt's, and ``stop`` freezes them at destroy, before the
cgroup or the process is gone. A figure the host cannot read is None, never 0."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from tenantry.sandbox.types import ResourceUsage


class Source(Protocol):
    def cpu_ns(self) -> int | None: ...

    def peak_memory_bytes(self) -> int | None: ...

    def reset_peak_memory(self) -> bool:
        """Make the peak start from now; False when it cannot (then no peak is told)."""


class ProcessSource:
    """One host process (QEMU without a cgroup): its threads' CPU time and its RSS peak."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")

    def cpu_ns(self) -> int | None:
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return None
        # After the command's parenthesised name (which may hold spaces): utime, stime are
        # fields 14 and 15 of the whole line, clock ticks summed over every thread.
        fields = stat.rpartition(")")[2].split()
        try:
            return (int(fields[11]) + int(fields[12])) * self._tick_ns
        except (IndexError, ValueError):
            return None

    def peak_memory_bytes(self) -> int | None:
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return None

    def reset_peak_memory(self) -> bool:
        # "5" resets the peak RSS (VmHWM) to the current RSS (proc(5), clear_refs).
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        except OSError:
            return False
        return True


class Meter:
    """Usage of one source from ``start`` to ``stop``; ``None`` source: nothing to read."""

    def __init__(self, source: Source | None) -> None:
        self._source = source
        self._cpu0: int | None = None
        self._peak_from_start = False
        self._started = False
        self._stopped = False
        self._final: ResourceUsage | None = None

    def start(self) -> None:
        """Count from now. Again later (a sandbox reused for the same tenant's next task,
        ADR 0014): from then, so each task's figures are its own. After ``stop``: no-op."""
        if self._source is None or self._stopped:
            return
        self._started = True
        self._cpu0 = self._source.cpu_ns()
        self._peak_from_start = self._source.reset_peak_memory()

    def stop(self) -> None:
        """Freeze the figures (at destroy: the cgroup or the process goes next)."""
        if not self._stopped:
            self._final = self._measure()
            self._stopped = True

    def read(self) -> ResourceUsage | None:
        return self._final if self._stopped else self._measure()

    def _measure(self) -> ResourceUsage | None:
        if self._source is None or not self._started:
            return None
        now = self._source.cpu_ns()
        cpu_ns = None if now is None or self._cpu0 is None else max(0, now - self._cpu0)
        peak = self._source.peak_memory_bytes() if self._peak_from_start else None
        if cpu_ns is None and peak is None:
            return None
        return ResourceUsage(cpu_ns=cpu_ns, peak_memory_bytes=peak)
