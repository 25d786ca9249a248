"""One JSON codec for the platform (orjson), and the canonical form used for digests."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import re2


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def canonical(value: Any) -> bytes:
    """Sorted keys, no whitespace: equal values give equal bytes (for request digests)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def digest(value: Any) -> bytes:
    return hashlib.sha256(canonical(value)).digest()


loads = orjson.loads


class JsonTooDense(ValueError):
    """An untrusted document packs more JSON values into its bytes than any honest answer
    needs: parsed, it would cost tens of times its size in memory and CPU."""


#: Untrusted documents up to this size are parsed as they are: at worst a few MiB of objects.
DENSITY_CHECKED_ABOVE = 64 * 1024
#: Above it, the values (containers, and the members after commas) a document may hold: one
#: per 8 bytes on average. Parsed, a value costs 30-200 bytes (an int, a str, a dict), so this
#: keeps a document's parsed form within about fifteen times its size, and its parsing time
#: near a plain text's, where ``[[],[],…]`` or ``["a","a",…]`` cost 25-35 times its size and
#: a few hundred milliseconds of the event loop per MiB. Records, embeddings and text pass.
BYTES_PER_VALUE = 8

_SCAN_OPTIONS = re2.Options()
_SCAN_OPTIONS.log_errors = False
# RE2, not re: over hostile bytes (an unterminated string of escaped quotes) Python's
# backtracking engine is quadratic; RE2 is linear.
_STRING = re2.compile(rb'"(?:[^"\\]|\\.)*"', _SCAN_OPTIONS)


def loads_untrusted(data: bytes) -> Any:
    """``loads`` for a document from a host a tenant controls (a tool server's answer):
    refuses one denser than :data:`BYTES_PER_VALUE` with :class:`JsonTooDense` before
    parsing it. Nesting is bounded by orjson itself (1,024 levels, a JSONDecodeError)."""
    if len(data) > DENSITY_CHECKED_ABOVE:
        structure = _STRING.sub(b'""', data)  # what strings contain is not structure
        values = structure.count(b"[") + structure.count(b"{") + structure.count(b",")
        if values > len(data) // BYTES_PER_VALUE:
            raise JsonTooDense(f"{values} JSON values in {len(data)} bytes (at most one per "
                               f"{BYTES_PER_VALUE} bytes)")
    return orjson.loads(data)
