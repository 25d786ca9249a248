"""What the commands that talk to a running platform over its HTTP API share: the tenant's
key as a header, the SDK's client (as the tenant, or as the operator for one tenant:
``--tenant``, see :mod:`tenantry.cli.operator`) with its failures as the one-line refusal,
an error answer as the same, every page of a list, the API's JSON (``--json``) and a
table."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, Protocol, TypeVar

import typer

from tenantry.cli.common import fail
from tenantry.cli.operator_forms import operator_transport
from tenantry.cli.tables import Cell, Column, column, fit, looks_like_id, text

if TYPE_CHECKING:
    from rich.console import Console

    from tenantry.client import Client, Page, Retrying

T = TypeVar("T")

# How many items a page of a list holds when a command reads every page.
PAGE = 200


class FromApi(Protocol):
    """An SDK value that keeps the JSON it was read from (what ``--json`` prints)."""

    @property
    def raw(self) -> Mapping[str, Any]: ...


R = TypeVar("R", bound=FromApi)

AsJson = Annotated[bool, typer.Option("--json", help="Print the API's JSON instead of a "
                                                     "table.")]


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


def _say_retrying(retry: Retrying) -> None:
    """The first retry of a call on standard error (``--json`` keeps standard output): the
    backoff can take a minute, and a silent minute looks like a hang."""
    if retry.retry == 1:
        typer.echo(f"{retry.reason}; retrying for up to {retry.seconds_left:.0f} s",
                   err=True)


@contextmanager
def sdk_client(url: str, api_key: str | None, *, timeout: float = 30.0,
               tenant: str | None = None, operator_token: str | None = None,
               ) -> Iterator[Client]:
    """The SDK's client of the platform at ``url``: as the tenant whose key ``api_key`` is,
    or, given ``tenant``, as the operator acting on that tenant (the operator API's form of
    each route). No key (or token) fails (exit status 2) before anything is sent; an SDK
    failure in the block that the block does not handle is the one-line error
    (``sdk_failure``)."""
    from tenantry.client import Client, ClientError

    transport = None
    if tenant is not None:
        if not operator_token:
            fail("--tenant acts as the operator: the operator token is needed "
                 "(--operator-token or TENANTRY_OPERATOR_TOKEN)")
        api_key, transport = operator_token, operator_transport(tenant)
    headers(api_key)
    try:
        with Client(url, api_key, timeout=timeout, transport=transport,
                    on_retry=_say_retrying) as client:
            yield client
    except ClientError as exc:
        sdk_failure(url, exc)


def show_table(header: Sequence[str | Column], rows: Sequence[Sequence[Cell]],
               title: str | None = None) -> None:
    """A table on a terminal, its ids whole on one line (``tables.fit``), or a record a row
    where it is too narrow for one; tab-separated lines (header first, counts without
    separators) into a pipe or a file."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    specs = [column(spec) for spec in header]
    cells = [[text(cell, terminal=console.is_terminal) for cell in row] for row in rows]
    if not console.is_terminal:
        if title:
            typer.echo(title, err=True)
        for line in [[spec.name for spec in specs], *cells]:
            typer.echo("\t".join(line))
        return
    layout = fit(specs, cells, console.width)
    if layout is None:
        _records(console, [spec.name for spec in specs], cells, title)
        return
    table = Table(title=title, caption=(
        f"not shown at this width: {', '.join(layout.hidden)} (a wider terminal or a pipe "
        "shows them)") if layout.hidden else None)
    for index, width, nowrap in zip(layout.shown, layout.widths, layout.nowrap, strict=True):
        table.add_column(specs[index].name, width=width, no_wrap=nowrap, overflow="fold")
    for row in cells:
        # Text, not markup: a value holding "[...]" is shown as it is.
        table.add_row(*(Text(row[index]) for index in layout.shown))
    console.print(table)


def _records(console: Console, names: list[str], rows: list[list[str]],
             title: str | None) -> None:
    """Each row as its fields and their values, a line each, an id never wrapped: beside
    its field's name where both fit on a line, else under it."""
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    longest_id = max([len(v) for row in rows for v in row if looks_like_id(v)], default=0)
    stacked = max(map(len, names), default=0) + 2 + longest_id > console.width
    if title:
        console.print(Text(title))
    for number, row in enumerate(rows):
        if number:
            console.print()
        if stacked:
            for name, value in zip(names, row, strict=True):
                console.print(Text(name, style="bold"))
                console.print(Padding(Text(value), (0, 0, 0, 2)), overflow="fold")
            continue
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold", min_width=longest_id)
        for name, value in zip(names, row, strict=True):
            grid.add_row(Text(name), Text(value))
        console.print(grid)


def fetch(url: str, api_key: str | None, call: Callable[[Client], T], *,
          tenant: str | None = None, operator_token: str | None = None) -> T:
    """What one SDK call answers, with the client of ``sdk_client`` open around it."""
    with sdk_client(url, api_key, tenant=tenant, operator_token=operator_token) as client:
        return call(client)


def print_list(url: str, api_key: str | None, as_json: bool,
               lister: Callable[[Client], Callable[..., Page[R]]],
               header: Sequence[str | Column], row: Callable[[R], Sequence[Cell]], *,
               tenant: str | None = None, operator_token: str | None = None) -> None:
    """Every item of the list ``lister(client)`` reads a page of (``limit``, ``cursor``),
    printed as ``print_items`` prints them (as ``sdk_client`` calls: ``tenant``)."""
    with sdk_client(url, api_key, tenant=tenant, operator_token=operator_token) as client:
        read = lister(client)
        found = every_page(lambda cursor: read(limit=PAGE, cursor=cursor))
    print_items(found, as_json, header, row)


def every_page(read: Callable[[str | None], Page[T]]) -> list[T]:
    """Every item of a list, page after page: ``read(cursor)`` reads one."""
    items: list[T] = []
    cursor: str | None = None
    while True:
        page = read(cursor)
        items += page.data
        if page.next_cursor is None or not page.data:
            return items
        cursor = page.next_cursor


def print_json(value: Mapping[str, Any] | list[Mapping[str, Any]]) -> None:
    """The API's JSON as it came, indented (``--json``)."""
    plain = [dict(v) for v in value] if isinstance(value, list) else dict(value)
    typer.echo(json.dumps(plain, indent=2, ensure_ascii=False))


def ended(status: str, why: str) -> NoReturn:
    """Exit status 1 for a wait that did not end as asked: the status on standard output
    (what a script reads), why on standard error."""
    typer.secho(why, err=True)
    typer.echo(status)
    raise typer.Exit(1) from None


def print_items(items: Iterable[R], as_json: bool, header: Sequence[str | Column],
                row: Callable[[R], Sequence[Cell]]) -> None:
    """A list: the API's JSON of each item (``--json``), else a table of a row an item."""
    if as_json:
        print_json([item.raw for item in items])
        return
    show_table(header, [row(item) for item in items])


def print_fields(item: R, as_json: bool,
                 rows: Callable[[R], Sequence[Sequence[Cell]]]) -> None:
    """One item: the API's JSON (``--json``), else a table of its fields and values."""
    if as_json:
        print_json(item.raw)
        return
    show_table(["field", "value"], rows(item))
