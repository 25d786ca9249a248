"""The asyncpg pool and the one way application code touches tenant data: a transaction
with the tenant set, so row-level security checks every statement a second time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeAlias, cast

import asyncpg
import orjson
from asyncpg.pool import PoolConnectionProxy

from tenantry import __version__
from tenantry.db.dsn import MalformedDsn
from tenantry.db.dsn import parse as dsn_parse
from tenantry.db.outage import Outage
from tenantry.errors import NotFound
from tenantry.ids import TenantId

#: What every connection of this release calls itself (``pg_stat_activity.application_name``).
APPLICATION_NAME = f"tenantry/{__version__}"

#: Errors meaning "the database is not answering": callers stop and retry later, never guess.
#: In a highly available cell a failover adds its own: the primary shutting down or crashing
#: (57P01, 57P02), no host answering as the writable primary yet (a standby not promoted),
#: a write on a connection to a node that is now a standby (25006), and a connection whose
#: server went away mid-statement leaving asyncpg's protocol in a state it cannot leave
#: ("cannot switch to state …; another operation is in progress": asyncpg#1069,
#: sqlalchemy#13241) — those connections are closed rather than pooled again
#: (:meth:`Database._acquire`).
DATABASE_DOWN: tuple[type[Exception], ...] = (
    OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError, asyncpg.AdminShutdownError, asyncpg.CrashShutdownError,
    asyncpg.exceptions.TargetServerAttributeNotMatched, asyncpg.ReadOnlySQLTransactionError,
    asyncpg.InternalClientError,
)

#: How long opening one connection may take, per host of the URL (asyncpg's timeout covers
#: trying them all). asyncpg's default is 60 s: a request would hang that long on an
#: unreachable host (a dead primary, a partition) before its 503.
CONNECT_TIMEOUT_SECONDS = 5.0


def server_settings(role: str | None = None, purpose: str | None = None) -> dict[str, str]:
    """The startup parameters of a connection a process keeps outside its pools (a worker's
    session connection, the event hub's): its release in ``application_name``, as every
    pooled connection has it, and the role it acts as."""
    name = f"{APPLICATION_NAME} {purpose}" if purpose else APPLICATION_NAME
    return {"application_name": name, **({"role": role} if role else {})}


def connect_timeout(dsn: str) -> float:
    """The connect timeout for ``dsn``: :data:`CONNECT_TIMEOUT_SECONDS` for each of its hosts,
    so a dead first node cannot use up the time the next one needs to answer."""
    try:
        hosts = len(dsn_parse(dsn).hosts)
    except MalformedDsn:
        hosts = 1
    return CONNECT_TIMEOUT_SECONDS * hosts

#: A transaction Postgres rolled back to break a deadlock or a serialization conflict:
#: nothing was written, and the same work may simply be tried again.
TRANSIENT: tuple[type[Exception], ...] = (asyncpg.exceptions.TransactionRollbackError,)

#: What a transaction hands out: a pooled connection (or a plain one, in tools and tests).
Connection: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


async def _init_connection(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    await conn.set_type_codec("jsonb", encoder=_dumps, decoder=orjson.loads, schema="pg_catalog")
    await conn.set_type_codec("json", encoder=_dumps, decoder=orjson.loads, schema="pg_catalog")


class _PoolConnection(asyncpg.Connection):
    """A pooled connection whose release also undoes a ``SET ROLE``: RESET ALL leaves the
    role alone, so SQL that left the pool's role would otherwise hand the next request a
    connection acting as the bare login (powerless, but broken). Same round trip.

    A connection that ran one statement of :meth:`Database.statement` skips the reset: the
    functions called that way keep their settings transaction-local, so there is nothing to
    undo, and the reset would be a second round trip for the one statement (ADR 0023)."""

    _clean = False

    def get_reset_query(self) -> str:
        query: str = super().get_reset_query()
        return query + "\nRESET ROLE;"

    def mark_clean(self) -> None:
        self._clean = True


async def _reset(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    """The pool's reset on release (asyncpg has already rolled back an open transaction and
    dropped listeners): the reset query, unless the connection only ran a clean statement."""
    if isinstance(conn, _PoolConnection) and conn._clean:
        conn._clean = False
        return
    await conn.execute(conn.get_reset_query())


class Database:
    """Owns the pool. Built by the app/worker factory and passed down; never global."""

    def __init__(self, pool: asyncpg.Pool[asyncpg.Record], outage: Outage | None = None) -> None:
        self.pool = pool
        #: Shared with the process's other pools and LISTEN loops: one line per outage.
        self.outage = outage or Outage()

    @classmethod
    async def connect(
        cls, dsn: str, *, role: str | None = "tenantry_app", min_size: int = 2,
        max_size: int = 20, outage: Outage | None = None,
    ) -> Database:
        # The role is a startup parameter, not a SET, so the pool's RESET ALL on release
        # returns every connection to the restricted role rather than to the login user.
        # So is the time zone: the month a spend cap counts (date_trunc('month', now())
        # in the schema's functions) is the UTC calendar month, whatever the server's
        # TimeZone setting (ADR 0035).
        # application_name names the release: `tenantry migrate --status` reads which
        # releases are connected from pg_stat_activity before it changes the schema.
        settings = {"TimeZone": "UTC", "application_name": APPLICATION_NAME,
                    **({"role": role} if role else {})}
        pool: asyncpg.Pool[asyncpg.Record] = await asyncpg.create_pool(
            dsn,
            # min_size opens the first connections only. A connection floor (asyncpg's
            # min_size) would have the pool reconnect in the background during an outage,
            # logging a traceback each time; acquire reconnects on demand anyway.
            init_size=min_size,
            min_size=0,
            max_size=max_size,
            init=_init_connection,
            server_settings=settings,
            timeout=connect_timeout(dsn),
            connection_class=_PoolConnection,
            reset=_reset,
        )
        return cls(pool, outage)

    async def close(self) -> None:
        await self.pool.close()

    @asynccontextmanager
    async def tenant_tx(self, tenant: TenantId) -> AsyncIterator[Connection]:
        """A transaction that acts for ``tenant``: RLS shows it that tenant's rows only."""
        async with self._acquire() as conn, conn.transaction():
            await conn.execute("SELECT set_config('tenantry.tenant_id', $1, true)", tenant.value)
            yield conn

    async def tenant_row(self, tenant: TenantId, query: str, *args: Any,
                         missing: str) -> asyncpg.Record:
        """The one row ``query`` finds for ``tenant`` (its ``$1`` is the tenant id, then
        ``args``), read in the tenant's transaction; :class:`NotFound` (``missing``) if none."""
        async with self.tenant_tx(tenant) as conn:
            row: asyncpg.Record | None = await conn.fetchrow(query, tenant.value, *args)
        if row is None:
            raise NotFound(missing)
        return row

    async def statement(self, query: str, *args: Any) -> asyncpg.Record | None:
        """The row of one statement that leaves nothing on its connection, in an implicit
        transaction: one round trip, and none to reset the connection after it. Only for
        a function that sets the tenant itself (``set_config('tenantry.tenant_id', ...,
        true)`` first, then runs as the caller, so row-level security checks every row it
        touches), or a SECURITY DEFINER function for the cross-tenant entry points that
        :meth:`unscoped` serves (no tenant at all)."""
        async with self._acquire() as conn:
            row: asyncpg.Record | None = await conn.fetchrow(query, *args)
            # The pool hands out proxies of _PoolConnection; the proxy forwards the call.
            cast("_PoolConnection", conn).mark_clean()
        return row

    async def statement_rows(self, query: str, *args: Any) -> list[asyncpg.Record]:
        """Every row of one such statement (as :meth:`statement`)."""
        async with self._acquire() as conn:
            rows: list[asyncpg.Record] = await conn.fetch(query, *args)
            cast("_PoolConnection", conn).mark_clean()
        return rows

    @asynccontextmanager
    async def unscoped(self) -> AsyncIterator[Connection]:
        """A connection with no tenant set: RLS shows it no tenant rows at all. For the
        few cross-tenant entry points that go through SECURITY DEFINER functions."""
        async with self._acquire() as conn:
            yield conn

    @asynccontextmanager
    async def _acquire(self) -> AsyncIterator[Connection]:
        """A pooled connection; a failure to get one is noted on the outage (and raised).
        The database has answered again only when work begun after the outage was seen
        succeeds — not when the pool hands out an idle connection to a server now gone."""
        started = self.outage.now()
        try:
            conn = await self.pool.acquire()
        except DATABASE_DOWN as exc:
            self.outage.failed("connect", exc)
            raise
        broken = False
        try:
            yield conn
            self.outage.answered(started)
        except (asyncpg.ReadOnlySQLTransactionError, asyncpg.InternalClientError):
            # Connected to the primary of before a failover, now a standby: every write
            # on this connection would fail; a new one finds the new primary. Or the
            # connection's protocol is stuck mid-operation (its server went away): no
            # statement can run on it again.
            broken = True
            raise
        finally:
            if broken or conn.is_in_transaction():
                # Left inside a transaction: its task was cancelled while the transaction
                # ended (a second cancel at shutdown cuts the ROLLBACK short). Resetting it
                # would need the round trip that was just cut short, and asyncpg logs it as
                # an error; closed instead, the server rolls it back, and the pool opens a
                # fresh connection when one is next needed.
                conn.terminate()
            await self.pool.release(conn)
