"""Copy one tenant's rows and blobs from one cell to another, and prove the copy (ADR 0029).

The rows go table by table with binary COPY, read in one repeatable-read snapshot of the
source (the tenant is locked there: the snapshot is also what stays) and written in one
transaction of the target with triggers off, as a replica applies rows: the counters and
outboxes the triggers would keep are copied as they are. Before that transaction commits,
each table's row count and digest are computed on both sides; any difference rolls the
whole copy back. So a copy is all there and verified, or not there at all.

The tables are the catalog's, not a list: every table with a ``tenant_id`` column, so a
table added by a later migration moves without anyone remembering to add it here."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

import asyncpg

from tenantry.cells.freeze import MoveFailed, Q, ident
from tenantry.vault import MasterKey, rewrap_tenant

#: Rows are spooled in memory up to this size, then to a temporary file.
SPOOL_BYTES = 64 << 20

# The text of a row depends on these; both sides of a digest use the same.
_DIGEST_SETTINGS = (
    "SET LOCAL TimeZone = 'UTC'", "SET LOCAL DateStyle = 'ISO, MDY'",
    "SET LOCAL IntervalStyle = 'postgres'", "SET LOCAL extra_float_digits = 3",
    "SET LOCAL bytea_output = 'hex'",
)


@dataclass(frozen=True, slots=True)
class TenantTable:
    name: str
    columns: tuple[str, ...]

    @property
    def quoted(self) -> str:
        return ident(self.name)

    @property
    def column_list(self) -> str:
        return ", ".join(ident(c) for c in self.columns)


@dataclass(frozen=True, slots=True)
class Digest:
    rows: int
    digest: str  # the sum of the rows' 64-bit hashes, as text (a numeric)


async def tenant_tables(conn: asyncpg.Connection) -> list[TenantTable]:
    return [TenantTable(r["name"], tuple(r["columns"])) for r in await conn.fetch(Q.tenant_tables)]


async def same_schema(source: asyncpg.Connection, target: asyncpg.Connection) -> None:
    """Binary COPY and the digests need the same tables, columns and types on both sides:
    the same migrations, applied from the same files."""
    a, b = await _one(source, Q.schema_version), await _one(target, Q.schema_version)
    if (a["version"], a["shas"]) != (b["version"], b["shas"]):
        raise MoveFailed(f"the cells' schemas differ (migration {a['version']} here, "
                         f"{b['version']} there): upgrade both to the same release first")


async def digest(conn: asyncpg.Connection, table: TenantTable, tenant: str) -> Digest:
    row = await _one(
        conn, f"SELECT count(*) AS n, coalesce(sum(hashtextextended("
        f"ROW({table.column_list})::text, 0)::numeric), 0)::text AS d "
        f"FROM {table.quoted} WHERE tenant_id = $1", tenant)
    return Digest(int(row["n"]), str(row["d"]))


async def copy_rows(source: asyncpg.Connection, target: asyncpg.Connection, tenant: str, *,
                    rewrap: tuple[MasterKey, MasterKey] | None = None,
                    home_cell: str | None = None,
                    on_table: Callable[[str, int], None] | None = None) -> dict[str, Digest]:
    """Copy and verify every row of ``tenant``; the digests that matched, per table.

    Rows of the tenant already on the target (an earlier attempt of this move that
    committed but was not switched to) are replaced. ``rewrap`` = (source's master key,
    target's): the tenant's data key and its model accounts' keys are re-wrapped under the
    target's, after the digests matched (they are the source's until then); ``home_cell``:
    the target's name, which the tenant's row there says from then on."""
    tables = await tenant_tables(source)
    if [t.name for t in tables] != [t.name for t in await tenant_tables(target)]:
        raise MoveFailed("the cells hold different tables; upgrade both to one release")
    copied: dict[str, Digest] = {}
    async with (source.transaction(isolation="repeatable_read", readonly=True),
                target.transaction()):
        await target.execute("SET LOCAL session_replication_role = replica")
        for setting in _DIGEST_SETTINGS:
            await source.execute(setting)
            await target.execute(setting)
        for table in tables:
            await target.execute(f"DELETE FROM {table.quoted} WHERE tenant_id = $1", tenant)
            with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spooled:
                spool = cast(BinaryIO, spooled)  # a file object, as asyncpg wants
                await source.copy_from_query(
                    f"SELECT {table.column_list} FROM {table.quoted} WHERE tenant_id = $1",
                    tenant, output=spool, format="binary")
                spool.seek(0)
                await target.copy_to_table(table.name, source=spool,
                                           columns=list(table.columns), format="binary")
            here, there = await digest(source, table, tenant), await digest(target, table,
                                                                            tenant)
            if here != there:
                raise MoveFailed(
                    f"table {table.name}: {here.rows} rows (digest {here.digest}) here, "
                    f"{there.rows} (digest {there.digest}) copied; nothing was kept")
            copied[table.name] = here
            if on_table is not None:
                on_table(table.name, here.rows)
        if rewrap is not None and rewrap[0].key_id != rewrap[1].key_id:
            await rewrap_tenant(target, tenant, rewrap[0], rewrap[1])
        if home_cell is not None:
            await target.execute(Q.set_home_cell, tenant, home_cell)
    return copied


async def _one(conn: asyncpg.Connection, query: str, *args: object) -> asyncpg.Record:
    row = await conn.fetchrow(query, *args)
    assert row is not None  # an aggregate: always one row
    return row


def copy_blobs(source_root: Path, target_root: Path, tenant: str) -> int:
    """The tenant's blob folder, file by file (each written aside and renamed into place,
    as the blob store writes), each checked by SHA-256 after the copy; the files copied."""
    here, there = source_root / tenant, target_root / tenant
    if not here.is_dir():
        return 0
    there.mkdir(parents=True, exist_ok=True)
    count = 0
    for entry in sorted(os.scandir(here), key=lambda e: e.name):
        if not entry.is_file() or entry.name.startswith("."):
            continue  # a blob being written has a dot name until it is renamed
        dest = there / entry.name
        tmp = there / f".{entry.name}.move.tmp"
        shutil.copyfile(entry.path, tmp)
        os.replace(tmp, dest)
        if _sha256(Path(entry.path)) != _sha256(dest):
            raise MoveFailed(f"blob {entry.name} of tenant {tenant} did not copy intact")
        count += 1
    return count


def delete_blobs(root: Path, tenant: str) -> None:
    shutil.rmtree(root / tenant, ignore_errors=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
