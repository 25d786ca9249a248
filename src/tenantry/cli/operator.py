"""How the CLI acts as the operator (TENANTRY_OPERATOR_TOKEN).

Two shapes, one rule a reader can guess from ``tenantry --help``:

- A group a tenant has too (``runs``, ``tool-servers``, ``secrets``, ``model-accounts``,
  ``api-keys``, ``approvals``) takes ``--tenant T``: the same command then acts on tenant
  T as the operator, through the operator API's form of the same route
  (``/v1/tool-servers/x`` → ``/admin/v1/tenants/T/tool-servers/x``), which takes and
  answers the same bodies. So one command prints one way whoever runs it, and an operator
  onboarding a tenant types what the tenant's own docs show, plus ``--tenant``. Only the
  routes the operator API has a form of are sent (``operator_forms.OPERATOR_FORMS``); the
  commands without one take no ``--tenant``.
- What only the operator does has its own group (``tenants``, ``prices``, the cross-tenant
  ``approvals inbox``), which always sends the operator token.

The tenant's commands use the client SDK, which speaks the tenant API only; as the
operator they use the same SDK over ``operator_forms.OperatorTransport``, which moves each
request to the operator's form of its route (``remote.sdk_client`` picks it for
``--tenant``). The operator-only groups call their routes with ``operator_call``.

Why not separate operator groups mirroring the tenant's (``tenantry operator
tool-servers …``)? Two commands per action would print the same things two ways and drift;
``--tenant`` on the one command keeps one printer, one set of flags, and a help page that
says both ways in its first line."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tenantry.cli.common import fail
from tenantry.cli.remote import PAGE, problem


def token(operator_token: str | None) -> str:
    if not operator_token:
        fail("the operator token is needed: --operator-token or TENANTRY_OPERATOR_TOKEN")
    return operator_token


def operator_call(url: str, operator_token: str | None, method: str, path: str, *,
                  json: Any = None, params: Mapping[str, Any] | None = None,
                  timeout: float = 30.0) -> Any:
    """The JSON answer of an operator route (None for an empty one); an error answer, or
    no answer, is the one-line error (exit status 2)."""
    import httpx2

    auth = {"Authorization": f"Bearer {token(operator_token)}"}
    try:
        response = httpx2.request(method, f"{url}{path}", json=json, params=params,
                                  headers=auth, timeout=timeout)
    except (OSError, httpx2.TransportError) as exc:  # httpx2's are not OSErrors
        fail(f"cannot reach {url}: {exc}")
    if not response.is_success:
        problem(response)
    return response.json() if response.content else None


def operator_pages(url: str, operator_token: str | None, path: str,
                   params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every item of an operator list route (``data`` and ``next_cursor``), page by page."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        page = operator_call(url, operator_token, "GET", path,
                             params={**(params or {}), "limit": PAGE,
                                     **({"cursor": cursor} if cursor else {})})
        items += page["data"]
        cursor = page.get("next_cursor")
        if cursor is None or not page["data"]:
            return items


@dataclass(frozen=True, slots=True)
class Item:
    """An API answer as ``print_items`` and ``print_fields`` take it (its JSON as ``raw``)."""

    raw: Mapping[str, Any] = field(default_factory=dict)


def text(value: Any) -> str:
    """A JSON value in a table cell: as it reads, nested values as compact JSON."""
    import json

    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)


def all_fields(item: Item) -> list[list[str]]:
    """Every field the API answered, in its order: a field the API adds shows up here
    with no change to the command."""
    return [[name, text(value)] for name, value in item.raw.items()]
