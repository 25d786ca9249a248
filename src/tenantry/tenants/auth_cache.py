"""A short-lived cache of API key → what it grants (tenant, key, scopes, expiry), so a
request costs no authentication round trip.

Revoking a key clears the cache in the process that revoked it at once, and in every other
API process through a Postgres notification (``tenantry_keys``); the time-to-live bounds how
long a key can outlive its revocation if a notification is lost."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from tenantry.cache import BoundedCache
from tenantry.tenants.scopes import KeyGrant

CHANNEL = "tenantry_keys"


class AuthCache:
    def __init__(self, ttl_seconds: float = 5.0, max_entries: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: BoundedCache[bytes, KeyGrant] = BoundedCache(
            max_entries=max_entries, ttl_seconds=ttl_seconds, clock=clock)
        self._reading: dict[bytes, asyncio.Future[KeyGrant | None]] = {}
        self._generation = 0  # moved by clear(): a read begun before it is not cached

    def get(self, key_hash: bytes) -> KeyGrant | None:
        return self._entries.get(key_hash)

    def put(self, key_hash: bytes, tenant: KeyGrant) -> None:
        self._entries.put(key_hash, tenant)

    async def resolve(self, key_hash: bytes,
                      read: Callable[[], Awaitable[KeyGrant | None]]) -> KeyGrant | None:
        """The cached tenant, else ``read()``'s answer, cached when it found one. Requests
        for a key whose read is in flight wait for that read instead of making their own
        (an expired entry of a busy key drew one read per request in flight)."""
        cached = self.get(key_hash)
        if cached is not None:
            return cached
        reading = self._reading.get(key_hash)
        if reading is None:
            reading = asyncio.ensure_future(self._read(key_hash, read))
            self._reading[key_hash] = reading
        return await asyncio.shield(reading)

    async def _read(self, key_hash: bytes,
                    read: Callable[[], Awaitable[KeyGrant | None]]) -> KeyGrant | None:
        generation = self._generation
        try:
            tenant = await read()
        finally:
            if generation == self._generation:
                self._reading.pop(key_hash, None)
        # Not cached if the cache was cleared (a key revoked) while the read was in flight.
        if tenant is not None and generation == self._generation:
            self.put(key_hash, tenant)
        return tenant

    def clear(self, *_args: object) -> None:
        self._entries.clear()
        self._reading.clear()
        self._generation += 1
