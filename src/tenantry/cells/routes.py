"""The router's view of the directory: a small pool, API keys and tenants resolved to their
home cell and cached, and a LISTEN on ``tenantry_directory`` that drops the cache whenever
a route changes (a key revoked, a tenant moving or moved, a cell's URL changed).

Only found routes are cached (a new key works at once); an entry lives at most ``ttl``
seconds, which bounds how stale a route can be if a notification is lost; and the cache is
dropped whenever the LISTEN connection is (re)opened, since notifications sent while it was
down are lost."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import asyncpg

from tenantry.cache import BoundedCache
from tenantry.cells import directory
from tenantry.cells.directory import TenantHome
from tenantry.db import DATABASE_DOWN
from tenantry.errors import Unauthorized
from tenantry.ids import TenantId
from tenantry.tenants.keys import KEY_PREFIX, key_hash

log = logging.getLogger(__name__)

INVALID_KEY = "Missing or invalid API key."
_LISTEN_FAILURES: tuple[type[BaseException], ...] = (*DATABASE_DOWN, asyncpg.PostgresError)
_PROBE_FAILURES: tuple[type[BaseException], ...] = (TimeoutError, *DATABASE_DOWN)
#: Seconds between attempts to reopen a lost LISTEN connection.
RELISTEN_SECONDS = 0.5


class RouteCache:
    """Keys (their SHA-256) and tenant ids to homes, each for at most ``ttl`` seconds."""

    def __init__(self, ttl_seconds: float = 5.0, max_entries: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: BoundedCache[bytes | str, TenantHome] = BoundedCache(
            max_entries=max_entries, ttl_seconds=ttl_seconds, clock=clock)
        self.generation = 0  # moved by clear(): a read begun before it is not cached

    def get(self, key: bytes | str) -> TenantHome | None:
        return self._entries.get(key)

    def put(self, key: bytes | str, home: TenantHome, generation: int) -> None:
        if generation != self.generation:
            return  # the directory changed while this was read: it may be stale already
        self._entries.put(key, home)

    def clear(self, *_args: object) -> None:
        self._entries.clear()
        self.generation += 1

    def __len__(self) -> int:
        return len(self._entries)


class Routes:
    """Open with :meth:`open` for as long as the router serves."""

    def __init__(self, pool: asyncpg.Pool, dsn: str, cache: RouteCache) -> None:
        self.pool = pool
        self.cache = cache
        self._dsn = dsn
        self._listening = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    @asynccontextmanager
    async def open(cls, dsn: str, *, ttl_seconds: float = 5.0,
                   pool_max: int = 10) -> AsyncIterator[Routes]:
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=pool_max)
        routes = cls(pool, dsn, RouteCache(ttl_seconds))
        routes._task = asyncio.create_task(routes._listen(), name="directory-listen")
        try:
            yield routes
        finally:
            routes._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await routes._task
            await pool.close()

    async def wait_listening(self) -> None:
        await self._listening.wait()

    async def for_key(self, api_key: str) -> TenantHome:
        """The home of the tenant ``api_key`` belongs to; :class:`Unauthorized` for an
        unknown or revoked key (they look the same)."""
        if not api_key.startswith(KEY_PREFIX) or len(api_key) > 200:
            raise Unauthorized(INVALID_KEY)
        digest = key_hash(api_key)
        home = self.cache.get(digest)
        if home is None:
            generation = self.cache.generation
            async with self.pool.acquire() as conn:
                home = await directory.route_for_key(conn, digest)
            if home is None:
                raise Unauthorized(INVALID_KEY)
            self.cache.put(digest, home, generation)
        return home

    async def for_tenant(self, tenant_id: TenantId) -> TenantHome | None:
        home = self.cache.get(tenant_id.value)
        if home is None:
            generation = self.cache.generation
            async with self.pool.acquire() as conn:
                home = await directory.home_of(conn, tenant_id)
            if home is not None:
                self.cache.put(tenant_id.value, home, generation)
        return home

    async def _listen(self) -> None:
        while True:
            lost = asyncio.Event()
            try:
                conn = await asyncpg.connect(self._dsn)
            except _LISTEN_FAILURES as exc:  # keep trying; meanwhile the TTL bounds staleness
                self._listening.clear()
                log.warning("directory LISTEN connection failed: %s", exc)
                await asyncio.sleep(RELISTEN_SECONDS)
                continue
            try:
                conn.add_termination_listener(lambda _c, lost=lost: lost.set())
                await conn.add_listener(directory.CHANNEL, self.cache.clear)
                # Whatever changed while nobody listened is unknown: start from nothing.
                self.cache.clear()
                self._listening.set()
                while not lost.is_set() and not conn.is_closed():
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(5):
                            await lost.wait()
                    if not lost.is_set():  # a dead peer does not always close the socket
                        try:
                            async with asyncio.timeout(5):
                                await conn.execute("SELECT 1")
                        except _PROBE_FAILURES:
                            break
            except _LISTEN_FAILURES as exc:
                log.warning("directory LISTEN connection lost: %s", exc)
            finally:
                self._listening.clear()
                self.cache.clear()
                conn.terminate()
            await asyncio.sleep(RELISTEN_SECONDS)
