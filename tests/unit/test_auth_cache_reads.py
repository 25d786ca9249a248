"""The API-key cache under load: concurrent requests for a key not cached share one read,
and a read that a revocation overtook is not cached."""

from __future__ import annotations

import asyncio

from tenantry.ids import TenantId
from tenantry.tenants.auth_cache import AuthCache

TENANT = TenantId("acme")


class SlowRead:
    """A key lookup that answers when told to, counting how often it was asked."""

    def __init__(self) -> None:
        self.calls = 0
        self.started = asyncio.Event()
        self.answer = asyncio.Event()

    async def __call__(self) -> TenantId | None:
        self.calls += 1
        self.started.set()
        await self.answer.wait()
        return TENANT


async def test_concurrent_misses_share_one_read_and_the_answer_is_cached() -> None:
    cache, read = AuthCache(), SlowRead()
    waiting = [asyncio.create_task(cache.resolve(b"key", read)) for _ in range(20)]
    await read.started.wait()
    read.answer.set()
    assert await asyncio.gather(*waiting) == [TENANT] * 20
    assert read.calls == 1
    assert cache.get(b"key") == TENANT


async def test_a_read_overtaken_by_a_revocation_is_not_cached() -> None:
    cache, read = AuthCache(), SlowRead()
    first = asyncio.create_task(cache.resolve(b"key", read))
    await read.started.wait()
    cache.clear()  # a key was revoked while the read was in flight
    read.answer.set()
    assert await first == TENANT  # answered as it was when the request came
    assert cache.get(b"key") is None  # but the next request reads again
    await cache.resolve(b"key", read)
    assert read.calls == 2
