"""``tenantry prices``: what models and sandbox time cost, over the operator API
(``/admin/v1/prices``, the operator token): the prices in force, one price's versions, and
a new version. A version never changes once made and the API removes none: a price is
changed by a newer version (``set``), from now or from a time given.

Exit status: 0 done; 2 bad input, configuration, or an error answer (one line)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer

from tenantry.cli.common import fail
from tenantry.cli.help import App
from tenantry.cli.operator import Item, all_fields, operator_call, operator_pages, text
from tenantry.cli.options import DEFAULT_URL, OperatorToken, Url
from tenantry.cli.remote import AsJson, print_fields, print_items

prices_app = App(help="Model and sandbox prices (operator: TENANTRY_OPERATOR_TOKEN): list "
                      "those in force, show a price's versions, set a new version.")

SANDBOX = "sandbox"
Model = Annotated[str, typer.Argument(
    help=f"The model's name as agents and accounts use it, or {SANDBOX} (a second of "
         "sandbox time).")]
HEADER = ["model", "source", "version", "in force", "effective from (UTC)", "input /M",
          "cached /M", "cache write /M", "output /M", "sandbox /s"]


def _row(price: Item) -> list[str]:
    p = price.raw
    return [p["model"], p["source"], p["version"], text(p["in_force"]),
            text(p["effective_from"]), *(_dollars(p[k]) for k in (
                "input_per_m", "cached_input_per_m", "cache_write_per_m", "output_per_m",
                "per_second_micros"))]


def _dollars(micros: int | None) -> str:
    return "—" if micros is None else f"{micros / 1e6:.6f}"


def _path(model: str) -> str:
    from urllib.parse import quote

    return f"/admin/v1/prices/{quote(model, safe='/:')}"


@prices_app.command("list")
def list_prices(url: Url = DEFAULT_URL, operator_token: OperatorToken = None,
                as_json: AsJson = False) -> None:
    """Each model's price in force now (the operator's or the built-in default) and the
    sandbox's, in dollars per million tokens (per second for the sandbox)."""
    found = [Item(p) for p in operator_pages(url, operator_token, "/admin/v1/prices")]
    print_items(found, as_json, HEADER, _row)


@prices_app.command("show")
def show(model: Model, url: Url = DEFAULT_URL, operator_token: OperatorToken = None,
         as_json: AsJson = False) -> None:
    """Every version of a price, newest first (scheduled ones too), then the built-in
    default."""
    history = operator_call(url, operator_token, "GET", _path(model))
    print_items([Item(p) for p in history["data"]], as_json, HEADER, _row)


def _micros(flag: str, dollars: float | None) -> int | None:
    if dollars is None:
        return None
    if dollars < 0:
        fail(f"{flag}: a price is not negative")
    return round(dollars * 1_000_000)


@prices_app.command("set")
def set_price(
    model: Model,
    input_: Annotated[float | None, typer.Option(
        "--input", help="Dollars per million plain input tokens.")] = None,
    cached_input: Annotated[float | None, typer.Option(
        help="Dollars per million input tokens read from the prompt cache.")] = None,
    cache_write: Annotated[float | None, typer.Option(
        help="Dollars per million input tokens written to the prompt cache (default: the "
             "input price).")] = None,
    output: Annotated[float | None, typer.Option(
        help="Dollars per million output tokens.")] = None,
    per_second: Annotated[float | None, typer.Option(
        help=f"{SANDBOX} only: dollars per second of sandbox time.")] = None,
    effective_from: Annotated[datetime | None, typer.Option(
        formats=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d %H:%M:%S%z"], metavar="TIME",
        help="When it takes effect (with a time zone, e.g. 2027-01-01T00:00:00+00:00); "
             "not in the past. Default: now.")] = None,
    url: Url = DEFAULT_URL, operator_token: OperatorToken = None, as_json: AsJson = False,
) -> None:
    """Add a version of a model's price (--input, --cached-input, --output; --cache-write
    optional) or of the sandbox's (--per-second). Setting the same version again changes
    nothing."""
    body: dict[str, Any]
    if model == SANDBOX:
        if per_second is None or any(v is not None for v in (input_, cached_input,
                                                             cache_write, output)):
            fail(f"{SANDBOX} takes --per-second only")
        body = {"per_second_micros": _micros("--per-second", per_second)}
    else:
        if per_second is not None:
            fail(f"--per-second is the {SANDBOX}'s price: a model takes --input, "
                 "--cached-input and --output")
        if input_ is None or cached_input is None or output is None:
            fail("a model's price needs --input, --cached-input and --output")
        body = {"input_per_m": _micros("--input", input_),
                "cached_input_per_m": _micros("--cached-input", cached_input),
                "output_per_m": _micros("--output", output),
                "cache_write_per_m": _micros("--cache-write", cache_write)}
    if effective_from is not None:
        body["effective_from"] = effective_from.isoformat()
    price = Item(operator_call(url, operator_token, "PUT", _path(model), json=body))
    print_fields(price, as_json, all_fields)
