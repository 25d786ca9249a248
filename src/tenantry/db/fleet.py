"""Reading what is connected to a cell's database, by release (:class:`Fleet`), on the
owner's connection: what the migrator's window check and `tenantry migrate --status`
judge (db/release.py)."""

from __future__ import annotations

from tenantry.db.pool import Connection
from tenantry.db.queries import load
from tenantry.db.release import Fleet

Q = load(__package__, "fleet.sql")


async def read_fleet(conn: Connection) -> Fleet:
    """Every other session of the database by the release it names, and the live workers
    by the release they registered (none on a database without ``worker_sessions``)."""
    connections = [(r["name"], r["sessions"]) for r in await conn.fetch(Q.connections)]
    workers: list[tuple[str, int]] = []
    if await conn.fetchval("SELECT to_regclass('worker_sessions') IS NOT NULL"):
        workers = [(r["release"], r["workers"]) for r in await conn.fetch(Q.workers)]
    return Fleet.of(connections, workers)
