"""``tenantry cells``: the global directory's cells (DESIGN §12, ADR 0027) — ``add`` one,
``list`` them. Each command brings the directory's schema current first (its own series),
so the first ``cells add`` works before any router has started.

A group of its own so later subcommands (moving a tenant between cells) join it with one
``@cells_app.command``. Exit codes: 0 done; 2 refused (a bad flag, an unreachable
directory, a cell that exists)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from tenantry.cli_help import App

if TYPE_CHECKING:
    import asyncpg

T = TypeVar("T")

cells_app = App(help="Cells behind `tenantry router`: the global directory's list of cells.")

DirectoryUrl = Annotated[
    str | None,
    typer.Option("--directory-url", envvar="TENANTRY_DIRECTORY_URL",
                 help="The global directory's Postgres database."),
]


def with_directory(work: Callable[[asyncpg.Connection], Awaitable[T]],
                   directory_url: str | None) -> T:
    """Run ``work(conn)`` on a connection to the directory (schema current); a refusal is
    one line and exit 2. Shared by every ``cells`` subcommand."""
    import asyncio

    from tenantry.bootstrap.router import directory_dsn, open_directory
    from tenantry.cli import _run, _settings

    settings = _settings(directory_url=directory_url)

    async def go() -> T:
        conn = await open_directory(directory_dsn(settings))
        try:
            return await work(conn)
        finally:
            await conn.close()

    return _run(lambda: asyncio.run(go()))


@cells_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="The cell's name (its TENANTRY_CELL), e.g. eu-1.")],
    region: Annotated[str, typer.Option("--region", help="The region it serves (its "
                                        "TENANTRY_REGION), e.g. eu.")],
    api_url: Annotated[str, typer.Option("--api-url", help="Where the router reaches its API: "
                                         "http(s)://host[:port].")],
    operator_token: Annotated[str, typer.Option(
        "--operator-token", envvar="TENANTRY_CELL_OPERATOR_TOKEN",
        help="The cell's TENANTRY_OPERATOR_TOKEN (the router calls its /admin/v1 with it).")],
    dedicated: Annotated[bool, typer.Option(
        "--dedicated", help="Place only tenants created naming this cell.")] = False,
    directory_url: DirectoryUrl = None,
) -> None:
    """Register a cell in the global directory."""
    from tenantry.cells import directory

    async def work(conn: asyncpg.Connection) -> directory.Cell:
        return await directory.add_cell(conn,
                                        name, region=region, api_url=api_url,
                                        operator_token=operator_token, dedicated=dedicated)

    cell = with_directory(work, directory_url)
    typer.echo(f"cell {cell.name} added: region {cell.region}, {cell.api_url}"
               + (" (dedicated)" if cell.dedicated else ""))


@cells_app.command("list")
def list_cells(directory_url: DirectoryUrl = None) -> None:
    """The cells, with how many tenants call each home."""
    from rich.console import Console
    from rich.table import Table

    from tenantry.cells import directory

    async def work(conn: asyncpg.Connection) -> list[directory.CellCount]:
        return await directory.list_cells(conn)

    found = with_directory(work, directory_url)
    table = Table("cell", "region", "api url", "tenants", "dedicated", "added")
    for c in found:
        table.add_row(c.cell.name, c.cell.region, c.cell.api_url, str(c.tenants),
                      "yes" if c.cell.dedicated else "", f"{c.cell.created_at:%Y-%m-%d %H:%M}")
    Console().print(table)
    if not found:
        typer.echo("no cells yet: tenantry cells add NAME --region R --api-url URL "
                   "--operator-token TOKEN")
