"""The platform's one bounded cache (tenantry/cache.py): entries and time both bound it."""

from __future__ import annotations

import pytest

from tenantry.cache import BoundedCache


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_least_recently_used_entry_goes_first_past_the_bound() -> None:
    cache: BoundedCache[str, int] = BoundedCache(max_entries=2, ttl_seconds=60)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the more recently used
    cache.put("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)
    assert len(cache) == 2


def test_an_entry_expires_its_ttl_after_it_was_put() -> None:
    clock = Clock()
    cache: BoundedCache[str, int] = BoundedCache(max_entries=10, ttl_seconds=5, clock=clock)
    cache.put("a", 1)
    clock.now = 4.9
    assert cache.get("a") == 1  # reading does not extend it...
    clock.now = 5.0
    assert cache.get("a") is None and len(cache) == 0
    cache.put("a", 2)  # ... putting again does
    clock.now = 9.9
    assert list(cache.items()) == [("a", 2)]


def test_a_cache_without_bounds_cannot_be_made() -> None:
    with pytest.raises(ValueError, match="bounded"):
        BoundedCache(max_entries=0, ttl_seconds=1)
    with pytest.raises(ValueError, match="bounded"):
        BoundedCache(max_entries=1, ttl_seconds=0)
