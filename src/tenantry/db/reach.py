"""Reaching the database at start-up, and saying in one line why not.

A command that cannot connect (no such database, nobody listening, a wrong password) tells
the operator where it tried, what Postgres answered and what to do: never a traceback, and
never the password from the URL."""

from __future__ import annotations

from dataclasses import replace

import asyncpg

from tenantry.db.dsn import Dsn, MalformedDsn, for_cluster, parse
from tenantry.db.outage import one_line
from tenantry.db.pool import CONNECT_TIMEOUT_SECONDS, DATABASE_DOWN, connect_timeout
from tenantry.errors import ConfigurationError

#: What a failed connect can raise: the server not answering, or answering "no".
CONNECT_FAILURES: tuple[type[Exception], ...] = (*DATABASE_DOWN, asyncpg.PostgresError)

#: A connect that found no host to use (as against a host that answered "no").
_NOT_ANSWERING: tuple[type[Exception], ...] = (*DATABASE_DOWN, TimeoutError)

#: Where the URL came from, for the "what to do" half of each message.
URL_SOURCE = "--database-url / TENANTRY_DATABASE_URL"


def cluster_url(url: str, source: str = URL_SOURCE) -> str:
    """:func:`~tenantry.db.dsn.for_cluster` of ``url``, or a :class:`ConfigurationError`
    naming ``source`` and saying why it cannot be read."""
    try:
        return for_cluster(url)
    except MalformedDsn as exc:
        raise ConfigurationError(f"{source} is not a valid postgresql:// URL: {exc}") from None


def target(dsn: str) -> Dsn:
    """What ``dsn`` points at (a URL that cannot be parsed: localhost, as asyncpg would fail)."""
    try:
        return parse(dsn)
    except MalformedDsn:
        return parse("postgresql://localhost")


def describe_failure(dsn: str, exc: BaseException) -> str:
    """One line: where we tried (every host of a cell), what happened, what to do."""
    t = target(dsn)
    host, port = t.hosts[0].name, t.hosts[0].port
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        line = (f"{t.where} has no database {t.database!r}: create it (createdb -h {host} "
                f"-p {port} -U {t.login} {t.database}) or name an existing one in "
                f"{URL_SOURCE}")
    elif isinstance(exc, asyncpg.InvalidPasswordError):
        line = (f"{t.where} refused the password of user {t.login!r} (database "
                f"{t.database!r}): correct the password in {URL_SOURCE}")
    elif isinstance(exc, asyncpg.InvalidAuthorizationSpecificationError):
        line = (f"{t.where} refused user {t.login!r} for database {t.database!r} "
                f"({_first_line(exc)}): check the user and pg_hba.conf, or {URL_SOURCE}")
    elif isinstance(exc, asyncpg.CannotConnectNowError):
        line = (f"{t.where} is not accepting connections yet ({_first_line(exc)}): "
                f"retry once it has started")
    elif isinstance(exc, asyncpg.TooManyConnectionsError):
        line = (f"{t.where} has no free connection slots ({_first_line(exc)}): raise its "
                f"max_connections or lower TENANTRY_DB_POOL_MAX")
    elif isinstance(exc, asyncpg.exceptions.TargetServerAttributeNotMatched):
        line = (f"no host of {t.where} is {t.target_session_attrs} (database "
                f"{t.database!r}): each answered as a standby or read-only; is a failover "
                f"under way? Check the cell's nodes (patronictl list) or {URL_SOURCE}")
    elif isinstance(exc, TimeoutError):
        line = (f"cannot reach {t.where} (database {t.database!r}): no answer within "
                f"{connect_timeout(dsn):.0f} s; check the host and port in {URL_SOURCE} "
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
    cluster_url(dsn)
    try:
        conn = await asyncpg.connect(dsn, timeout=connect_timeout(dsn))
    except _NOT_ANSWERING as exc:
        t = target(dsn)
        if len(t.hosts) > 1:  # which host said what: the one error asyncpg kept says little
            raise ConfigurationError(_without_secret(await _each_host(t), t.password)) from None
        raise ConfigurationError(describe_failure(dsn, exc)) from None
    except CONNECT_FAILURES as exc:
        raise ConfigurationError(describe_failure(dsn, exc)) from None
    except ValueError as exc:  # asyncpg's own parsing of a malformed URL
        reason = _without_secret(_first_line(exc), target(dsn).password)
        raise ConfigurationError(f"{URL_SOURCE} is not a valid postgresql:// URL: "
                                 f"{reason}") from None
    await conn.close()


async def _each_host(t: Dsn) -> str:
    """Why no host of a cell's URL would do, host by host: each is tried alone."""
    findings = []
    for host in t.hosts:
        alone = replace(t, hosts=(host,), query={k: v for k, v in t.query.items()
                                                 if k != "target_session_attrs"})
        try:
            conn = await asyncpg.connect(alone.url(), timeout=CONNECT_TIMEOUT_SECONDS)
        except TimeoutError:
            findings.append(f"{host.where}: no answer within {CONNECT_TIMEOUT_SECONDS:.0f} s")
            continue
        except OSError as exc:
            findings.append(f"{host.where}: {_os_reason(exc)}")
            continue
        except CONNECT_FAILURES as exc:
            findings.append(f"{host.where}: {_first_line(exc)}")
            continue
        try:
            standby = await conn.fetchval("SELECT pg_is_in_recovery()")
            read_only = await conn.fetchval("SHOW default_transaction_read_only") == "on"
        finally:
            await conn.close()
        findings.append(f"{host.where}: " + ("a standby (in recovery)" if standby else
                                             "read-only (default_transaction_read_only)"
                                             if read_only else "writable now"))
    return (f"no writable primary among {t.where} (database {t.database!r}): "
            + "; ".join(findings) + f". Is a failover under way? Check the cell's nodes "
            f"(patronictl list) and the hosts in {URL_SOURCE}")


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
