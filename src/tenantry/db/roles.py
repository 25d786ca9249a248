"""The database roles the processes use (docs/decisions/0011-database-roles.md), and the
start-up check that says loudly when a login holds more than it should."""

from __future__ import annotations

import logging
from urllib.parse import quote, urlsplit, urlunsplit

from tenantry.db.pool import Connection
from tenantry.db.queries import load

log = logging.getLogger(__name__)
Q = load(__package__, "roles.sql")

#: The privileges on tenant data (NOLOGIN; a pool switches to it by its startup `role`).
APP_ROLE = "tenantry_app"
#: The only role that may call the console's cross-tenant functions (NOLOGIN).
CONSOLE_ROLE = "tenantry_console"
#: The API's and workers' login: NOINHERIT, no privileges of its own, member of APP_ROLE.
LOGIN_ROLE = "tenantry_login"
#: The console pool's login: NOINHERIT, member of CONSOLE_ROLE only.
CONSOLE_LOGIN_ROLE = "tenantry_console_login"


def with_user(dsn: str, user: str) -> str:
    """``dsn`` logging in as ``user`` (and no password): for a cluster that trusts its
    socket, such as the embedded one."""
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{quote(user, safe='')}@{host}"))


async def login_warnings(conn: Connection, *, console: bool = False) -> list[str]:
    """What is wrong with this connection's login for a process serving tenants: a
    superuser or BYPASSRLS login can leave the pool's role (SET ROLE NONE) and read every
    tenant; a tenant pool's login that may become the console role reaches every tenant
    through the console's functions. Empty when the login is as migration 0015 makes it."""
    row = await conn.fetchrow(Q.login_powers)
    if row is None:
        return []
    login = row["login"]
    found = []
    if row["superuser"]:
        found.append(f"the database login {login!r} is a superuser")
    elif row["bypass_rls"]:
        found.append(f"the database login {login!r} has BYPASSRLS")
    elif row["console"] and not console:
        found.append(f"the database login {login!r} may become {CONSOLE_ROLE}")
    return found


def warn(problems: list[str], what: str) -> None:
    """One loud line per problem: the process still starts (CI's Postgres is a trusted
    superuser), but row-level security is then the only wall between tenants."""
    for problem in problems:
        log.warning(
            "%s: %s: a statement that leaves the pool's role (SET ROLE NONE) is not held by "
            "row-level security; log in as %s (see docs/reference/database-roles.md)",
            what, problem, LOGIN_ROLE if what != "console" else CONSOLE_LOGIN_ROLE,
        )
