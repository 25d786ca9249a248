"""What the commands that talk to a running platform over its HTTP API share: the tenant's
key as a header, an error answer or an SDK failure as the one-line refusal, and a table."""

from __future__ import annotations

from typing import Any, NoReturn

import typer

from tenantry.cli.common import fail


def headers(api_key: str | None) -> dict[str, str]:
    if not api_key:
        fail("a tenant API key is needed: --api-key or TENANTRY_API_KEY")
    return {"Authorization": f"Bearer {api_key}"}


def problem(response: Any) -> NoReturn:
    try:
        body = response.json()
        detail = body.get("detail") or body.get("title") or response.text
    except ValueError:
        detail = response.text
    fail(f"{response.status_code}: {detail}")


def sdk_failure(url: str, exc: Exception) -> NoReturn:
    """An SDK exception as the CLI's one-line error (exit status 2)."""
    from tenantry.client import ApiError

    if isinstance(exc, ApiError):
        fail(f"{exc.status}: {exc.detail}")
    fail(f"cannot reach {url}: {exc}")


def show_table(header: list[str], rows: list[list[str]], title: str | None = None) -> None:
    """A table on a terminal; tab-separated lines (header first) into a pipe or a file,
    where rich would squeeze the table to 80 columns and cut the ids short."""
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    if not console.is_terminal:
        if title:
            typer.echo(title, err=True)
        for line in [header, *rows]:
            typer.echo("\t".join(line))
        return
    table = Table(title=title)
    for index, name in enumerate(header):
        # The first column holds ids: folded when the terminal is narrow, never cut.
        table.add_column(name, overflow="fold" if index == 0 else "ellipsis",
                         no_wrap=index != 0)
    for row in rows:
        table.add_row(*row)
    console.print(table)
