"""The platform's one bounded cache: least recently used entries go first past
``max_entries``, and every entry expires ``ttl_seconds`` after it was put. A per-tenant
cache without both bounds is memory a tenant can grow (one entry per server, key or name it
makes) and state that outlives its truth."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """``get`` answers None for a missing or expired entry (and forgets an expired one)."""

    __slots__ = ("_clock", "_entries", "_max", "_ttl")

    def __init__(self, *, max_entries: int, ttl_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries < 1 or ttl_seconds <= 0:
            raise ValueError("a bounded cache needs max_entries >= 1 and ttl_seconds > 0")
        self._max = max_entries
        self._ttl = ttl_seconds
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self._clock() >= entry[0]:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry[1]

    def put(self, key: K, value: V) -> V:
        self._entries[key] = (self._clock() + self._ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
        return value

    def pop(self, key: K) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def items(self) -> Iterator[tuple[K, V]]:
        """The entries not yet expired, least recently used first."""
        now = self._clock()
        return ((k, v) for k, (expires, v) in list(self._entries.items()) if now < expires)
