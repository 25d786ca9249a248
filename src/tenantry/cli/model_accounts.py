"""``tenantry model-accounts``: the tenant's own model provider accounts (bring your own
key: docs/how-to/own-model-keys.md) — registered, listed, shown, given a new key and
removed with the tenant's key over the platform's API, with the client SDK.

The provider key is read from standard input or a hidden prompt, as ``tenantry secrets
put`` reads a value: never from the command line, where the shell's history would keep it
and ``ps`` would show it to every user of the machine. No command reads it back.

Exit status: 0 done; 2 bad input, configuration, or an error answer (one line, e.g.
``error: 422: …`` for a base URL the operator's rules refuse)."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from tenantry.cli.help import App
from tenantry.cli.options import DEFAULT_URL, ApiKey, OnTenant, OperatorToken, Url
from tenantry.cli.remote import AsJson, fetch, print_fields, print_list, sdk_client
from tenantry.cli.secrets import read_value
from tenantry.cli.tool_servers import when

if TYPE_CHECKING:
    from tenantry.client import ModelAccount

model_accounts_app = App(help="A tenant's own model provider accounts (bring your own "
                              "key): register, list, show, rotate-key, remove (as a "
                              "tenant: TENANTRY_API_KEY; list and show for any tenant as "
                              "the operator: --tenant).")

AccountId = Annotated[str, typer.Argument(help="The account's id (own-...).")]
KEY_NAME = "the provider API key"


class Provider(StrEnum):
    openai = "openai"
    anthropic = "anthropic"


def _limit(value: int | None) -> str:
    return "—" if value is None else str(value)


def _rows(account: ModelAccount) -> list[list[str]]:
    return [["account_id", account.account_id], ["provider", account.provider],
            ["base url", account.base_url], ["models", " ".join(account.models)],
            ["region", account.region], ["rpm", _limit(account.rpm)],
            ["tpm", _limit(account.tpm)], ["priority", str(account.priority)],
            ["key (vault secret)", account.secret or "—"],
            ["enabled", "yes" if account.enabled else "no"],
            ["registered by", account.registered_by],
            ["created (UTC)", when(account.created_at)]]


@model_accounts_app.command("register")
def register(
    provider: Annotated[Provider, typer.Option(
        help="Wire format: openai (chat completions: OpenAI, Azure-style, vLLM, ...) or "
             "anthropic (messages).")],
    base_url: Annotated[str, typer.Option(
        help="OpenAI style ends in /v1; Anthropic style is the origin. https, on a host "
             "the operator allows.")],
    model: Annotated[list[str], typer.Option(
        help="A model it serves for your runs (repeat for more; `*` any, `family/*` a "
             "family). Each named model needs a price.")],
    region: Annotated[str, typer.Option(
        help="Where the provider processes your data: your tenant's region or one "
             "inside it.")],
    rpm: Annotated[int | None, typer.Option(min=1, help="Your own requests-per-minute "
                                                        "limit for it.")] = None,
    tpm: Annotated[int | None, typer.Option(min=1, help="Your own tokens-per-minute "
                                                        "limit for it.")] = None,
    priority: Annotated[int | None, typer.Option(
        min=-1000, max=1000, help="Lower is preferred among your accounts (default 0).")]
        = None,
    url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False,
) -> None:
    """Register one of your own provider accounts: it serves only your runs, for the models
    named. The provider key comes from standard input (`tenantry model-accounts register
    ... < key.txt`) or a hidden prompt — never from an argument; it is kept in your vault
    and never shown again."""
    key = read_value(KEY_NAME)
    with sdk_client(url, api_key) as client:
        account = client.model_accounts.register(
            provider=provider.value, base_url=base_url, models=model, region=region,
            api_key=key, rpm=rpm, tpm=tpm, priority=priority)
    print_fields(account, as_json, _rows)


@model_accounts_app.command("list")
def list_accounts(url: Url = DEFAULT_URL, api_key: ApiKey = None, tenant: OnTenant = None,
                  operator_token: OperatorToken = None, as_json: AsJson = False) -> None:
    """Your own accounts (the operator's registrations for you too), disabled ones
    included, by id (every page). Never a key."""
    print_list(url, api_key, as_json, lambda client: client.model_accounts.list,
               ["account_id", "provider", "base url", "models", "region", "rpm", "tpm",
                "priority", "enabled", "by"],
               lambda a: [a.account_id, a.provider, a.base_url, " ".join(a.models), a.region,
                          _limit(a.rpm), _limit(a.tpm), str(a.priority),
                          "yes" if a.enabled else "no", a.registered_by],
               tenant=tenant, operator_token=operator_token)


@model_accounts_app.command("show")
def show(account_id: AccountId, url: Url = DEFAULT_URL, api_key: ApiKey = None,
         tenant: OnTenant = None, operator_token: OperatorToken = None,
         as_json: AsJson = False) -> None:
    """One enabled account of yours: where it is, what it serves, its limits."""
    print_fields(fetch(url, api_key, lambda client: client.model_accounts.get(account_id),
                       tenant=tenant, operator_token=operator_token), as_json, _rows)


@model_accounts_app.command("rotate-key")
def rotate_key(account_id: AccountId, url: Url = DEFAULT_URL,
               api_key: ApiKey = None) -> None:
    """Replace an account's provider key (from standard input or a hidden prompt); workers
    use the new one within five minutes."""
    key = read_value(KEY_NAME)
    with sdk_client(url, api_key) as client:
        account = client.model_accounts.rotate_key(account_id, key)
    typer.echo(f"replaced the key of {account.account_id}")


@model_accounts_app.command("remove")
def remove(account_id: AccountId, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Stop routing your runs to an account (runs on it move to another on their next
    step); its key is deleted from your vault. It stays listed, disabled."""
    with sdk_client(url, api_key) as client:
        client.model_accounts.disable(account_id)
    typer.echo(f"removed model account {account_id}")
