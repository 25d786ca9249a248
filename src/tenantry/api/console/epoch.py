"""The console's session epoch, kept in the database (migration 0017) so every API process
agrees on it: a cookie is valid only in the epoch it was issued in, and revoking sessions
moves the epoch on. Read on every console request (one indexed single-row read), so a
revocation holds at once everywhere, with no cache to wait out."""

from __future__ import annotations

from tenantry.db import Database
from tenantry.db.queries import load

Q = load(__package__, "epoch.sql")

#: The epoch of a database whose sessions were never revoked.
FIRST = 1


async def current(db: Database) -> int:
    async with db.unscoped() as conn:
        epoch: int = await conn.fetchval(Q.session_epoch)
    return epoch


async def revoke_all(db: Database) -> int:
    """End every console session issued so far (every browser, every copied cookie); the
    new epoch, which the next login's cookie carries."""
    async with db.unscoped() as conn:
        epoch: int = await conn.fetchval(Q.revoke_sessions)
    return epoch
