"""Host-side facts and files for the microvm backend: whether KVM is usable, the QEMU binary
and version, the TSC frequency, the on-disk template (RAM + device state) with its lock, and
the sealed in-memory copy of a template's RAM that clones map."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from tenantry.sandbox.types import SandboxUnavailable

QEMU_PACKAGE = "qemu-system-x86"
QEMU_BINARY = "qemu-system-x86_64"
CHUNK = 1 << 20


def kvm_usable() -> bool:
    """/dev/kvm is there and the CPU has hardware virtualization. A PVM host (a VM that
    offers /dev/kvm without vmx/svm) runs only PVM-built kernels at speed: stock guest
    kernels crawl there, so software emulation is the better choice."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = line.split(":", 1)[1].split()
            return "vmx" in flags or "svm" in flags
    return False


def qemu_binary() -> str:
    found = shutil.which(QEMU_BINARY)
    if found is None:
        raise SandboxUnavailable(f"{QEMU_BINARY} not found: the microvm backend needs the "
                                 f"Debian package {QEMU_PACKAGE} (apt-get install {QEMU_PACKAGE})")
    return found


def qemu_version(binary: str) -> str:
    done = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    match = re.search(r"version (\S+)", done.stdout)
    if done.returncode != 0 or match is None:
        raise SandboxUnavailable(f"{binary} --version failed: {done.stderr.strip()[:300]}")
    return match.group(1)


def host_tsc_khz() -> int | None:
    """The host's TSC rate, handed to the guest (``tsc_early_khz``) so it does not calibrate
    against the emulated PIT — that calibration sometimes hangs under TCG."""
    with contextlib.suppress(OSError, ValueError):
        return int(Path("/sys/devices/system/cpu/cpu0/tsc_freq_khz").read_text())
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return int(float(line.split(":", 1)[1]) * 1000)
    return None


@dataclass(frozen=True, slots=True)
class TemplateFiles:
    key: str
    directory: Path

    @classmethod
    def at(cls, root: Path, key: str) -> TemplateFiles:
        return cls(key, root / key)

    @property
    def ram(self) -> Path:
        return self.directory / "ram"

    @property
    def state(self) -> Path:
        return self.directory / "state"

    @property
    def lock(self) -> Path:
        return self.directory.with_name(self.directory.name + ".lock")

    def complete(self) -> bool:
        return self.ram.is_file() and self.state.is_file()

    def write_ram(self, memfd: int) -> None:
        """The template's RAM from its memfd to disk, sparse (most of it was never touched),
        then renamed into place: a half-written template is never taken for complete."""
        partial = self.ram.with_suffix(".partial")
        size = os.fstat(memfd).st_size
        out = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(out, size)
            _copy_nonzero(memfd, out, size)
            os.fsync(out)
        finally:
            os.close(out)
        partial.replace(self.ram)


@contextlib.asynccontextmanager
async def template_lock(path: Path) -> AsyncIterator[None]:
    """An exclusive lock across processes: one boots a template, the others wait for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def prune_templates(root: Path, image_prefix: str) -> None:
    """Delete templates of other images (an agent change makes a new image, and each
    template is ~100+ MB on disk). One being built elsewhere holds its lock: left alone.
    Processes already running from a deleted template keep their in-memory copy."""
    for directory in root.iterdir():
        if not directory.is_dir() or directory.name.startswith(image_prefix):
            continue
        lock = directory.with_name(directory.name + ".lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            shutil.rmtree(directory, ignore_errors=True)
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)


def sealed_copy(path: Path, size: int) -> int:
    """A memfd holding ``path``'s bytes (``size`` long), sealed against writes. Clones map
    it private and writable: the kernel allows copy-on-write on a write-sealed memfd but no
    shared writable mapping, so no clone can change what its siblings start from. It also
    lets the unprivileged QEMU open the RAM (``/proc/self/fd``) without access to our files."""
    source = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        memfd = os.memfd_create(f"tenantry-ram-{path.parent.name}",
                                os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(memfd, size)
            _copy_nonzero(source, memfd, min(size, os.fstat(source).st_size))
            fcntl.fcntl(memfd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW
                        | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
        except BaseException:
            os.close(memfd)
            raise
    finally:
        os.close(source)
    return memfd


def _copy_nonzero(source: int, target: int, size: int) -> None:
    # Zero chunks are skipped: the target stays sparse, and only RAM the guest touched
    # costs host memory or disk.
    zero = bytes(CHUNK)
    offset = 0
    while offset < size:
        chunk = os.pread(source, min(CHUNK, size - offset), offset)
        if not chunk:
            break
        if chunk != zero[:len(chunk)]:
            os.pwrite(target, chunk, offset)
        offset += len(chunk)
