"""What `tenantry migrate --status` and the console say of releases (docs/how-to/upgrade.md):
the code's release, the schema's, what is connected by release, what is pending, whether
applying it is safe with that fleet, and whether a contract step is due and safe.

Read on the owner's connection (:func:`read_status`: any database, of any release, even
one never migrated) or through the console's definer function (:func:`console_status`);
both are judged by :func:`assess`."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from tenantry import __version__
from tenantry.db.fleet import read_fleet
from tenantry.db.migrate import Recorded, existing_objects, newer_than_code, recorded, routines_due
from tenantry.db.outage import one_line
from tenantry.db.pool import DATABASE_DOWN, Database
from tenantry.db.release import (
    Connected,
    Fleet,
    Release,
    describe_all,
    line_text,
    oldest_served,
    served_text,
    serves,
)
from tenantry.db.schema_files import CELL, Schema, available, contract_steps, routines

_CONSOLE = "SELECT kind, name, detail, n FROM tenantry_console_releases()"


@dataclass(frozen=True, slots=True)
class Status:
    code: Release
    schema: Release | None  # the newest release that migrated it; None: never migrated
    contracted: Release | None  # the newest release whose contract steps it has
    newer: str | None  # the line saying the database is of a newer release than the code
    fleet: Fleet
    migrations: list[str]  # pending, by label
    routines: list[str]  # pending (changed or missing), by name
    contract: list[str]  # contract steps not applied, by label
    missing: list[str]  # routines whose function, view or trigger the database lacks

    @property
    def pending(self) -> bool:
        return bool(self.migrations or self.routines)

    @property
    def left_behind(self) -> list[Connected]:
        """Connected releases that the code's schema does not serve."""
        return self.fleet.older_than(oldest_served(self.code))

    @property
    def holding_contract(self) -> list[Connected]:
        """Connected releases older than the code's line: a contract step waits for them."""
        return self.fleet.older_than(self.code.line)

    def lines(self) -> list[str]:
        """The report of `tenantry migrate --status`, one fact a line."""
        schema = ("never migrated" if self.schema is None
                  else f"release {self.schema}'s (the newest release that migrated it)")
        if self.contracted is not None:
            schema += (f"; contracted by {self.contracted}: serves no release before "
                       f"{line_text(self.contracted.line)}")
        shown = [f"code: release {self.code}", f"schema: {schema}",
                 f"connected: {self.fleet.describe()}"]
        if self.newer is not None:
            return [*shown, f"migrate: refused: {self.newer}; run the 'tenantry migrate "
                            "--status' of that release"]
        return [*shown, f"pending: {self._pending()}", f"migrate: {self._migrate()}",
                f"contract: {self._contract()}"]

    def summary(self) -> str:
        """The console's one line."""
        head = (f"Release {self.code}; schema "
                + ("never migrated" if self.schema is None else f"{self.schema}'s"))
        if self.newer is not None:
            return f"{head}: {self.newer}. Connected: {self.fleet.describe()}."
        state = (f"{self._pending()} pending ({self._migrate()})" if self.pending
                 else "current")
        return (f"{head}, {state}. Connected: {self.fleet.describe()}. "
                f"Contract: {self._contract()}.")

    def _pending(self) -> str:
        parts = []
        if self.migrations:
            parts.append(f"{len(self.migrations)} migration(s) ({', '.join(self.migrations)})")
        if self.routines:
            parts.append(f"{len(self.routines)} routine(s) ({', '.join(self.routines)})")
        return ", ".join(parts) or "nothing"

    def _migrate(self) -> str:
        if not self.pending:
            return "nothing to apply"
        if self.left_behind:
            return (f"NOT safe: {describe_all(self.left_behind)} connected, and release "
                    f"{self.code}'s schema serves releases {served_text(self.code)} only; "
                    "stop or upgrade those processes first")
        return (f"safe with what is connected (release {self.code}'s schema serves "
                f"releases {served_text(self.code)}): run 'tenantry migrate'")

    def _contract(self) -> str:
        if not self.contract:
            return "no step due"
        due = f"{len(self.contract)} step(s) due ({', '.join(self.contract)})"
        if self.pending:
            return f"{due}, after 'tenantry migrate'"
        if self.holding_contract:
            return (f"{due}; not yet: {describe_all(self.holding_contract)} connected, and "
                    f"the steps remove what releases before {line_text(self.code.line)} use")
        return f"{due}; safe now: run 'tenantry migrate --contract'"


def assess(code: Release, found: Recorded, fleet: Fleet, existing: set[tuple[str, str]],
           schema: Schema = CELL) -> Status:
    return Status(
        code, found.release, found.contracted_by, newer_than_code(found, schema, code), fleet,
        [m.label for m in available(schema) if m.version not in found.migrations],
        [r.name for r in routines_due(found, existing, routines(schema))],
        [s.label for s in contract_steps(schema) if s.version not in found.contract],
        [r.name for r in routines(schema) if not set(r.objects) <= existing])


def behind(code: Release, schema: Release | None, contracted: Release | None,
           migrations: int, missing: list[str]) -> str | None:
    """Why release ``code`` may not serve the database, in one line, or None: a schema of a
    release that no longer serves this one (too new: db/release.py's window; or contracted
    by a newer release, which removed what this one uses), pending migrations, routines
    whose function, view or trigger is missing, or a schema of an older release line (its
    routines are not this release's). A routine whose text merely differs may be the next
    release's, during a rolling upgrade: not refused. What a process refuses to start on
    (bootstrap/database.py) and what makes a serving one unready (``/readyz``)."""
    if schema is not None and schema.line > code.line and not serves(schema, code):
        return (f"the database's schema is release {schema}'s, which serves releases "
                f"{served_text(schema)}; this is release {code}: run a release the "
                "database serves")
    if contracted is not None and contracted.line > code.line:
        return (f"the database's schema is release {schema}'s, contracted by {contracted}: "
                f"what releases before {line_text(contracted.line)} use is gone; this is "
                f"release {code}: run a release the database serves")
    what = f"the database's schema is release {schema}'s, this is {code}"
    if migrations:
        # Within one release line (a development build) the releases say nothing more.
        return (f"{migrations} migration(s) pending; run 'tenantry migrate'"
                + (f" ({what})" if schema is not None and schema.line != code.line else ""))
    if missing:
        shown = ", ".join(missing[:3]) + (", …" if len(missing) > 3 else "")
        return f"{len(missing)} routine(s) missing ({shown}); run 'tenantry migrate'"
    if schema is not None and schema.line < code.line:
        return (f"{what}: run this release's 'tenantry migrate' first (release "
                f"{line_text(schema.line)}'s processes serve it until then)")
    return None


async def serving_refusals(db: Database) -> list[str]:
    """``/readyz``'s database check, through the console's pool (:func:`console_status`):
    the database answers, and this release may serve its schema (:func:`behind`)."""
    try:
        status = await console_status(db)
    except DATABASE_DOWN as exc:
        db.outage.failed("readiness check", exc)
        return [f"database: not answering ({one_line(exc)})"]
    except asyncpg.PostgresError as exc:
        return [f"database: its schema's status is unreadable ({one_line(exc)})"]
    reason = behind(status.code, status.schema, status.contracted, len(status.migrations),
                    status.missing)
    return [f"schema: {reason}"] if reason else []


async def read_status(conn: asyncpg.Connection, schema: Schema = CELL,
                      release: str = __version__) -> Status:
    """On the owner's connection (the migrator's): whatever the database's release."""
    return assess(Release.parse(release), await recorded(conn, schema),
                  await read_fleet(conn), await existing_objects(conn), schema)


async def console_status(db: Database, release: str = __version__) -> Status:
    """Through the console's pool: tenantry_console_releases() and the catalog."""
    async with db.unscoped() as conn:
        rows = await conn.fetch(_CONSOLE)
        existing = await existing_objects(conn)
    migrations: dict[int, str] = {}
    names: dict[str, str] = {}
    contract: dict[int, str] = {}
    releases: list[Release] = []
    contracted: list[Release] = []
    connections: list[tuple[str | None, int]] = []
    workers: list[tuple[str, int]] = []
    for kind, name, detail, n in rows:
        if kind == "connection":
            connections.append((name, n))
        elif kind == "worker":
            workers.append((name, n))
        elif kind == "migration":
            migrations[int(name)] = detail
        elif kind == "routine":
            names[name] = detail
        elif kind == "contract":
            contract[int(name)] = detail
        elif kind == "release":
            releases.append(Release.parse(name))
            if detail is not None:  # when it contracted the database
                contracted.append(releases[-1])
    found = Recorded(migrations, names, contract, tuple(releases), tuple(contracted))
    return assess(Release.parse(release), found, Fleet.of(connections, workers), existing)
