"""A short-lived cache of API key → tenant, so a request costs no authentication round trip.

Revoking a key clears the cache in the process that revoked it at once, and in every other
API process through a Postgres notification (``tenantry_keys``); the time-to-live bounds how
long a key can outlive its revocation if a notification is lost."""

from __future__ import annotations

import time
from collections.abc import Callable

from tenantry.ids import TenantId

CHANNEL = "tenantry_keys"


class AuthCache:
    def __init__(self, ttl_seconds: float = 5.0, max_entries: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl_seconds
        self._max = max_entries
        self._clock = clock
        self._entries: dict[bytes, tuple[float, TenantId]] = {}

    def get(self, key_hash: bytes) -> TenantId | None:
        entry = self._entries.get(key_hash)
        if entry is None:
            return None
        if self._clock() >= entry[0]:
            del self._entries[key_hash]
            return None
        return entry[1]

    def put(self, key_hash: bytes, tenant: TenantId) -> None:
        if len(self._entries) >= self._max:
            self._entries.clear()  # bounded; rebuilding costs one query per key
        self._entries[key_hash] = (self._clock() + self._ttl, tenant)

    def clear(self, *_args: object) -> None:
        self._entries.clear()
