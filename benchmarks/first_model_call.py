"""A process's first model call: how long the worker waits on the model gateway
(``waited_ms``, as the model step measures it) against the provider's own time, in fresh
processes. A worker once saw ``waited_ms`` 1,164 for a provider that answered in 5.9 ms: the
gateway built the account's 32 HTTP transports — each with its own TLS context — inside
that first call. The fake provider runs in this (parent) process, warmed; each sample is a
new child process with a new gateway making its first calls.

    .venv/bin/python benchmarks/first_model_call.py   # prints one JSON line last
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

SAMPLES = int(os.environ.get("FIRST_CALL_SAMPLES", "5"))
CALLS = 4  # per process: the first, then three more


async def _child(base_url: str) -> None:
    from tenantry.models.accounts import ModelAccount
    from tenantry.models.gateway import ModelGateway
    from tenantry.models.types import ModelRequest

    account = ModelAccount("acct", "openai", base_url, ("scripted",), "us")
    started = time.perf_counter()
    async with ModelGateway(None, implicit=[(account, None)]) as gateway:
        start_ms = (time.perf_counter() - started) * 1000
        calls = []
        for i in range(CALLS):
            request = ModelRequest("scripted", ({"role": "user", "content": "hi"},),
                                   run_key=f"run-{i}", tenant="t")
            began = time.perf_counter()
            reply = await gateway.complete(request)
            waited = (time.perf_counter() - began) * 1000
            calls.append({"waited_ms": waited, "latency_ms": reply.latency_ms,
                          "connect_ms": reply.connect_ms})
    print(json.dumps({"gateway_start_ms": start_ms, "calls": calls}))


async def _parent() -> dict[str, object]:
    from tenantry.testing.fake_model import FakeModelServer

    async with FakeModelServer() as server:
        samples = []
        for _ in range(SAMPLES):
            child = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--child", server.base_url,
                stdout=subprocess.PIPE)
            out, _ = await child.communicate()
            samples.append(json.loads(out.decode().strip().splitlines()[-1]))

    def median(values: list[float]) -> float:
        return round(statistics.median(values), 2)

    firsts = [s["calls"][0] for s in samples]
    later = [c for s in samples for c in s["calls"][1:]]
    return {
        "benchmark": "first_model_call", "samples": SAMPLES,
        "gateway_start_ms_p50": median([s["gateway_start_ms"] for s in samples]),
        "first_waited_ms_p50": median([c["waited_ms"] for c in firsts]),
        "first_latency_ms_p50": median([c["latency_ms"] for c in firsts]),
        "first_connect_ms_p50": median([c["connect_ms"] for c in firsts]),
        "first_gateway_ms_p50": median([c["waited_ms"] - c["latency_ms"] for c in firsts]),
        "later_waited_ms_p50": median([c["waited_ms"] for c in later]),
        "later_gateway_ms_p50": median([c["waited_ms"] - c["latency_ms"] for c in later]),
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(_child(sys.argv[2]))
    else:
        print(json.dumps(asyncio.run(_parent())))
