"""The operator token, rotatable live (ADR 0043 §9, migration 0057).

The tokens that open ``/admin/v1`` and the console's login are rows in the database, kept
as SHA-256 hashes; a process's configured token (``TENANTRY_OPERATOR_TOKEN`` or the data
dir's file) is seeded at start (routine ``operator_token_seed.sql``: a token the database
does not know becomes the only one, as changing the configuration always did; a known one
changes nothing, so a token a rotation retired stays retired). ``rotate`` makes a new
token and ends the others after an overlap: every API process accepts the new one at once
and refuses the old ones when the overlap ends, with no restart.

A check is one definer call, its answer cached for :data:`CACHE_SECONDS` per token with the
token's own end, so a token never outlives its end by the cache. What the database last
said of a token is kept for :data:`LAST_KNOWN_SECONDS` more, for what must answer while it
does not (``/metrics`` during an outage): no token can be issued or retired meanwhile."""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime

from tenantry.cache import BoundedCache
from tenantry.db import Database
from tenantry.db.queries import load

Q = load(__package__, "operator_tokens.sql")

CACHE_SECONDS = 5.0
LAST_KNOWN_SECONDS = 3600.0
PREFIX = "op_"
#: The longest overlap a rotation may give the tokens it replaces (as API keys' rotation).
MAX_OVERLAP_SECONDS = 7 * 24 * 3600
_NO_END = datetime.max.replace(tzinfo=UTC)


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(32)


class OperatorTokens:
    """Which operator tokens are in force, as one API process sees them."""

    def __init__(self, db: Database, configured: str | None) -> None:
        self._db = db
        self._configured = configured
        self._seen: BoundedCache[bytes, datetime] = BoundedCache(
            max_entries=64, ttl_seconds=CACHE_SECONDS)
        self._last_known: BoundedCache[bytes, datetime] = BoundedCache(
            max_entries=64, ttl_seconds=LAST_KNOWN_SECONDS)

    async def seed(self) -> bool:
        """Record the configured token (at start): whether it is in force."""
        if not self._configured:
            return False
        row = await self._db.statement(Q.seed, digest(self._configured))
        return row is not None and bool(row["in_force"])

    async def valid(self, token: str) -> bool:
        if not token:
            return False
        key = digest(token)
        until = self._seen.get(key)
        if until is None:
            row = await self._db.statement(Q.valid_until, key)
            if row is None:
                self._last_known.pop(key)
                return False
            until = self._seen.put(key, row["expires_at"] or _NO_END)
            self._last_known.put(key, until)
        return until > datetime.now(UTC)

    def last_known(self, token: str) -> bool:
        """While the database does not answer: whether the token was in force when it last
        did, within :data:`LAST_KNOWN_SECONDS`, and still is by its own end."""
        until = self._last_known.get(digest(token)) if token else None
        return until is not None and until > datetime.now(UTC)

    def forget(self) -> None:
        """Drop what this process remembers (as :data:`CACHE_SECONDS` passing does)."""
        self._seen = BoundedCache(max_entries=64, ttl_seconds=CACHE_SECONDS)
        self._last_known = BoundedCache(max_entries=64, ttl_seconds=LAST_KNOWN_SECONDS)

    async def rotate(self, overlap_seconds: int, *, by: str) -> tuple[str, datetime]:
        """A new token (shown once) and when the ones it replaces stop working."""
        token = new_token()
        row = await self._db.statement(Q.rotate, digest(token), overlap_seconds, by)
        assert row is not None
        ends: datetime = row["others_end"]
        return token, ends
