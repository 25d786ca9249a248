"""The soak benchmark's platform: one ``tenantry up`` process, its log, and the fake model
provider that goes away and comes back at the same address (soak.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx2

from _harness import Bench, Helper, console, python_module, tenantry_command
from _soak_procs import json_entry, log_errors
from tenantry.config import default_data_dir
from tenantry.db.embedded import EmbeddedPostgres

OPERATOR_TOKEN = "op_benchmark_soak"
OUTAGE_S = (20.0, 30.0)
OUTAGE_EVERY_S = 300.0
STARTUP_TIMEOUT_S = 120.0


# -- the provider that goes away ---------------------------------------------------------


def port_outside_ephemeral_range() -> int:
    """A free port below the kernel's ephemeral range: while the provider is down no
    outgoing connection can take its port, so it comes back at the same address."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(10000, max(low, 10001))
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


@dataclass(slots=True)
class Provider:
    """The fake model server in its own process, stopped and restarted on one port."""

    bench: Bench
    port: int
    helper: Helper | None = None
    starts: int = 0
    outages: int = 0
    down_s: float = 0.0

    @property
    def up(self) -> bool:
        return self.helper is not None and self.helper.proc.poll() is None

    async def start(self) -> str:
        for _ in range(30):  # the port may take a moment to be free again
            self.starts += 1
            self.helper = self.bench.start(f"fake-model-{self.starts}", python_module(
                "tenantry.testing.fake_model", "--port", str(self.port)))
            try:
                return await self.helper.ready()
            except RuntimeError as exc:
                console.log(f"[yellow]fake model did not start ({exc}); retrying")
                await asyncio.sleep(1.0)
        raise RuntimeError(f"the fake model cannot listen on port {self.port} again")

    async def stop(self) -> None:
        if self.helper is not None:
            await asyncio.to_thread(self.helper.stop)

    async def outages_until(self, schedule: list[tuple[float, float]], t0: float) -> None:
        for start, length in schedule:
            await asyncio.sleep(max(0.0, t0 + start - time.monotonic()))
            console.log(f"provider down for {length:.0f} s")
            down = time.monotonic()
            self.outages += 1
            await self.stop()
            try:
                await asyncio.sleep(length)
            finally:
                await self.start()
                self.down_s += time.monotonic() - down
                console.log("provider back")


def outage_schedule(seconds: float, rng: random.Random) -> list[tuple[float, float]]:
    """(start, length) of each outage: every 5 minutes (a third of a shorter run), the
    first after a minute (sooner in a short run), each over before the load stops."""
    every = min(OUTAGE_EVERY_S, max(60.0, seconds / 3))
    found: list[tuple[float, float]] = []
    start = min(60.0, every / 4 * 3)
    while True:
        length = rng.uniform(*OUTAGE_S)
        if start + length + 10 > seconds:
            return found
        found.append((start, length))
        start += every


# -- the platform ------------------------------------------------------------------------


@dataclass(slots=True)
class LogWatch:
    """A growing log file, read from where the last look stopped: its error lines, and how
    many warnings it has per message (parks show up as ``run parked: …``)."""

    path: Path
    offset: int = 0
    lines: int = 0
    errors: list[str] = field(default_factory=list)
    warnings: Counter[str] = field(default_factory=Counter)

    def read(self) -> list[str]:
        if not self.path.exists():
            return self.errors
        with self.path.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        complete = chunk[:chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        lines = complete.decode(errors="replace").splitlines()
        self.lines += len(lines)
        self.errors.extend(log_errors(lines))
        for line in lines:
            entry = json_entry(line)
            if entry is not None and entry.get("level") == "warning":
                self.warnings[str(entry.get("msg", "")).split(":", 1)[0][:80]] += 1
        return self.errors


def _sandbox_image_dir() -> str:
    """The guest image the machine has built (``tenantry up``'s temp data dir has none)."""
    configured = os.environ.get("TENANTRY_SANDBOX_IMAGE_DIR")
    if configured:
        return configured
    shared = default_data_dir() / "sandbox"
    return str(shared) if shared.exists() else ""


def start_platform(bench: Bench, data_dir: Path, port: int, model_url: str,
                   database_url: str | None) -> Helper:
    env = {
        "TENANTRY_DATA_DIR": str(data_dir),
        "TENANTRY_OPERATOR_TOKEN": OPERATOR_TOKEN,
        "TENANTRY_HOST": "127.0.0.1",
        "TENANTRY_PORT": str(port),
        "TENANTRY_MODEL_BASE_URL": model_url,
        "TENANTRY_LOG_FORMAT": "json",
        "TENANTRY_WEBHOOK_ALLOW_PRIVATE": "1",
        "TENANTRY_WORKERS": "1",
        # Empty = unset: the platform probes (the harness turns sandboxes off otherwise).
        "TENANTRY_SANDBOX_BACKEND": os.environ.get("TENANTRY_SANDBOX_BACKEND", ""),
        "TENANTRY_SANDBOX_IMAGE_DIR": _sandbox_image_dir(),
        "TENANTRY_DATABASE_URL": database_url or "",
    }
    return bench.start("platform", tenantry_command("up", "--port", str(port)), env=env)


async def wait_healthy(http: httpx2.AsyncClient, platform: Helper) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if platform.proc.poll() is not None:
            raise RuntimeError(f"tenantry up exited with {platform.proc.returncode}:\n"
                               f"{platform.tail()}")
        with contextlib.suppress(httpx2.TransportError):
            if (await http.get("/healthz")).status_code == 200:
                return
        await asyncio.sleep(0.3)
    raise RuntimeError(f"tenantry up not healthy after {STARTUP_TIMEOUT_S:.0f} s:\n"
                       f"{platform.tail()}")


def stop_platform(platform: Helper, data_dir: Path) -> int | None:
    """SIGTERM (graceful), and the embedded Postgres if a killed ``up`` left it running."""
    status = platform.stop()
    if (data_dir / "postgres" / "postmaster.pid").exists():
        try:
            EmbeddedPostgres(data_dir).stop()
        except Exception as exc:  # keep cleaning up; say what is left
            console.log(f"[red]could not stop the embedded Postgres: {exc}")
    return status
