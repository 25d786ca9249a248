"""Model gateway overhead: the latency the gateway adds to a model call over calling the
same fake provider directly with the same HTTP client, at 200 concurrent calls.

The gateway path is the one every run step takes: account choice (rendezvous hash over
three registered accounts, sticky per run), circuit breaker, the account's capacity gate
(rpm/tpm token buckets, the tokens-per-minute estimate and its settlement), the provider
client (request encoding, HTTP, reply parsing, rate-limit headers), and the bookkeeping of
the reply. The added latency of a call is its gateway wall time minus the time spent in
the provider client's HTTP call inside it, measured per call. The fake provider runs in its
own process. Target: p50 < 1 ms, p99 < 5 ms; anchor: LiteLLM publishes ~2-12 ms
median proxy overhead.

    .venv/bin/python benchmarks/model_gateway.py   # prints one JSON line last
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from _harness import Bench, console, latency_summary, main, percentile
from tenantry.models.accounts import ModelAccount
from tenantry.models.gateway import GatewaySettings, ModelGateway, http_client
from tenantry.models.types import ModelReply, ModelRequest, ProviderClient

CALLS = int(os.environ.get("MODEL_GATEWAY_CALLS", "4000"))
CONCURRENCY = int(os.environ.get("MODEL_GATEWAY_CONCURRENCY", "200"))
WARMUP = 400
PROMPT = "Summarise the customer's last three orders and flag anything unusual. " * 30


class TimedClient:
    """Wraps a provider client and records how long each HTTP call inside took."""

    def __init__(self, inner: ProviderClient, inner_ms: dict[str, float]) -> None:
        self.inner, self.inner_ms = inner, inner_ms
        self.provider, self.account = inner.provider, inner.account

    async def complete(self, request: ModelRequest) -> ModelReply:
        started = time.perf_counter()
        try:
            return await self.inner.complete(request)
        finally:
            self.inner_ms[request.run_key] = (time.perf_counter() - started) * 1000

    async def probe(self) -> None:
        await self.inner.probe()

    async def aclose(self) -> None:
        await self.inner.aclose()


def request(i: int) -> ModelRequest:
    run = f"run_{i % 500:032x}"
    messages = ({"role": "system", "content": "You are a careful assistant."},
                {"role": "user", "content": f"{PROMPT} (order batch {i})"})
    return ModelRequest("scripted", messages, (), run_key=f"{run}:{i}", tenant="bench",
                        region="default", in_flight=i % 3 != 0)


async def timed(calls: range, call: Any) -> list[float]:
    """Run ``call(i)`` for each i with CONCURRENCY in flight; wall time of each call."""
    queue = iter(calls)
    wall: list[float] = []

    async def lane() -> None:
        for i in queue:
            started = time.perf_counter()
            await call(i)
            wall.append((time.perf_counter() - started) * 1000)

    await asyncio.gather(*(lane() for _ in range(CONCURRENCY)))
    return wall


async def benchmark(bench: Bench) -> dict[str, Any]:
    base_url = await bench.fake_model().ready()
    accounts = [ModelAccount(f"acct-{n}", "openai", base_url, ("scripted",), "us",
                             rpm=1_000_000, tpm=1_000_000_000) for n in range(3)]
    inner_ms: dict[str, float] = {}

    def factory(account: ModelAccount, key: str | None, timeout: float) -> ProviderClient:
        return TimedClient(http_client(account, key, timeout), inner_ms)

    direct_client = http_client(accounts[0], None, 60.0)
    gateway = ModelGateway(None, settings=GatewaySettings(), client_factory=factory,
                           implicit=[(a, None) for a in accounts])
    added: list[float] = []
    try:
        async with gateway:
            console.log(f"{CALLS} direct calls, then {CALLS} through the gateway, "
                        f"{CONCURRENCY} at a time")
            await timed(range(WARMUP), lambda i: direct_client.complete(request(i)))
            direct = await timed(range(CALLS), lambda i: direct_client.complete(request(i)))
            await timed(range(WARMUP), lambda i: gateway.complete(request(i)))

            async def through_gateway(i: int) -> None:
                req = request(WARMUP + i)
                started = time.perf_counter()
                reply = await gateway.complete(req)
                total = (time.perf_counter() - started) * 1000
                if not reply.text and not reply.calls:
                    raise RuntimeError("empty reply through the gateway")
                added.append(total - inner_ms.pop(req.run_key))

            wall = await timed(range(CALLS), through_gateway)
    finally:
        await direct_client.aclose()
    summary = latency_summary(added)
    direct_sorted, wall_sorted = sorted(direct), sorted(wall)
    return {
        "p50_ms": summary["p50_ms"], "p99_ms": summary["p99_ms"],
        "per_s": round(CALLS / (sum(wall) / 1000 / CONCURRENCY), 1),
        "calls": CALLS, "concurrency": CONCURRENCY,
        "direct_p50_ms": round(percentile(direct_sorted, 0.50), 2),
        "direct_p99_ms": round(percentile(direct_sorted, 0.99), 2),
        "gateway_p50_ms": round(percentile(wall_sorted, 0.50), 2),
        "gateway_p99_ms": round(percentile(wall_sorted, 0.99), 2),
    }


if __name__ == "__main__":
    raise SystemExit(main("model_gateway", benchmark))
