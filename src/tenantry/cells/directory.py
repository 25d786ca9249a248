"""The global directory (ADR 0027): its own Postgres database and migration
series, holding only what routing needs — the cells, each tenant's region, home cell and
state, and the SHA-256 of each API key. A tenant's runs, events, secrets and usage live in
its home cell and nowhere else.

Every function takes an open asyncpg connection (a router's pool, the CLI's, a move's) and
runs one statement, so a caller can put several in its own transaction. Each change that
routing reads (a state, a home cell, a revoked key, a cell's URL) is announced on
``tenantry_directory`` by a trigger at commit, and routers drop their cached routes."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlsplit

import asyncpg

from tenantry.config import ANY_REGION, CELL_NAME_RE
from tenantry.db.pool import Connection
from tenantry.db.queries import load
from tenantry.db.schema_files import Schema
from tenantry.errors import Conflict, NotFound, RegionNotServed, ValidationFailed
from tenantry.ids import TenantId

Q = load(__package__)

#: The directory's migrations: their own package, record table and advisory lock, so a
#: cell's series can never be applied to the directory's database, nor this one to a cell's.
DIRECTORY = Schema("tenantry.cells.migrations", "directory_migrations", 0x7E_4A_47_13)
#: Routers LISTEN here; a trigger notifies at each commit that changes a route.
CHANNEL = "tenantry_directory"
#: A tenant's states: ``moving`` while another engineer's move copies it (503 at the router).
STATES = ("active", "moving")
ACTIVE, MOVING = STATES


@dataclass(frozen=True, slots=True)
class Cell:
    """A complete Tenantry stack in one region, as the router reaches it."""

    name: str
    region: str
    api_url: str
    # The cell's TENANTRY_OPERATOR_TOKEN: never shown (not in the repr, logs or the CLI).
    operator_token: str = field(repr=False)
    dedicated: bool
    created_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Cell:
        return cls(row["name"], row["region"], row["api_url"], row["operator_token"],
                   row["dedicated"], row["created_at"])


@dataclass(frozen=True, slots=True)
class CellCount:
    cell: Cell
    tenants: int


@dataclass(frozen=True, slots=True)
class TenantHome:
    """Where a tenant lives and whether it may be served now."""

    tenant_id: TenantId
    region: str
    state: str
    cell: Cell

    @property
    def moving(self) -> bool:
        return self.state == MOVING


def _home(row: asyncpg.Record) -> TenantHome:
    cell = Cell(row["name"], row["cell_region"], row["api_url"], row["operator_token"],
                row["dedicated"], row["created_at"])
    return TenantHome(TenantId(row["tenant_id"]), row["region"], row["state"], cell)


def _tenant(tenant_id: TenantId | str) -> str:
    return tenant_id.value if isinstance(tenant_id, TenantId) else str(tenant_id)


# ------------------------------------------------------------------------ validation


def check_name(value: str, what: str = "cell") -> str:
    if not isinstance(value, str) or not CELL_NAME_RE.fullmatch(value):
        raise ValidationFailed(f"{what}: 1-64 characters of a-z, 0-9, '_', '-' starting "
                               f"with a letter or digit, got {value[:80]!r}")
    return value


def check_api_url(value: str) -> str:
    """``http(s)://host[:port]``: where the router forwards (no path, query or credentials,
    no whitespace or control characters)."""
    problem = f"api_url must look like http(s)://host[:port], got {value[:100]!r}"
    if not isinstance(value, str) or len(value) > 300 or not value.isprintable() \
            or any(c.isspace() for c in value):
        raise ValidationFailed(problem)
    try:
        parts = urlsplit(value)
        _ = parts.port  # a port out of range or not a number raises
    except ValueError:
        raise ValidationFailed(problem) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in (
            "", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ValidationFailed(problem)
    return value.rstrip("/")


# ------------------------------------------------------------------------ cells


async def add_cell(conn: Connection, name: str, *, region: str, api_url: str,
                   operator_token: str, dedicated: bool = False) -> Cell:
    """Register a cell; :class:`Conflict` if one of that name exists."""
    check_name(name)
    check_name(region, "region")
    url = check_api_url(api_url)
    if not operator_token or len(operator_token) > 512 or not operator_token.isprintable():
        raise ValidationFailed("operator_token: 1-512 printable characters")
    row = await conn.fetchrow(Q.insert_cell, name, region, url, operator_token, dedicated)
    if row is None:
        raise Conflict(f"a cell named {name!r} exists already")
    return Cell.from_row(row)


async def cell_named(conn: Connection, name: str) -> Cell | None:
    if not isinstance(name, str) or not CELL_NAME_RE.fullmatch(name):
        return None
    row = await conn.fetchrow(Q.cell_named, name)
    return Cell.from_row(row) if row is not None else None


async def list_cells(conn: Connection) -> list[CellCount]:
    """Every cell with how many tenants call it home, by region then name."""
    return [CellCount(Cell.from_row(r), r["tenants"]) for r in await conn.fetch(
        Q.cells_with_counts)]


async def place(conn: Connection, *, region: str | None,
                cell: str | None = None) -> Cell:
    """The cell a new tenant goes to: the named one (a dedicated cell is only ever named),
    else the region's shared cell with the fewest tenants. :class:`RegionNotServed` for a
    region with no cell, :class:`NotFound` for an unknown cell, :class:`ValidationFailed`
    for a named cell of another region than the one asked for."""
    if cell is not None:
        found = await cell_named(conn, check_name(cell))
        if found is None:
            raise NotFound(f"No cell named {cell!r}.", cell=cell)
        if region is not None and found.region not in (region, ANY_REGION):
            raise ValidationFailed(f"cell {cell!r} is in region {found.region!r}, not "
                                   f"{region!r}")
        return found
    if region is None:
        raise ValidationFailed("region: required (or name a cell)")
    row = await conn.fetchrow(Q.least_loaded_cell, check_name(region, "region"))
    if row is None:
        raise RegionNotServed(f"no cell serves region {region!r}", region=region)
    return Cell.from_row(row)


# ------------------------------------------------------------------------ tenants


async def record_tenant(conn: Connection, tenant_id: TenantId | str, *, region: str,
                        cell: str) -> None:
    """A tenant created in ``cell``; :class:`Conflict` if the directory has it already."""
    if await conn.fetchval(Q.insert_tenant, _tenant(tenant_id), region, cell) is None:
        raise Conflict("a tenant with this id already exists")


async def home_of(conn: Connection, tenant_id: TenantId | str) -> TenantHome | None:
    row = await conn.fetchrow(Q.home_of, _tenant(tenant_id))
    return _home(row) if row is not None else None


async def set_tenant_state(conn: Connection, tenant_id: TenantId | str,
                           state: str) -> None:
    """``moving``: the router answers the tenant's requests 503 ``tenant_moving`` (with
    Retry-After) from the commit on; ``active``: it forwards them again."""
    if state not in STATES:
        raise ValidationFailed(f"state must be one of {', '.join(STATES)}, got {state!r}")
    done = await conn.execute(Q.set_tenant_state, _tenant(tenant_id), state)
    if done != "UPDATE 1":
        raise NotFound("No tenant with this id in the directory.")


async def switch_home_cell(conn: Connection, tenant_id: TenantId | str,
                           cell: str) -> None:
    """The tenant's requests go to ``cell`` from the commit on (every router is told)."""
    try:
        done = await conn.execute(Q.switch_home_cell, _tenant(tenant_id), check_name(cell))
    except asyncpg.ForeignKeyViolationError:
        raise NotFound(f"No cell named {cell!r}.", cell=cell) from None
    if done != "UPDATE 1":
        raise NotFound("No tenant with this id in the directory.")


# ------------------------------------------------------------------------ API keys


async def record_api_key(conn: Connection, tenant_id: TenantId | str, *,
                         key_hash: bytes, key_id: str) -> None:
    """A key the tenant's home cell issued: the router authenticates it from now on."""
    await conn.execute(Q.insert_api_key, key_hash, key_id, _tenant(tenant_id))


async def revoke_api_key(conn: Connection, tenant_id: TenantId | str,
                         key_id: str) -> None:
    await conn.execute(Q.revoke_api_key, _tenant(tenant_id), key_id)


async def route_for_key(conn: Connection, key_hash: bytes) -> TenantHome | None:
    """The home of the tenant whose live key hashes to ``key_hash``; None: no such key."""
    row = await conn.fetchrow(Q.route_for_key, key_hash)
    return _home(row) if row is not None else None
