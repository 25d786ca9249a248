"""Sandbox settings and limits for the tests of every backend, and the host's address as
the sandbox sees it."""

from __future__ import annotations

import socket
from pathlib import Path

from tenantry.config import Settings, default_data_dir
from tenantry.sandbox.types import Limits


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
