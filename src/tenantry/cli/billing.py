"""``tenantry billing reconcile``: compare a model account's recorded usage with the
provider's own usage report, through the operator API (``POST /admin/v1/billing/reconcile``);
``tenantry billing reconciliations``: the past ones, newest first.

Exit status: 0 when every day agrees within 1%, 1 when a day is flagged, 2 for an error."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from tenantry.cli.common import fail
from tenantry.cli.help import App
from tenantry.cli.options import DEFAULT_URL, AdminKey, OperatorToken, Url
from tenantry.cli.remote import AsJson, print_items, problem, show_table

billing_app = App(help="Check billing against the providers' own usage reports (operator).")

_FIGURES = (("requests", "requests"), ("input_tokens", "input"),
            ("cached_input_tokens", "cached"), ("cache_write_input_tokens", "cache writes"),
            ("output_tokens", "output"), ("cost_micros", "cost $"))


def _read_json(path: Path) -> Any:
    import orjson

    try:
        return orjson.loads(path.read_bytes())
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}")
    except orjson.JSONDecodeError as exc:
        fail(f"{path} is not JSON: {exc}")


def _pages(data: Any) -> list[Any]:
    return data if isinstance(data, list) else [data]


def _export(usage_file: Path, costs_file: Path | None) -> dict[str, Any]:
    """The file as the API's ``export``: a whole export (``{"format", "usage", "costs"}``)
    as is, or the usage report's page(s) as downloaded, its format recognised by OpenAI's
    ``"object": "page"``."""
    data = _read_json(usage_file)
    if isinstance(data, dict) and "format" in data:
        export = data
    else:
        pages = _pages(data)
        first = pages[0] if pages else None
        openai = isinstance(first, dict) and first.get("object") == "page"
        export = {"format": "openai" if openai else "anthropic", "usage": pages}
    if costs_file is not None:
        export = {**export, "costs": _pages(_read_json(costs_file))}
    return export


def _cell(figure: dict[str, Any] | None, *, terminal: bool) -> str:
    """Ours / theirs (thousands separated on a terminal only), the difference, and
    "flagged" when it is past the tolerance."""
    if figure is None:
        return "—"
    money = figure["name"] == "cost_micros"

    def show(value: int) -> str:
        return f"{value / 1e6:.6f}" if money else f"{value:,}" if terminal else str(value)

    text = f"{show(figure['ours'])} / {show(figure['theirs'])}"
    diff = figure["relative_diff"]
    if figure["ours"] != figure["theirs"]:
        text += f" ({diff:+.2%})" if diff is not None else " (theirs 0)"
    return f"{text} flagged" if figure["flagged"] else text


@billing_app.command("reconcile")
def reconcile(
    account: Annotated[str, typer.Option("--account", help="The model account id.")],
    from_: Annotated[str, typer.Option("--from", help="First UTC day (YYYY-MM-DD).")],
    to: Annotated[str, typer.Option("--to", help="Last UTC day (YYYY-MM-DD).")],
    export: Annotated[Path | None, typer.Option(
        "--export", help="The provider's usage report as downloaded (JSON: a page, a list "
                         "of pages, or a whole export).", show_default=False)] = None,
    costs: Annotated[Path | None, typer.Option(
        "--costs", help="With --export: the provider's cost report (JSON pages).",
        show_default=False)] = None,
    fetch: Annotated[bool, typer.Option(
        "--fetch", help="Fetch the report from the provider's admin endpoint now.")] = False,
    no_costs: Annotated[bool, typer.Option(
        "--no-costs", help="With --fetch: do not fetch or compare costs.")] = False,
    admin_key: AdminKey = None,
    url: Url = DEFAULT_URL, operator_token: OperatorToken = None,
) -> None:
    """Compare the account's usage per UTC day with the provider's own report; flag any day
    differing by more than 1% or seen on one side only (exit 1)."""
    import httpx2
    from rich.console import Console

    if not operator_token:
        fail("the operator token is needed: --operator-token or TENANTRY_OPERATOR_TOKEN")
    if (export is None) == (not fetch):
        fail("give exactly one of --export FILE and --fetch")
    if costs is not None and export is None:
        fail("--costs FILE goes with --export (--fetch fetches the cost report itself)")
    body: dict[str, Any] = {"account": account, "from": from_, "to": to}
    if export is not None:
        body["export"] = _export(export, costs)
    else:
        if not admin_key:
            fail("--fetch needs the provider's admin key: TENANTRY_PROVIDER_ADMIN_KEY or "
                  "--admin-key")
        body["fetch"] = {"admin_key": admin_key, "costs": not no_costs}
    try:
        response = httpx2.post(f"{url}/admin/v1/billing/reconcile", json=body, timeout=120,
                               headers={"Authorization": f"Bearer {operator_token}"})
    except (OSError, httpx2.TransportError) as exc:  # httpx2's are not OSErrors
        fail(f"cannot reach {url}: {exc}")
    if response.status_code != 201:
        problem(response)
    result = response.json()
    terminal = sys.stdout.isatty()
    show_table(["day (UTC)", "status", *(label for _, label in _FIGURES)],
               [[day["day"], day["status"] + (" flagged" if day["flagged"] else ""),
                 *(_cell({f["name"]: f for f in day["figures"]}.get(name), terminal=terminal)
                   for name, _ in _FIGURES)] for day in result["days"]],
               title=f"{result['account']} ({result['provider']}): "
                     f"{result['from']} → {result['to']}, ours / provider's")
    # Into a pipe the table is the output: the verdict goes beside it, to stderr.
    console = Console(highlight=False, stderr=not terminal)
    if not result["cost_compared"]:
        console.print("cost not compared: the provider's report had no costs")
    flagged = result["flagged_days"]
    if flagged:
        console.print(f"[red]{flagged} day(s) differ by more than "
                      f"{result['tolerance_percent']}%[/] ({result['reconciliation_id']})")
        raise typer.Exit(1)
    console.print(f"every day within {result['tolerance_percent']}% "
                  f"({result['reconciliation_id']})")


@billing_app.command("reconciliations")
def reconciliations(
    account: Annotated[str | None, typer.Option(
        "--account", help="Only this model account's.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many (1-100).")] = 20,
    url: Url = DEFAULT_URL, operator_token: OperatorToken = None, as_json: AsJson = False,
) -> None:
    """Past reconciliations, newest first: the account, its days, how many were flagged."""
    from tenantry.cli.operator import Item, operator_call, text

    found = [Item(r) for r in operator_call(
        url, operator_token, "GET", "/admin/v1/billing/reconciliations",
        params={"limit": limit, **({"account": account} if account else {})})]
    print_items(found, as_json, ["reconciliation_id", "account", "provider", "from", "to",
                                 "flagged days", "created (UTC)"],
                lambda r: [text(r.raw[k]) for k in ("reconciliation_id", "account",
                                                    "provider", "from", "to",
                                                    "flagged_days", "created_at")])
