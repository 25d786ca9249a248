"""``tenantry users``: the tenant's people (with a key holding ``keys:manage``) — invited
with a role, listed, shown, given another role, disabled, and sent one-time sign-in links
to the tenant console, over the platform's API with the client SDK.

A sign-in link is printed once, alone on standard output (so ``tenantry users
sign-in-link usr_… | mail …`` sends it and nothing else); until when it works goes to
standard error.

Exit status: 0 done; 2 bad input, configuration, or an error answer (one line)."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from tenantry.cli.help import App
from tenantry.cli.options import DEFAULT_URL, ApiKey, Url
from tenantry.cli.remote import AsJson, fetch, print_fields, print_list, sdk_client
from tenantry.cli.tool_servers import when

if TYPE_CHECKING:
    from tenantry.client import User

users_app = App(help="Your tenant's people and their roles in the tenant console: invite, "
                     "list, show, set-role, disable, sign-in-link (as a tenant: "
                     "TENANTRY_API_KEY, with keys:manage).")

UserId = Annotated[str, typer.Argument(help="The user's id (usr_...).")]


class Role(StrEnum):
    viewer = "viewer"
    approver = "approver"
    developer = "developer"
    admin = "admin"


ROLE_HELP = ("viewer (runs:read), approver (+ approvals:decide), developer (+ runs:write, "
             "agents:manage, integrations:manage) or admin (every scope).")


def _rows(user: User) -> list[list[str]]:
    return [["user_id", user.user_id], ["email", user.email], ["role", user.role],
            ["scopes", " ".join(user.scopes)], ["made by", user.created_by],
            ["created (UTC)", when(user.created_at)],
            ["disabled (UTC)", when(user.disabled_at)]]


@users_app.command("invite")
def invite(
    email: Annotated[str, typer.Argument(help="Their address (one user per address).")],
    role: Annotated[Role, typer.Option(help=f"What they may do: {ROLE_HELP}")],
    url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False,
) -> None:
    """A new user of your tenant with a role; they sign in with a link you make for them
    (tenantry users sign-in-link)."""
    with sdk_client(url, api_key) as client:
        user = client.users.invite(email, role=role.value)
    print_fields(user, as_json, _rows)


@users_app.command("list")
def list_users(url: Url = DEFAULT_URL, api_key: ApiKey = None,
               as_json: AsJson = False) -> None:
    """Your users, disabled ones included, newest first (every page)."""
    print_list(url, api_key, as_json, lambda client: client.users.list,
               ["user_id", "email", "role", "made by", "created (UTC)", "disabled (UTC)"],
               lambda u: [u.user_id, u.email, u.role, u.created_by, when(u.created_at),
                          when(u.disabled_at)])


@users_app.command("show")
def show(user_id: UserId, url: Url = DEFAULT_URL, api_key: ApiKey = None,
         as_json: AsJson = False) -> None:
    """One user: their role and the scopes it gives them."""
    print_fields(fetch(url, api_key, lambda client: client.users.get(user_id)), as_json, _rows)


@users_app.command("set-role")
def set_role(
    user_id: UserId,
    role: Annotated[Role, typer.Argument(help=f"The new role: {ROLE_HELP}")],
    url: Url = DEFAULT_URL, api_key: ApiKey = None,
) -> None:
    """Give a user another role, in force from their next page."""
    with sdk_client(url, api_key) as client:
        user = client.users.set_role(user_id, role.value)
    typer.echo(f"{user.user_id} ({user.email}) is now {user.role}")


@users_app.command("disable")
def disable(user_id: UserId, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Disable a user: their sessions end and their unused links stop working at once. They
    stay listed (the audit trail names them)."""
    with sdk_client(url, api_key) as client:
        user = client.users.disable(user_id)
    typer.echo(f"disabled {user.user_id} ({user.email})")


@users_app.command("sign-in-link")
def sign_in_link(user_id: UserId, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """A one-time link that signs the user in to the tenant console: used once, within 15
    minutes. Printed once; send it to them yourself."""
    with sdk_client(url, api_key) as client:
        link = client.users.sign_in_link(user_id)
    typer.echo(f"works once, until {when(link.expires_at)} UTC — shown this once", err=True)
    typer.echo(link.url)
