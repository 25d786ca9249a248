"""The host-side meter of a sandbox without a cgroup (a microVM run by a non-root worker:
QEMU's own /proc figures), on a real process: CPU from the start of metering, the memory
peak reset then and raised by what the process writes afterwards; frozen at stop; and no
source says None, never 0 (ADR 0016)."""

from __future__ import annotations

import subprocess
import sys

from tenantry.sandbox.backends.accounting import Meter, ProcessSource

MIB = 1024 * 1024

#: Waits for a line, then burns half a second of its own CPU and writes 64 MiB, then
#: waits again (so it is still there to be read).
CHILD = """
import sys, time
sys.stdin.readline()
start = time.process_time()
while time.process_time() - start < 0.5:
    pass
block = bytearray(64 * 1024 * 1024)
for i in range(0, len(block), 4096):
    block[i] = 1
print("done", flush=True)
sys.stdin.readline()
"""


def test_a_process_meter_counts_cpu_and_the_peak_from_its_start() -> None:
    with subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as child:
        meter = Meter(ProcessSource(child.pid))
        assert meter.read() is None  # not started: nothing is the bound run's yet
        meter.start()
        before = meter.read()
        assert before is not None and before.peak_memory_bytes is not None
        assert before.peak_memory_bytes < 64 * MIB  # the interpreter alone, reset here
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"
        meter.stop()
        used = meter.read()
        assert used is not None and used.cpu_ns is not None
        assert used.cpu_ns >= 400_000_000, used  # its half second, in clock ticks
        assert used.peak_memory_bytes is not None and used.peak_memory_bytes >= 64 * MIB
        child.kill()
    # Frozen at stop: the process is gone, the figures stay.
    assert meter.read() == used


def test_a_meter_without_a_source_says_none() -> None:
    meter = Meter(None)
    meter.start()
    meter.stop()
    assert meter.read() is None


def test_a_process_that_is_gone_reads_as_none() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    meter = Meter(ProcessSource(child.pid))
    meter.start()
    assert meter.read() is None


#: Burns half a second and holds 64 MiB, frees it, then waits to be measured again.
CHILD_THAT_FREES = """
import sys, time
sys.stdin.readline()
start = time.process_time()
while time.process_time() - start < 0.5:
    pass
block = bytearray(64 * 1024 * 1024)
for i in range(0, len(block), 4096):
    block[i] = 1
del block
print("freed", flush=True)
sys.stdin.readline()
"""


def test_a_meter_started_again_counts_from_then() -> None:
    """A sandbox reused for the same tenant's next task (ADR 0014) restarts its meter: the
    next task is not charged the CPU and the memory peak of the one before."""
    with subprocess.Popen([sys.executable, "-c", CHILD_THAT_FREES], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as child:
        meter = Meter(ProcessSource(child.pid))
        meter.start()
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "freed"
        first = meter.read()
        assert first is not None and first.cpu_ns is not None and first.peak_memory_bytes
        assert first.cpu_ns >= 400_000_000 and first.peak_memory_bytes >= 64 * MIB, first
        meter.start()  # the next task begins
        second = meter.read()
        assert second is not None and second.cpu_ns is not None and second.peak_memory_bytes
        assert second.cpu_ns < first.cpu_ns
        assert second.peak_memory_bytes < 64 * MIB, second
        child.stdin.write("end\n")
        child.stdin.flush()
