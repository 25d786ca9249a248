"""The warm pool and the driver built on it.

The pool keeps ``size`` instances launched, warmed and paused; a claim takes one, resumes
it, injects fresh entropy (clones of one snapshot are otherwise identical), narrows its
limits, binds it to the run and starts serving its egress channel with the run's allow-list
(never before: a pooled sandbox reaches nothing). When the pool is empty the claim pays a
launch (for a microVM: a restore of the template) instead of failing. An instance leaves
the pool once and is never put back: a sandbox serves one run, then it is destroyed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tenantry.backoff import backoff
from tenantry.sandbox.backends.protocol import Backend, Instance
from tenantry.sandbox.channel import AgentChannel
from tenantry.sandbox.egress.policy import EgressPolicy
from tenantry.sandbox.egress.proxy import EgressProxy
from tenantry.sandbox.sandbox import Sandbox
from tenantry.sandbox.types import (
    Binding,
    Limits,
    SandboxError,
    SandboxLost,
    SandboxRefused,
)

logger = logging.getLogger(__name__)

#: A refill that fails waits about this long before trying again (doubling, with jitter,
#: up to a minute).
REFILL_BACKOFF_SECONDS = 1.0
REFILL_MAX_BACKOFF_SECONDS = 60.0
#: Where the guest's egress relay listens (``guest/relay.py``).
PROXY_URL = "http://127.0.0.1:3128"

#: More warming for one kind of work (e.g. an activity attempt's own requests), run on
#: every pooled instance after the claim path's, before it is paused; it must leave the
#: work directory as it found it. It runs before any binding: no tenant's data.
WarmUp = Callable[[AgentChannel], Awaitable[None]]


@dataclass(slots=True)
class PoolStats:
    claims: int = 0
    warm: int = 0
    cold: int = 0
    launched: int = 0
    launch_failures: int = 0
    claim_ms_last: float = 0.0


class WarmPool:
    def __init__(self, backend: Backend, *, size: int, limits: Limits,
                 warm_up: WarmUp | None = None) -> None:
        self.backend = backend
        self.size = size
        self.limits = limits
        self.warm_up = warm_up
        self.stats = PoolStats()
        self._ready: deque[Instance] = deque()
        self._wanted = asyncio.Event()
        self._grew = asyncio.Event()
        self._refiller: asyncio.Task[None] | None = None
        self._seen: set[str] = set()  # every instance id ever handed out

    @property
    def ready(self) -> int:
        return len(self._ready)

    def start(self) -> None:
        if self._refiller is None and self.size > 0:
            self._refiller = asyncio.create_task(self._refill(), name="sandbox-pool-refill")
            self._wanted.set()

    async def wait_full(self, timeout: float) -> None:  # noqa: ASYNC109 - startup budget
        """For benchmarks and tests: until the pool holds ``size`` instances."""
        async with asyncio.timeout(timeout):
            while len(self._ready) < self.size:
                self._grew.clear()
                await self._grew.wait()

    async def claim(self) -> tuple[Instance, bool]:
        """An instance never handed out before, resumed; and whether it was warm."""
        self.stats.claims += 1
        while self._ready:
            instance = self._ready.popleft()
            self._wanted.set()
            try:
                if not instance.alive:
                    raise SandboxLost("pooled instance died while paused")
                await instance.resume()
            except SandboxError as exc:
                logger.warning("dropping a pooled sandbox: %s", exc)
                await instance.destroy()
                continue
            self.stats.warm += 1
            return self._hand_out(instance), True
        self.stats.cold += 1
        instance = await self.backend.launch(self.limits)
        return self._hand_out(instance), False

    def _hand_out(self, instance: Instance) -> Instance:
        # Belt and braces for invariant 6: an id seen once is never handed out again.
        if instance.id in self._seen:
            raise SandboxError(f"sandbox {instance.id} was already handed out once")
        self._seen.add(instance.id)
        return instance

    async def _refill(self) -> None:
        failures = 0  # in a row
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            while len(self._ready) < self.size:
                try:
                    instance = await self.backend.launch(self.limits)
                    await _warm(instance, self.warm_up)
                    await instance.pause()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self.stats.launch_failures += 1
                    logger.warning("sandbox pool refill failed (%s): %s", self.backend.name,
                                   exc)
                    failures += 1
                    await asyncio.sleep(backoff(failures, first=REFILL_BACKOFF_SECONDS,
                                                cap=REFILL_MAX_BACKOFF_SECONDS))
                    continue
                failures = 0
                self.stats.launched += 1
                self._ready.append(instance)
                self._grew.set()

    async def close(self) -> None:
        if self._refiller is not None:
            self._refiller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refiller
            self._refiller = None
        while self._ready:
            await self._ready.popleft().destroy()


class PooledDriver:
    """``SandboxDriver`` over one backend and its warm pool. ``egress`` is the proxy every
    sandbox of this driver reaches out through (one for all; each sandbox is served under
    its own run's policy); the platform passes none, tests pass one with their resolver."""

    def __init__(self, backend: Backend, *, pool_size: int, limits: Limits,
                 egress: EgressProxy | None = None, warm_up: WarmUp | None = None) -> None:
        self.backend = backend.name
        self._backend = backend
        self.egress = egress or EgressProxy()
        self.pool = WarmPool(backend, size=pool_size, limits=limits, warm_up=warm_up)

    def start(self) -> None:
        self.pool.start()

    async def create(self, binding: Binding, limits: Limits) -> Sandbox:
        started = time.perf_counter()
        try:  # before a sandbox is claimed for nothing (the API validates on save)
            policy = EgressPolicy(binding.egress)
        except ValueError as exc:
            raise SandboxRefused(f"sandbox.egress: {exc}") from None
        instance, warm = await self.pool.claim()
        try:
            await instance.apply_limits(limits)
            channel = instance.channel
            await channel.request("seed", entropy=_entropy(), time_ns=time.time_ns())
            labels = {"tenant": binding.tenant.value, "run": str(binding.run)}
            await channel.request("bind", labels=labels, env=proxy_env(binding.egress))
            # Served even with no hosts allowed: code that tries gets a 403 naming the
            # empty allow-list instead of a hang, and still nothing leaves the host.
            await instance.attach_egress(self.egress, policy, labels)
            # From here on its CPU and memory are the bound run's (ADR 0016).
            instance.start_metering()
        except BaseException:
            await instance.destroy()
            raise
        ready_ms = (time.perf_counter() - started) * 1000
        self.pool.stats.claim_ms_last = ready_ms
        return Sandbox(instance, binding, limits, warm=warm, ready_ms=ready_ms)

    async def close(self) -> None:
        await self.pool.close()
        await self._backend.close()


def proxy_env(egress: tuple[str, ...]) -> dict[str, str]:
    """What every execution of a run starts with when it may reach hosts: the relay as its
    HTTP(S) proxy (both spellings: tools read one or the other). Its own loopback stays
    direct, so code that talks to a server it started is not refused by the proxy."""
    if not egress:
        return {}
    loopback = "localhost,127.0.0.1,::1"
    return {"HTTP_PROXY": PROXY_URL, "HTTPS_PROXY": PROXY_URL, "http_proxy": PROXY_URL,
            "https_proxy": PROXY_URL, "NO_PROXY": loopback, "no_proxy": loopback}


async def _warm(instance: Instance, more: WarmUp | None = None) -> None:
    """Run the claim's own requests once, and one execution, before the instance is
    paused: under software emulation a code path the guest has not run yet costs tens of
    ms (page faults on the template's copy-on-write memory, QEMU translating the guest
    code), and it should be paid here, not by the run that claims it (~80 → ~5 ms)."""
    try:
        channel = instance.channel
        await channel.request("seed", entropy=_entropy(), time_ns=time.time_ns())
        await channel.request("bind", labels={}, env={})
        await channel.request("exec", python="pass", timeout_s=30)
        if more is not None:
            await more(channel)
    except BaseException:
        await instance.destroy()
        raise


def _entropy() -> str:
    import base64

    return base64.b64encode(os.urandom(64)).decode()
