"""What the commands that talk to a running platform over its HTTP API share: the tenant's
key as a header, the SDK's client (as the tenant, or as the operator for one tenant:
``--tenant``, see :mod:`tenantry.cli.operator`) with its failures as the one-line refusal,
an error answer as the same, every page of a list, the API's JSON (``--json``) and a
table."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, Protocol, TypeVar

import typer

from tenantry.cli.common import fail
from tenantry.cli.operator_forms import operator_transport

if TYPE_CHECKING:
    from tenantry.client import Client, Page

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
        with Client(url, api_key, timeout=timeout, transport=transport) as client:
            yield client
    except ClientError as exc:
        sdk_failure(url, exc)


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


def fetch(url: str, api_key: str | None, call: Callable[[Client], T], *,
          tenant: str | None = None, operator_token: str | None = None) -> T:
    """What one SDK call answers, with the client of ``sdk_client`` open around it."""
    with sdk_client(url, api_key, tenant=tenant, operator_token=operator_token) as client:
        return call(client)


def print_list(url: str, api_key: str | None, as_json: bool,
               lister: Callable[[Client], Callable[..., Page[R]]], header: list[str],
               row: Callable[[R], list[str]], *, tenant: str | None = None,
               operator_token: str | None = None) -> None:
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


def print_items(items: Iterable[R], as_json: bool, header: list[str],
                row: Callable[[R], list[str]]) -> None:
    """A list: the API's JSON of each item (``--json``), else a table of a row an item."""
    if as_json:
        print_json([item.raw for item in items])
        return
    show_table(header, [row(item) for item in items])


def print_fields(item: R, as_json: bool, rows: Callable[[R], list[list[str]]]) -> None:
    """One item: the API's JSON (``--json``), else a table of its fields and values."""
    if as_json:
        print_json(item.raw)
        return
    show_table(["field", "value"], rows(item))
