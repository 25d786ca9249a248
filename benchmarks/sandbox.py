"""Sandbox readiness and memory, per backend that runs here (targets in docs/BENCHMARKS.md).

For each backend: the time from asking for a sandbox to one that answers —
  * warm claim: from a full warm pool (resume + fresh entropy + bind), the design's path;
  * cold restore: with the pool empty (microvm: a clone restored from the template
    snapshot; gvisor/bwrap: a fresh launch — they have no snapshot, so cold boot = this);
  * cold boot (microvm only differs): a VM booted from the kernel, no template;
and the PSS of an idle claimed sandbox's host processes. Targets on this machine: warm
claim p50 < 20 ms, cold restore < 1 s. Prints one JSON line:
``{backend: {"warm_claim_p50_ms", "warm_claim_p99_ms", "cold_restore_p50_ms",
"cold_boot_p50_ms", "pss_mib", "exec_p50_ms", "exec_p99_ms", ...}}`` (exec: one
``sh -c true`` round trip in a claimed sandbox).

Knobs: SANDBOX_BENCH_CLAIMS (warm claims per backend, default 30), SANDBOX_BENCH_COLD
(cold restores, default 8), SANDBOX_BENCH_BOOTS (microvm cold boots, default 3),
SANDBOX_BENCH_BACKENDS (comma list, default every backend that works here)."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import console, emit, env_positive, latency_summary, source_state
from tenantry.config import Settings, default_data_dir
from tenantry.ids import RunId, TenantId
from tenantry.sandbox import probe as sandbox_probe
from tenantry.sandbox.pool import PooledDriver
from tenantry.sandbox.types import Binding, Limits

LIMITS = {"microvm": Limits(memory_mib=256), "gvisor": Limits(memory_mib=512),
          "bwrap": Limits(memory_mib=256)}
POOL_SIZE = 2
EXECS = 30


def _binding() -> Binding:
    return Binding(TenantId("bench-tenant"), RunId.new())


async def _claim_ms(driver: PooledDriver, limits: Limits) -> tuple[float, bool]:
    started = time.perf_counter()
    box = await driver.create(_binding(), limits)
    elapsed = (time.perf_counter() - started) * 1000
    reply = await box.run_shell("echo ready")  # it really answers, not just claimed
    assert reply.stdout == "ready\n", reply
    await box.destroy()
    return elapsed, box.warm


async def measure(name: str, data_dir: Path) -> dict[str, Any]:
    limits = LIMITS[name]
    images = Settings.from_env().sandbox_image_dir or default_data_dir() / "sandbox"
    settings = Settings(data_dir=data_dir, sandbox_image_dir=images,
                        sandbox_memory_mib=limits.memory_mib)
    claims = int(env_positive("SANDBOX_BENCH_CLAIMS", 30))
    colds = int(env_positive("SANDBOX_BENCH_COLD", 8))
    boots = int(env_positive("SANDBOX_BENCH_BOOTS", 3))
    result: dict[str, Any] = {}

    # Warm claims: the pool refilled to full before each one.
    driver = PooledDriver(sandbox_probe.build_backend(name, settings), pool_size=POOL_SIZE,
                          limits=limits)
    driver.start()
    try:
        warm: list[float] = []
        for i in range(claims):
            await driver.pool.wait_full(600)
            ms, was_warm = await _claim_ms(driver, limits)
            assert was_warm
            warm.append(ms)
            console.print(f"{name}: warm claim {i + 1}/{claims}: {ms:.1f} ms")
        summary = latency_summary(warm)
        result["warm_claim_p50_ms"] = summary["p50_ms"]
        result["warm_claim_p99_ms"] = summary["p99_ms"]
        # PSS of claimed, idle sandboxes (held at once, so shared pages are shared).
        await driver.pool.wait_full(600)
        held = [await driver.create(_binding(), limits) for _ in range(POOL_SIZE)]
        for box in held:
            await box.run_python("print(1)")
        pss = [box.instance.pss_kib() or 0 for box in held]
        result["pss_mib"] = round(statistics.median(pss) / 1024, 1)
        # One execution's round trip in a claimed sandbox: the shell command, and the
        # host's sweep after it of anything the command left running.
        execs = []
        for _ in range(EXECS):
            started = time.perf_counter()
            await held[0].run_shell("true")
            execs.append((time.perf_counter() - started) * 1000)
        summary = latency_summary(execs)
        result["exec_p50_ms"], result["exec_p99_ms"] = summary["p50_ms"], summary["p99_ms"]
        for box in held:
            await box.destroy()
    finally:
        await driver.close()

    # Cold restores: no pool, every claim pays the launch.
    driver = PooledDriver(sandbox_probe.build_backend(name, settings), pool_size=0, limits=limits)
    try:
        cold = []
        for i in range(colds):
            ms, was_warm = await _claim_ms(driver, limits)
            assert not was_warm
            cold.append(ms)
            console.print(f"{name}: cold restore {i + 1}/{colds}: {ms:.1f} ms")
        result["cold_restore_p50_ms"] = latency_summary(cold)["p50_ms"]
    finally:
        await driver.close()

    if name == "microvm":
        from tenantry.sandbox.backends.microvm import MicroVmBackend, kvm_usable

        backend = sandbox_probe.build_backend(name, settings)
        assert isinstance(backend, MicroVmBackend)
        booted = []
        try:
            for i in range(boots):
                started = time.perf_counter()
                instance = await backend.cold_boot(limits)
                booted.append((time.perf_counter() - started) * 1000)
                await instance.destroy()
                console.print(f"{name}: cold boot {i + 1}/{boots}: {booted[-1]:.0f} ms")
        finally:
            await backend.close()
        result["cold_boot_p50_ms"] = latency_summary(booted)["p50_ms"]
        result["accel"] = "kvm" if kvm_usable() else "tcg"
    else:
        result["cold_boot_p50_ms"] = result["cold_restore_p50_ms"]
    return result


async def run() -> dict[str, Any]:
    wanted = [b for b in os.environ.get("SANDBOX_BENCH_BACKENDS", "").split(",") if b]
    found = sandbox_probe.detect(Settings())
    names = wanted or [b for b in ("microvm", "gvisor", "bwrap") if b not in found.why_not]
    for skipped, reason in found.why_not.items():
        if skipped not in names:
            console.print(f"{skipped}: not measured here ({reason})", style="yellow")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tenantry-sandbox-bench-") as tmp:
        for name in names:
            results[name] = await measure(name, Path(tmp) / name)
    console.print(f"measured at {source_state()}")
    return results


def main() -> int:
    try:
        result = asyncio.run(run())
    except KeyboardInterrupt:
        return 130
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
