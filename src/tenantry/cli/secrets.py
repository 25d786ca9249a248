"""``tenantry secrets``: the tenant's vault — the secrets its tool servers send as their
bearer token (or an OAuth client's secret) — put, listed and removed with the tenant's key
over the platform's API, with the client SDK. Write-only: no command (and no route) reads a
value back.

A value is read from standard input or a hidden prompt, never from the command line, where
it would be kept in the shell's history and shown to every user of the machine by ``ps``.

Exit status: 0 done; 1 a removal the platform refused (a tool server still sends the
secret); 2 bad input, configuration, or another error answer (one line)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from tenantry.cli.common import fail
from tenantry.cli.help import App
from tenantry.cli.options import DEFAULT_URL, ApiKey, OnTenant, OperatorToken, Url
from tenantry.cli.remote import AsJson, print_list, sdk_client
from tenantry.cli.tool_servers import when

secrets_app = App(help="A tenant's vault secrets, for its tool servers: put, list, remove "
                       "(as a tenant: TENANTRY_API_KEY; put and list for any tenant as the "
                       "operator: --tenant). Values are write-only.")

SecretName = Annotated[str, typer.Argument(help="The secret's name (letters, digits, . _ -).")]


def read_value(name: str) -> str:
    """The value: standard input when it is not a terminal (one trailing line break left
    out, as ``echo`` and a file's last line add it), else a hidden prompt, asked twice."""
    if sys.stdin.isatty():
        value: str = typer.prompt(f"Value of {name}", hide_input=True,
                                  confirmation_prompt=True)
    else:
        value = sys.stdin.read()
        for end in ("\r\n", "\n"):
            if value.endswith(end):
                value = value[:-len(end)]
                break
    if not value:
        fail("the value is empty: give it on standard input or at the prompt")
    return value


@secrets_app.command("put")
def put(name: SecretName, url: Url = DEFAULT_URL, api_key: ApiKey = None,
        tenant: OnTenant = None, operator_token: OperatorToken = None) -> None:
    """Store a secret, or replace its value (servers that send it use the new one within a
    minute). The value comes from standard input (`tenantry secrets put crm-token <
    token.txt`) or a hidden prompt — never from an argument, which the shell's history
    would keep."""
    value = read_value(name)
    with sdk_client(url, api_key, tenant=tenant, operator_token=operator_token) as client:
        stored = client.secrets.put(name, value)
    typer.echo(f"stored secret {stored.name}" + (" (its value replaced)" if stored.replaced
                                                 else ""))


@secrets_app.command("list")
def list_secrets(url: Url = DEFAULT_URL, api_key: ApiKey = None, tenant: OnTenant = None,
                 operator_token: OperatorToken = None, as_json: AsJson = False) -> None:
    """Your tenant's secrets: names and dates, never values (every page)."""
    print_list(url, api_key, as_json, lambda client: client.secrets.list,
               ["name", "created (UTC)", "updated (UTC)"],
               lambda s: [s.name, when(s.created_at), when(s.updated_at)],
               tenant=tenant, operator_token=operator_token)


@secrets_app.command("remove")
def remove(name: SecretName, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Delete a secret. Refused (exit status 1) while a tool server of your tenant still
    sends it: remove that server first."""
    from tenantry.client import Conflict

    with sdk_client(url, api_key) as client:
        try:
            client.secrets.delete(name)
        except Conflict as exc:
            typer.secho(f"refused: {exc.detail}", fg="red", err=True)
            raise typer.Exit(1) from None
    typer.echo(f"removed secret {name}")
