"""API keys: random secrets shown once; only their SHA-256 is stored."""

from __future__ import annotations

import hashlib
import secrets

KEY_PREFIX = "tnt_"


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_hash(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def display_prefix(key: str) -> str:
    """Enough of the key for a human to tell keys apart, not enough to use it."""
    return key[: len(KEY_PREFIX) + 6]
