"""One JSON codec for the platform (orjson), and the canonical form used for digests."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def canonical(value: Any) -> bytes:
    """Sorted keys, no whitespace: equal values give equal bytes (for request digests)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def digest(value: Any) -> bytes:
    return hashlib.sha256(canonical(value)).digest()


loads = orjson.loads
