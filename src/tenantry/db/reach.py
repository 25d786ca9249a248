"""Reaching the database at start-up, and saying in one line why not.

A command that cannot connect (no such database, nobody listening, a wrong password) tells
the operator where it tried, what Postgres answered and what to do: never a traceback, and
never the password from the URL."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

import asyncpg

from tenantry.db.outage import one_line
from tenantry.db.pool import CONNECT_TIMEOUT_SECONDS, DATABASE_DOWN
from tenantry.errors import ConfigurationError

#: What a failed connect can raise: the server not answering, or answering "no".
CONNECT_FAILURES: tuple[type[Exception], ...] = (*DATABASE_DOWN, asyncpg.PostgresError)

#: Where the URL came from, for the "what to do" half of each message.
URL_SOURCE = "--database-url / TENANTRY_DATABASE_URL"


@dataclass(frozen=True, slots=True)
class Target:
    """What a DSN points at, without its password."""

    host: str
    port: int
    database: str
    user: str
    password: str | None

    @property
    def where(self) -> str:
        place = self.host if self.host.startswith("/") else f"{self.host}:{self.port}"
        return f"Postgres at {place}"


def target(dsn: str) -> Target:
    """The host, port, database and user a ``postgresql://`` URL names (libpq's defaults
    for what it leaves out; a ``?host=`` query is a unix socket directory)."""
    parts = urlsplit(dsn)
    query = parse_qs(parts.query)
    host = parts.hostname or (query.get("host") or ["localhost"])[0]
    try:
        port = parts.port or int((query.get("port") or ["5432"])[0])
    except ValueError:
        port = 5432
    user = unquote(parts.username or (query.get("user") or ["postgres"])[0])
    database = unquote(parts.path.lstrip("/")) or (query.get("dbname") or [user])[0]
    password = unquote(parts.password) if parts.password else None
    return Target(host, port, database, user, password)


def describe_failure(dsn: str, exc: BaseException) -> str:
    """One line: where we tried, what happened, what to do."""
    t = target(dsn)
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        line = (f"{t.where} has no database {t.database!r}: create it (createdb -h {t.host} "
                f"-p {t.port} -U {t.user} {t.database}) or name an existing one in "
                f"{URL_SOURCE}")
    elif isinstance(exc, asyncpg.InvalidPasswordError):
        line = (f"{t.where} refused the password of user {t.user!r} (database "
                f"{t.database!r}): correct the password in {URL_SOURCE}")
    elif isinstance(exc, asyncpg.InvalidAuthorizationSpecificationError):
        line = (f"{t.where} refused user {t.user!r} for database {t.database!r} "
                f"({_first_line(exc)}): check the user and pg_hba.conf, or {URL_SOURCE}")
    elif isinstance(exc, asyncpg.CannotConnectNowError):
        line = (f"{t.where} is not accepting connections yet ({_first_line(exc)}): "
                f"retry once it has started")
    elif isinstance(exc, asyncpg.TooManyConnectionsError):
        line = (f"{t.where} has no free connection slots ({_first_line(exc)}): raise its "
                f"max_connections or lower TENANTRY_DB_POOL_MAX")
    elif isinstance(exc, TimeoutError):
        line = (f"cannot reach {t.where} (database {t.database!r}): no answer within "
                f"{CONNECT_TIMEOUT_SECONDS:.0f} s; check the host and port in {URL_SOURCE} "
                f"and that no firewall drops the connection")
    elif isinstance(exc, OSError):
        line = (f"cannot reach {t.where} (database {t.database!r}): {_os_reason(exc)}; is "
                f"the server running and listening there? Check {URL_SOURCE}")
    else:
        line = f"{t.where}, database {t.database!r}: {one_line(exc)}"
    return _without_secret(line, t.password)


async def check_database(dsn: str) -> None:
    """Connect once; a :class:`ConfigurationError` with :func:`describe_failure`'s line if
    that fails. Run before anything else touches the database."""
    try:
        conn = await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT_SECONDS)
    except CONNECT_FAILURES as exc:
        raise ConfigurationError(describe_failure(dsn, exc)) from None
    except ValueError as exc:  # asyncpg's own parsing of a malformed URL
        reason = _without_secret(_first_line(exc), target(dsn).password)
        raise ConfigurationError(f"{URL_SOURCE} is not a valid postgresql:// URL: "
                                 f"{reason}") from None
    await conn.close()


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if exc.strerror:
        return exc.strerror.lower()
    # asyncio joins one error per address it tried ("Multiple exceptions: ...").
    return _first_line(exc)


def _without_secret(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text
