"""``tenantry cells``: the global directory's cells (ADR 0027) — ``add`` one,
``list`` them. Each command brings the directory's schema current first (its own series),
so the first ``cells add`` works before any router has started.

A group of its own so later subcommands (moving a tenant between cells) join it with one
``@cells_app.command``. Exit codes: 0 done; 2 refused (a bad flag, an unreachable
directory, a cell that exists)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from tenantry.cli.common import run, settings
from tenantry.cli.help import App
from tenantry.cli.options import CellDatabaseUrl, CellOperatorToken, DirectoryUrl
from tenantry.cli.remote import show_table

if TYPE_CHECKING:
    import asyncpg

T = TypeVar("T")

cells_app = App(help="Cells behind `tenantry router`: the global directory's list of cells.")

def with_directory(work: Callable[[asyncpg.Connection], Awaitable[T]],
                   directory_url: str | None) -> T:
    """Run ``work(conn)`` on a connection to the directory (schema current); a refusal is
    one line and exit 2. Shared by every ``cells`` subcommand."""
    import asyncio

    from tenantry.bootstrap.router import directory_dsn, open_directory
    config = settings(directory_url=directory_url)

    async def go() -> T:
        conn = await open_directory(directory_dsn(config))
        try:
            return await work(conn)
        finally:
            await conn.close()

    return run(lambda: asyncio.run(go()))


@cells_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="The cell's name (its TENANTRY_CELL), e.g. eu-1.")],
    region: Annotated[str, typer.Option("--region", help="The region it serves (its "
                                        "TENANTRY_REGION), e.g. eu.")],
    api_url: Annotated[str, typer.Option("--api-url", help="Where the router reaches its API: "
                                         "http(s)://host[:port].")],
    operator_token: CellOperatorToken,
    dedicated: Annotated[bool, typer.Option(
        "--dedicated", help="Place only tenants created naming this cell.")] = False,
    database_url: CellDatabaseUrl = None,
    blob_dir: Annotated[str | None, typer.Option(
        "--blob-dir", help="The cell's blob folder as seen from where moves run.")] = None,
    directory_url: DirectoryUrl = None,
) -> None:
    """Register a cell in the global directory."""
    from tenantry.cells import directory
    from tenantry.cells.move import set_cell_access

    if blob_dir is not None and database_url is None:
        raise typer.BadParameter("--blob-dir needs --database-url (both are for moves)")

    async def work(conn: asyncpg.Connection) -> directory.Cell:
        async with conn.transaction():
            cell = await directory.add_cell(conn,
                                            name, region=region, api_url=api_url,
                                            operator_token=operator_token,
                                            dedicated=dedicated)
            if database_url is not None:
                await set_cell_access(conn, name, database_url=database_url,
                                      blob_dir=blob_dir)
        return cell


    cell = with_directory(work, directory_url)
    typer.echo(f"cell {cell.name} added: region {cell.region}, {cell.api_url}"
               + (" (dedicated)" if cell.dedicated else ""))


@cells_app.command("list")
def list_cells(directory_url: DirectoryUrl = None) -> None:
    """The cells, with how many tenants call each home."""
    from tenantry.cells import directory

    async def work(conn: asyncpg.Connection) -> list[directory.CellCount]:
        return await directory.list_cells(conn)

    found = with_directory(work, directory_url)
    show_table(["cell", "region", "api url", "tenants", "dedicated", "added (UTC)"],
               [[c.cell.name, c.cell.region, c.cell.api_url, c.tenants,
                 "yes" if c.cell.dedicated else "", f"{c.cell.created_at:%Y-%m-%d %H:%M}"]
                for c in found])
    if not found:
        typer.echo("no cells yet: tenantry cells add NAME --region R --api-url URL "
                   "--operator-token TOKEN")


MasterKeyEnv = "TENANTRY_MOVE_SOURCE_MASTER_KEY", "TENANTRY_MOVE_TARGET_MASTER_KEY"


@cells_app.command("move")
def move(
    tenant: Annotated[str | None, typer.Argument(
        help="The tenant to move (omit with --resume or --rollback).")] = None,
    to: Annotated[str | None, typer.Option("--to", help="The cell it moves to (same "
                                           "region).")] = None,
    resume: Annotated[str | None, typer.Option(
        "--resume", metavar="MOVE_ID", help="Carry an interrupted move on.")] = None,
    rollback: Annotated[str | None, typer.Option(
        "--rollback", metavar="MOVE_ID",
        help="Undo an interrupted move that has not switched.")] = None,
    drain_seconds: Annotated[float, typer.Option(
        "--drain-seconds", min=1, max=86_400,
        help="How long to wait for the tenant's runs to reach a step's end.")] = 600.0,
    directory_url: DirectoryUrl = None,
) -> None:
    """Move a tenant to another cell of its region: drain, copy and verify, switch, clean.

    The tenant is refused (503, Retry-After) until it runs in the new cell; its runs in
    flight are handed back at their next step and finish there. If the cells' master keys
    differ, give both in TENANTRY_MOVE_SOURCE_MASTER_KEY and TENANTRY_MOVE_TARGET_MASTER_KEY."""
    import os
    import uuid

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

    from tenantry.cells.move import Move, Mover, MoveSettings
    from tenantry.errors import ValidationFailed
    from tenantry.vault import MasterKey

    chosen = [x for x in ((tenant or to) and "move", resume and "resume",
                          rollback and "rollback") if x]
    if len(chosen) != 1 or (chosen == ["move"] and not (tenant and to)):
        typer.secho("error: give TENANT --to CELL, or --resume MOVE_ID, or --rollback "
                    "MOVE_ID", fg="red", err=True)
        raise typer.Exit(2)
    move_id = resume or rollback
    if move_id is not None:
        try:
            move_uuid = uuid.UUID(move_id)
        except ValueError:
            typer.secho(f"error: {move_id!r} is not a move id (see `tenantry cells moves`)",
                        fg="red", err=True)
            raise typer.Exit(2) from None
    texts = [os.environ.get(name) for name in MasterKeyEnv]

    async def work(conn: asyncpg.Connection) -> Move:
        keys: dict[str, MasterKey] = {}
        with Progress(TextColumn("{task.description:<13}"), BarColumn(), MofNCompleteColumn(),
                      console=Console(stderr=True), transient=False) as bar:
            tasks: dict[str, TaskID] = {}

            def show(what: str, done: int, total: int) -> None:
                if what not in tasks:
                    tasks[what] = bar.add_task(what, total=total)
                bar.update(tasks[what], completed=done, total=total)

            mover = Mover(conn, settings=MoveSettings(drain_seconds=drain_seconds),
                          progress=show)
            if rollback is not None:
                return await mover.rollback(await mover.get(move_uuid))
            current = (await mover.get(move_uuid) if resume is not None
                       else await mover.begin(str(tenant), str(to)))
            if any(texts):
                if not all(texts):
                    raise ValidationFailed(f"give both {' and '.join(MasterKeyEnv)}, or "
                                           "neither if the cells share a master key")
                keys = {current.source: MasterKey.parse(str(texts[0]), MasterKeyEnv[0]),
                        current.target: MasterKey.parse(str(texts[1]), MasterKeyEnv[1])}
                mover.keys = keys
            bar.console.print(f"move {current.move_id}: {current.tenant_id} "
                              f"{current.source} → {current.target}")
            return await mover.resume(current)

    done = with_directory(work, directory_url)
    if done.phase.value == "rolled_back":
        typer.echo(f"rolled back move {done.move_id}: {done.tenant_id} stays in {done.source}")
    else:
        typer.echo(f"moved {done.tenant_id} from {done.source} to {done.target}: "
                   f"{done.rows_copied or 0:,} rows, {done.blobs_copied or 0} blobs "
                   f"(move {done.move_id})")


@cells_app.command("moves")
def moves(
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000,
                                       help="How many moves to show, newest first.")] = 50,
    directory_url: DirectoryUrl = None,
) -> None:
    """Moves of tenants between cells, newest first, with their phase."""
    from tenantry.cells.move import Move, moves_page

    async def work(conn: asyncpg.Connection) -> list[Move]:
        return await moves_page(conn, limit)

    found = with_directory(work, directory_url)
    show_table(["move", "tenant id", "from", "to", "phase", "rows", "blobs", "started (UTC)",
                "detail"],
               [[str(m.move_id), m.tenant_id, m.source, m.target, m.phase.value,
                 "" if m.rows_copied is None else m.rows_copied,
                 "" if m.blobs_copied is None else m.blobs_copied,
                 f"{m.started_at:%Y-%m-%d %H:%M}", m.detail or ""] for m in found])
    if not found:
        typer.echo("no moves yet: tenantry cells move TENANT --to CELL")
