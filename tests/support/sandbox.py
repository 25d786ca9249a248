"""Sandbox settings and limits for the tests of every backend, a warm-pooled driver built
from them, and the host's address as the sandbox sees it."""

from __future__ import annotations

import hashlib
import secrets
import shutil
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tenantry.config import Settings, default_data_dir
from tenantry.sandbox import probe
from tenantry.sandbox.pool import PooledDriver
from tenantry.sandbox.types import Limits

BACKENDS = ("microvm", "gvisor", "bwrap")

#: gVisor (Debian's 2022 runsc, ptrace platform) has no memory or process limit of its own:
#: all guest memory belongs to its sentry and every guest process is a ptrace stub on the
#: host, so a memory or fork bomb reaches the host cgroup's limit and the host kills the
#: whole sandbox. The platform survives (that call fails, the run gets a fresh sandbox),
#: but the execution cannot be reported as 137 / stopped at a process cap. Measured, not
#: assumed: see docs/decisions/0005-sandboxes.md.
BOMBS_LOSE_THE_SANDBOX = {"gvisor"}


def require(backend: str) -> None:
    """Fail (never skip) a test whose backend's program is missing, naming the package."""
    program, package = probe.PACKAGES[backend]
    if shutil.which(program) is None:
        pytest.fail(f"{backend} sandbox tests need {program}: install the Debian package "
                    f"{package} (scripts/install-system-packages does)")


def host_address() -> str:
    """This host's own non-loopback address (what a guest would try first)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))  # no packet is sent for a UDP connect
        return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostbyname(socket.gethostname())
    finally:
        probe.close()


#: Small limits so the bombs hit them quickly; gVisor needs ≥ 512 MiB (sandbox-facts).
TEST_LIMITS = {"microvm": Limits(memory_mib=256, pids=64, timeout_s=20),
               "gvisor": Limits(memory_mib=512, pids=64, timeout_s=20),
               "bwrap": Limits(memory_mib=256, pids=64, timeout_s=20)}


def sandbox_settings(tmp: Path, backend: str) -> Settings:
    """The guest image lives where `make test` builds it (the default data dir), so it is
    built once per machine; everything else goes under this test's temporary folder."""
    images = Settings.from_env().sandbox_image_dir or default_data_dir() / "sandbox"
    return Settings(data_dir=tmp, sandbox_backend=backend, sandbox_image_dir=images,
                    sandbox_memory_mib=TEST_LIMITS[backend].memory_mib)



@asynccontextmanager
async def pooled_driver(tmp: Path, backend: str = "bwrap") -> AsyncIterator[PooledDriver]:
    """A started warm-pooled driver (one sandbox kept ready) of ``backend``, closed after."""
    require(backend)
    pooled = PooledDriver(probe.build_backend(backend, sandbox_settings(tmp, backend)),
                          pool_size=1, limits=TEST_LIMITS[backend])
    pooled.start()
    try:
        yield pooled
    finally:
        await pooled.close()


def hosts_path(tmp: Path, *, without: tuple[str, ...]) -> str:
    """A PATH holding every program of this host's bin folders but ``without`` (prefixes):
    a host where those backends are not installed, for a real process to probe."""
    folder = tmp / "bin"
    folder.mkdir()
    for bin_dir in ("/usr/local/bin", "/usr/bin", "/usr/sbin"):
        for program in Path(bin_dir).iterdir():
            link = folder / program.name
            if program.name.startswith(without) or link.exists():
                continue
            link.symlink_to(program)
    return str(folder)


def unbuilt_image_dir(tmp: Path) -> Path:
    """An image folder where no guest image was ever built (microvm unavailable)."""
    folder = tmp / "no-image"
    folder.mkdir()
    return folder


def placeholder_image_dir(tmp: Path) -> Path:
    """An image folder that ``find_image`` takes as current (its manifest matches this
    code), with empty kernel and initramfs: enough for a probe, which starts nothing; a
    microVM booted from it would fail."""
    import json

    from tenantry.sandbox.image.build import _source_hashes

    folder = tmp / "placeholder-image"
    image = folder / "images" / "placeholder"
    image.mkdir(parents=True)
    (image / "vmlinux").write_bytes(b"")
    (image / "initramfs.cpio").write_bytes(b"")
    (image / "manifest.json").write_text(json.dumps({
        "digest": "placeholder", "kernel_file": "vmlinux", "sources": _source_hashes()}))
    (folder / "images" / "current").write_text("placeholder\n")
    return folder


#: Code's side of an egress test, run in a sandbox: CONNECT through the guest's relay and
#: return the status line of the proxy's answer (``ask("host:port")``).
ASK_THROUGH_RELAY = r'''
import json, os, socket
def ask(target):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=60)
    try:
        s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        return data.split(b"\r\n")[0].decode()
    finally:
        s.close()
'''


def secret_token() -> str:
    """A value shaped so a probe in the sandbox can find it (``tnt`` + 32 hex) and report
    only its hash: the guest is never told a value it should not see."""
    return "tnt" + secrets.token_hex(16)


def token_sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()
