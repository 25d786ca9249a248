"""``tenantry usage``: tokens, cost and sandbox time as a table, a tenant's (API key) or
every tenant's (the operator token), over the platform's public API."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tenantry.cli.common import fail
from tenantry.cli.options import DEFAULT_URL, ApiKey, OperatorToken, Url
from tenantry.cli.remote import headers, problem, show_table
from tenantry.cli.tables import Cell


def usage(
    url: Url = DEFAULT_URL, api_key: ApiKey = None, operator_token: OperatorToken = None,
    group_by: Annotated[str | None, typer.Option(
        "--group-by", help="agent or day (tenant view)")] = None,
    from_: Annotated[str | None, typer.Option("--from", help="YYYY-MM-DD (UTC)")] = None,
    to: Annotated[str | None, typer.Option("--to", help="YYYY-MM-DD (UTC)")] = None,
) -> None:
    """Tokens, cost and sandbox time this month (or --from/--to), as a table.

    With an API key: your tenant's, optionally by agent or day. With the operator token:
    every tenant's."""
    import httpx2

    params = {k: v for k, v in {"from": from_, "to": to, "group_by": group_by}.items() if v}
    if api_key:
        path, auth = "/v1/usage", headers(api_key)
    elif operator_token:
        path, auth = "/admin/v1/usage", {"Authorization": f"Bearer {operator_token}"}
        params.pop("group_by", None)
    else:
        fail("an API key (tenant view) or the operator token (all tenants) is needed")
    try:
        response = httpx2.get(f"{url}{path}", params=params, headers=auth)
    except OSError as exc:
        fail(f"cannot reach {url}: {exc}")
    if response.status_code != 200:
        problem(response)
    body = response.json()
    first = "tenant" if path.startswith("/admin") else (group_by or "total")
    # Tenants and agents by name too: a list of them, a request a page.
    named = {"tenant": "/admin/v1/tenants", "agent": "/v1/agents"}.get(first)
    names = _names(url, named, auth, f"{first}_id") if named else None
    rows: list[list[Cell]] = []

    def add(key: str, row: dict[str, Any]) -> None:
        rows.append([key, *([names.get(key, "")] if names is not None else []),
                     row["runs"], row["calls"], row["input_tokens"],
                     row["cached_input_tokens"], row["output_tokens"],
                     f"{row['cost_micros'] / 1e6:.4f}", f"{row['sandbox_ms'] / 1000:.1f}",
                     f"{row['sandbox_cost_micros'] / 1e6:.4f}"])

    title = None
    if isinstance(body, list):
        for row in body:
            add(row["tenant_id"], row)
    else:
        for row in body["groups"]:
            add(row["key"], row)
        add("total" if body["groups"] else body["tenant_id"], body["total"])
        title = f"{body['tenant_id']}: {body['from']} → {body['to']}"
    show_table([first, *(["name"] if names is not None else []), "runs", "model calls",
                "input tokens", "cached", "output tokens", "model $", "sandbox s",
                "sandbox $"], rows, title)



def _names(url: str, path: str, auth: dict[str, str], key: str) -> dict[str, str]:
    """Every item's name by its id (``key``), read page after page from ``path``; what was
    read so far when the list is refused (a key without the scope to read it): the names
    help, the usage is what was asked for."""
    import httpx2

    found: dict[str, str] = {}
    cursor: str | None = None
    while True:
        params = {"limit": "200", **({"cursor": cursor} if cursor else {})}
        try:
            response = httpx2.get(f"{url}{path}", params=params, headers=auth)
        except OSError as exc:
            fail(f"cannot reach {url}: {exc}")
        if response.status_code != 200:
            return found
        page = response.json()
        found |= {str(item[key]): str(item["name"]) for item in page["data"]}
        cursor = page.get("next_cursor")
        if not cursor or not page["data"]:
            return found
