"""The browser in a run's sandbox (ADR 0033), per backend that runs it here.

What a model waits for, measured at the built-in tools (``BuiltinTools.call``, as the tool
gateway calls them), against a real page server reached only through the sandbox's egress
relay and the host's proxy (the tests' page world, ``tests/support/pages.py``):
  * first open: ``browser_open`` as a run's first call — a fresh browser sandbox (no warm
    pool for browser sandboxes), Chromium started, the page loaded and read;
  * open: a later ``browser_open`` in the same sandbox (a different URL each time: no cache);
and the PSS of the sandbox's host processes with the browser open on a page (microvm:
QEMU's; gVisor and bwrap: the cgroup's). bwrap runs the browser only because this script
allows development backends, as an operator would on a development machine.

Prints one JSON line: ``{backend: {"first_open_p50_ms", "open_p50_ms", "open_p99_ms",
"pss_mib", "first_open_max_ms", "sandbox_ready_p50_ms", "browser_start_p50_ms", "opens",
"first_opens"}}``.

Knobs: BROWSER_BENCH_FIRST (first opens per backend, default 5; 3 on microvm under
software emulation), BROWSER_BENCH_OPENS (later opens, default 40; 15 under emulation),
BROWSER_BENCH_BACKENDS (comma list, default every backend that works here).

The sandbox manager keeps its blobs (saves, screenshots) as a worker does: a directory under
the registry in a database of the benchmark's own (TENANTRY_DATABASE_URL's server, or an
embedded Postgres), though the opens measured here write none."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import Bench, console, emit, env_positive, latency_summary, source_state

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.pages import HOST, PageWorld, page_world

from tenantry.blobs import Blobs, DirectoryObjects
from tenantry.config import Settings, default_data_dir
from tenantry.db import Database
from tenantry.ids import RunId, TenantId
from tenantry.sandbox import probe as sandbox_probe
from tenantry.sandbox.manager import SandboxManager
from tenantry.sandbox.pool import PooledDriver
from tenantry.sandbox.types import Limits
from tenantry.tools.builtin import BrowserPolicy, BuiltinTools

LIMITS = Limits(memory_mib=1536, pids=256, timeout_s=120)
POLICY = BrowserPolicy(page_timeout_s=120.0, max_pages=10_000, allow_dev_backends=True)
TENANT = TenantId("bench-tenant")


async def _open(tools: BuiltinTools, run: RunId, url: str) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    outcome = await tools.call(TENANT, run, "browser_open", {"url": url}, egress=(HOST,),
                               browser=True)
    elapsed = (time.perf_counter() - started) * 1000
    if not outcome.ok or '"status":200' not in outcome.text:
        raise RuntimeError(f"browser_open {url} failed: {outcome.text[:300]}")
    return elapsed, outcome.sandbox


async def measure(name: str, data_dir: Path, world: PageWorld, db: Database
                  ) -> dict[str, Any]:
    emulated = name == "microvm" and not _kvm()
    firsts = int(env_positive("BROWSER_BENCH_FIRST", 3 if emulated else 5))
    opens = int(env_positive("BROWSER_BENCH_OPENS", 15 if emulated else 40))
    images = Settings.from_env().sandbox_image_dir or default_data_dir() / "sandbox"
    settings = Settings(data_dir=data_dir, sandbox_image_dir=images)
    driver = PooledDriver(sandbox_probe.build_backend(name, settings, variant="browser"),
                          pool_size=0, limits=LIMITS, egress=world.proxy())
    blobs = Blobs(db, DirectoryObjects(data_dir / "blobs"))
    manager = SandboxManager(driver, blobs, limits=LIMITS,
                             hibernate_after=0, browser_driver=driver, browser_limits=LIMITS)
    tools = BuiltinTools(manager, POLICY)
    result: dict[str, Any] = {}
    try:
        first, ready, start = [], [], []
        for i in range(firsts):
            run = RunId.new()
            ms, info = await _open(tools, run, f"http://{HOST}/?first={i}")
            first.append(ms)
            ready.append(float(info["ready_ms"]))
            start.append(float(info["browser_start_ms"]))
            console.print(f"{name}: first open {i + 1}/{firsts}: {ms:.0f} ms (sandbox "
                          f"{info['ready_ms']:.0f}, browser start {info['browser_start_ms']:.0f})")
            if i < firsts - 1:
                await manager.end(TENANT, run, None)
        later = []
        for i in range(opens):
            page = "/two" if i % 2 else "/"
            ms, _ = await _open(tools, run, f"http://{HOST}{page}?n={i}")
            later.append(ms)
            console.print(f"{name}: open {i + 1}/{opens}: {ms:.0f} ms")
        sandbox, _ = await manager.for_run(TENANT, run, egress=(HOST,), browser=True)
        pss = getattr(sandbox.instance, "pss_kib", lambda: None)()
        summary = latency_summary(later)
        result = {
            "first_open_p50_ms": latency_summary(first)["p50_ms"],
            "first_open_max_ms": round(max(first), 1),
            "open_p50_ms": summary["p50_ms"], "open_p99_ms": summary["p99_ms"],
            "pss_mib": None if pss is None else round(pss / 1024, 1),
            "sandbox_ready_p50_ms": round(statistics.median(ready), 1),
            "browser_start_p50_ms": round(statistics.median(start), 1),
            "first_opens": firsts, "opens": opens,
        }
        if name == "microvm":
            result["accel"] = "tcg" if emulated else "kvm"
        await manager.end(TENANT, run, None)
    finally:
        await manager.close()
    return result


def _kvm() -> bool:
    from tenantry.sandbox.backends.microvm import kvm_usable

    return kvm_usable()


async def run(bench: Bench) -> dict[str, Any]:
    wanted = [b for b in os.environ.get("BROWSER_BENCH_BACKENDS", "").split(",") if b]
    found = sandbox_probe.detect(Settings())
    names = wanted or [b for b in ("microvm", "gvisor", "bwrap") if b not in found.why_not]
    for skipped, reason in found.why_not.items():
        if skipped not in names:
            console.print(f"{skipped}: not measured here ({reason})", style="yellow")
    results: dict[str, Any] = {}
    db = await Database.connect((await bench.database()).dsn, min_size=1, max_size=2)
    try:
        with tempfile.TemporaryDirectory(prefix="tenantry-browser-bench-") as tmp, \
                page_world() as world:
            for name in names:
                try:
                    results[name] = await measure(name, Path(tmp) / name, world, db)
                except Exception as exc:  # one backend's failure is reported, not fatal
                    console.print(f"{name}: {type(exc).__name__}: {exc}", style="red")
                    results[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    finally:
        await db.close()
    console.print(f"measured at {source_state()}")
    return results


def main() -> int:
    try:
        with Bench("browser") as bench:  # its database, dropped (or its Postgres stopped)
            result = asyncio.run(run(bench))
    except KeyboardInterrupt:
        return 130
    emit(result)
    return 1 if any("error" in r for r in result.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
