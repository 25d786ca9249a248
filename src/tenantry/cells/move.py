"""Moving a tenant from its home cell to another (ADR 0029).

One move goes through phases kept in the directory, so a move stopped anywhere (the
operator's laptop closed, a cell down) is resumed or rolled back from where it was:

``draining``  the directory says the tenant is moving (the router answers 503 with
              Retry-After); its home cell admits nothing of it and hands its runs back
              to the queue at their next step; once none holds a lease, the tenant is
              locked there.
``copying``   every row of the tenant is copied to the target cell and verified (count
              and digest per table) in the target's one transaction; keys re-wrapped if
              the cells' master keys differ; its blobs copied and checked.
``switched``  the directory points at the target (this commit is the point of no return;
              before it, the tenant still lives in its home cell and a rollback undoes
              everything); the target runs it; the source's copy is deleted.
``done``      nothing of the tenant is left in the source cell.

Nothing runs in two cells at once: the source is locked before the copy, and the target
does not claim the tenant's runs until the directory points at it."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path

import asyncpg

from tenantry.cells import copy, directory, freeze
from tenantry.cells.freeze import Frozen, MoveFailed
from tenantry.db.pool import server_settings
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound, ValidationFailed
from tenantry.vault import MasterKey

Q = load(__package__, "moves.sql")


class Phase(StrEnum):
    DRAINING = "draining"
    COPYING = "copying"
    SWITCHED = "switched"
    DONE = "done"
    ROLLED_BACK = "rolled_back"


OPEN = (Phase.DRAINING, Phase.COPYING, Phase.SWITCHED)


@dataclass(frozen=True, slots=True)
class Move:
    move_id: uuid.UUID
    tenant_id: str
    source: str
    target: str
    phase: Phase
    rows_copied: int | None
    blobs_copied: int | None
    detail: str | None
    started_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: asyncpg.Record) -> Move:
        return cls(row["move_id"], row["tenant_id"], row["source"], row["target"],
                   Phase(row["phase"]), row["rows_copied"], row["blobs_copied"],
                   row["detail"], row["started_at"], row["updated_at"])


@dataclass(frozen=True, slots=True)
class CellAccess:
    """What a move needs of one cell: its database on the owner login, its blob folder."""

    name: str
    region: str
    database_url: str
    blob_dir: Path | None


@dataclass(frozen=True, slots=True)
class MoveSettings:
    #: How long the drain waits for the tenant's runs to reach a step's end. A step is
    #: bounded by the model and tool timeouts; an activity by its own timeout.
    drain_seconds: float = 600.0


#: ``(what, done, total)``: a step of the move and how far along it is.
Progress = Callable[[str, int, int], None]


def _quiet(_what: str, _done: int, _total: int) -> None:
    pass


class Mover:
    """Drives moves on a connection to the directory. ``master_keys`` maps cell names to
    their master keys, for cells whose keys differ (the tenant's data key is re-wrapped);
    cells sharing one key need none."""

    def __init__(self, directory_conn: asyncpg.Connection, *,
                 master_keys: Mapping[str, MasterKey] | None = None,
                 settings: MoveSettings | None = None, progress: Progress = _quiet) -> None:
        self.dir = directory_conn
        self.keys = dict(master_keys or {})
        self.settings = settings or MoveSettings()
        self.progress = progress

    async def begin(self, tenant: str, to: str) -> Move:
        """Check the move can be made and record it (phase draining); the tenant is
        refused by the router from here on."""
        home = await directory.home_of(self.dir, tenant)
        if home is None:
            raise NotFound(f"No tenant {tenant!r} in the directory.")
        target = await directory.cell_named(self.dir, to)
        if target is None:
            raise NotFound(f"No cell named {to!r} in the directory.")
        if home.cell.name == to:
            raise ValidationFailed(f"Tenant {tenant!r} already lives in cell {to!r}.")
        if target.region != home.region:
            raise ValidationFailed(
                f"Cell {to!r} serves region {target.region!r}; tenant {tenant!r} is in "
                f"region {home.region!r}, and its data stays in its region.")
        for name in (home.cell.name, to):  # both must be reachable by a move
            await self._access(name)
        open_move = await self.dir.fetchrow(Q.open_move_of, tenant)
        if open_move is not None:
            raise Conflict(f"Tenant {tenant!r} is already being moved (move "
                           f"{open_move['move_id']}); resume it or roll it back.")
        async with self.dir.transaction():
            row = await self.dir.fetchrow(Q.insert_move, uuid.uuid4(), tenant, home.cell.name,
                                          to)
            await directory.set_tenant_state(self.dir, tenant, "moving")
        assert row is not None
        return Move.of(row)

    async def move(self, tenant: str, to: str) -> Move:
        return await self.resume(await self.begin(tenant, to))

    async def get(self, move_id: uuid.UUID) -> Move:
        row = await self.dir.fetchrow(Q.move_by_id, move_id)
        if row is None:
            raise NotFound(f"No move {move_id}.")
        return Move.of(row)

    async def resume(self, move: Move) -> Move:
        """Carry the move on from its recorded phase to ``done``."""
        if move.phase not in OPEN:
            raise Conflict(f"Move {move.move_id} is {move.phase.value}; nothing to resume.")
        source, target = await self._access(move.source), await self._access(move.target)
        try:
            dst = await _connect(target)
            try:
                if move.phase is not Phase.SWITCHED:
                    src = await _connect(source)
                    try:
                        if move.phase is Phase.DRAINING:
                            await self._drain(move, src, dst)
                            move = await self._set_phase(move, Phase.COPYING)
                        move = await self._copy(move, source, target, src, dst)
                    finally:
                        await src.close()
                await self._resume_there(move, dst)
            finally:
                await dst.close()
            await self._clean_source(move, source)
            return await self._set_phase(move, Phase.DONE)
        except MoveFailed as exc:
            await self.dir.execute(Q.set_detail, move.move_id, exc.detail[:2000])
            raise

    async def rollback(self, move: Move) -> Move:
        """Undo a move that has not switched: the tenant runs in its home cell again and
        the target holds nothing of it."""
        if move.phase is Phase.SWITCHED or move.phase is Phase.DONE:
            raise Conflict(f"Move {move.move_id} already switched the tenant to "
                           f"{move.target!r}; move it back instead.")
        if move.phase is Phase.ROLLED_BACK:
            return move
        source, target = await self._access(move.source), await self._access(move.target)
        src, dst = await _connect(source), await _connect(target)
        try:
            self.progress("roll back", 0, 3)
            await _delete_arrival(dst, move, target)
            self.progress("roll back", 1, 3)
            await freeze.unfreeze(src, move.tenant_id, move.move_id)
            self.progress("roll back", 2, 3)
            async with self.dir.transaction():
                await directory.set_tenant_state(self.dir, move.tenant_id, "active")
                moved = await self._set_phase(move, Phase.ROLLED_BACK)
            self.progress("roll back", 3, 3)
            return moved
        finally:
            await src.close()
            await dst.close()

    async def _drain(self, move: Move, src: asyncpg.Connection,
                     dst: asyncpg.Connection) -> None:
        await copy.same_schema(src, dst)
        arriving = await freeze.state_of(dst, move.tenant_id)
        if arriving is None and await dst.fetchval(
                "SELECT count(*) FROM tenants WHERE tenant_id = $1", move.tenant_id):
            raise MoveFailed(f"cell {move.target!r} already holds a tenant "
                             f"{move.tenant_id!r}; it cannot be moved there")
        await freeze.freeze(dst, move.tenant_id, move.move_id, Frozen.ARRIVING)
        first: list[int] = []

        def report(held: freeze.Held) -> None:
            if not first:
                first.append(max(held.leased, 1))
            self.progress("drain", first[0] - min(held.leased, first[0]), first[0])

        await freeze.drain(src, move.tenant_id, move.move_id,
                           within=self.settings.drain_seconds, on_progress=report)
        self.progress("drain", 1, 1)

    async def _copy(self, move: Move, source: CellAccess, target: CellAccess,
                    src: asyncpg.Connection, dst: asyncpg.Connection) -> Move:
        tables = await copy.tenant_tables(src)
        done: list[str] = []

        def table_copied(_name: str, _rows: int) -> None:
            done.append(_name)
            self.progress("copy rows", len(done), len(tables))

        self.progress("copy rows", 0, len(tables))
        copied = await copy.copy_rows(src, dst, move.tenant_id, rewrap=self._rewrap(move),
                                      home_cell=move.target, on_table=table_copied)
        blobs = 0
        if source.blob_dir is not None and target.blob_dir is not None:
            self.progress("copy blobs", 0, 1)
            blobs = copy.copy_blobs(source.blob_dir, target.blob_dir, move.tenant_id)
            self.progress("copy blobs", 1, 1)
        rows = sum(d.rows for d in copied.values())
        # The point of no return: the directory points at the target, in one commit with
        # the phase that says so.
        async with self.dir.transaction():
            await self.dir.execute(Q.set_counts, move.move_id, rows, blobs)
            await directory.switch_home_cell(self.dir, move.tenant_id, move.target)
            move = await self._set_phase(move, Phase.SWITCHED)
        self.progress("switch", 1, 1)
        return move

    async def _resume_there(self, move: Move, dst: asyncpg.Connection) -> None:
        """After the switch, first: the target runs the tenant and the router admits it
        again — whether or not the source answers (a source that died after the switch
        holds the tenant back from nothing; its copy is deleted when it is back)."""
        await freeze.unfreeze(dst, move.tenant_id, move.move_id)
        await directory.set_tenant_state(self.dir, move.tenant_id, "active")
        self.progress("resume", 1, 1)

    async def _clean_source(self, move: Move, source: CellAccess) -> None:
        """The source's copy goes. Idempotent, as every step here (a resumed move repeats
        it): the tenant stays frozen there until its last row is deleted."""
        src = await _connect(source)
        try:
            await freeze.freeze(src, move.tenant_id, move.move_id, Frozen.MOVED)
            await freeze.delete_tenant(src, move.tenant_id)
            if source.blob_dir is not None:
                copy.delete_blobs(source.blob_dir, move.tenant_id)
            await freeze.unfreeze(src, move.tenant_id, move.move_id)
        finally:
            await src.close()
        self.progress("clean source", 1, 1)

    def _rewrap(self, move: Move) -> tuple[MasterKey, MasterKey] | None:
        old, new = self.keys.get(move.source), self.keys.get(move.target)
        if old is None and new is None:
            return None  # one master key for both cells
        if old is None or new is None:
            raise MoveFailed(f"give the master keys of both cells ({move.source!r} and "
                             f"{move.target!r}), or of neither if they share one")
        return old, new

    async def _set_phase(self, move: Move, phase: Phase) -> Move:
        row = await self.dir.fetchrow(Q.set_phase, move.move_id, phase.value)
        assert row is not None
        return Move.of(row)

    async def _access(self, name: str) -> CellAccess:
        row = await self.dir.fetchrow(Q.cell_access, name)
        if row is None:
            raise NotFound(f"No cell named {name!r} in the directory.")
        if row["database_url"] is None:
            raise ValidationFailed(
                f"Cell {name!r} has no database URL in the directory; a move needs one "
                "(`tenantry cells add` with --database-url)")
        return CellAccess(row["name"], row["region"], row["database_url"],
                          Path(row["blob_dir"]) if row["blob_dir"] else None)


async def set_cell_access(conn: asyncpg.Connection, name: str, *, database_url: str,
                          blob_dir: str | None = None) -> None:
    """Record how a move reaches cell ``name``: its database on the owner login
    (``postgresql://…``) and, if it keeps blobs in a folder, that folder as seen from
    where moves run (an absolute path)."""
    if not (database_url.startswith(("postgresql://", "postgres://"))
            and len(database_url) <= 2000 and database_url.isprintable()):
        raise ValidationFailed("database_url must be a postgresql:// URL of at most 2000 "
                               "printable characters")
    if blob_dir is not None and not (Path(blob_dir).is_absolute() and len(blob_dir) <= 1000
                                     and blob_dir.isprintable()):
        raise ValidationFailed(f"blob_dir must be an absolute path, got {blob_dir[:100]!r}")
    if await conn.execute(Q.set_cell_access, name, database_url, blob_dir) != "UPDATE 1":
        raise NotFound(f"No cell named {name!r} in the directory.")


async def moves_page(conn: asyncpg.Connection, limit: int = 50) -> list[Move]:
    return [Move.of(r) for r in await conn.fetch(Q.moves_page, limit)]


async def _delete_arrival(dst: asyncpg.Connection, move: Move, target: CellAccess) -> None:
    """Whatever of the tenant reached the target (a copy committed before the switch)."""
    state = await freeze.state_of(dst, move.tenant_id)
    if state is None or state[1] != move.move_id:
        return  # nothing of this move arrived (or the tenant there is not this move's)
    await freeze.delete_tenant(dst, move.tenant_id)
    if target.blob_dir is not None:
        copy.delete_blobs(target.blob_dir, move.tenant_id)
    await freeze.unfreeze(dst, move.tenant_id, move.move_id)


async def _connect(cell: CellAccess) -> asyncpg.Connection:
    try:
        # Named like every connection of a process: a move is connected to both cells
        # while it runs, and `tenantry migrate --status` says so.
        return await asyncpg.connect(cell.database_url, timeout=10,
                                     server_settings=server_settings(purpose="cells move"))
    except (OSError, asyncpg.PostgresError) as exc:
        raise MoveFailed(f"cell {cell.name!r}'s database is not answering "
                         f"({type(exc).__name__}); nothing changed by this step") from exc
