"""A tenant's tool servers in the console (docs/how-to/console.md): each server with its
tools, who registered it and, for an OAuth server, its connection; *Connect* is a form post
with the session's CSRF token (refused without it: nothing starts, nothing is logged) that
answers with a redirect to the server's authorization server, whose answer comes back to
the platform's callback and connects it; every attempt is in the action log. The whole
story in a browser, with runs waiting for the server: tests/e2e/test_console_tool_servers.py."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator, Mapping

import asyncpg
import pytest

from tests.support.api import Api
from tests.support.console import logged_actions, operator
from tests.support.oauth_mcp_server import OAuthMcpServer
from tests.support.worker import Fakes

FORGED = {"csrf": "0" * 64}


@pytest.fixture
async def whoami() -> AsyncIterator[OAuthMcpServer]:
    async with OAuthMcpServer() as server:
        yield server


def _row(page: str, name: str) -> str:
    """The page's table row of server ``name``."""
    start = page.index(f'<tr data-server="{name}"')
    return page[start:page.index("</tr>", start)]


def _form_action(headers: Mapping[str, str]) -> set[str]:
    """The sources of the page's Content-Security-Policy form-action."""
    directives = (d.split() for d in headers["content-security-policy"].split(";"))
    return next(set(d[1:]) for d in directives if d and d[0] == "form-action")


async def test_the_page_shows_each_server_and_connect_goes_through_the_authorization_server(
    api: Api, fakes: Fakes, whoami: OAuthMcpServer, admin_conn: asyncpg.Connection,
) -> None:
    me = operator()
    tenant, _ = await api.tenant("Globex")
    await api.tool_server(tenant, fakes.mcp.url, name="effects")
    await api.tool_server(tenant, whoami.url, name="whoami", honours_idempotency_keys=False)
    page_url = f"/console/tenants/{tenant}/tool-servers"

    # Linked from the tenant's row, and behind the login like every page.
    tenants = await api.client.get("/console/tenants", headers=me.headers)
    assert f'href="{page_url}"' in tenants.text
    anonymous = await api.client.get(page_url)
    assert anonymous.status_code == 303 and "/console/login" in anonymous.headers["location"]

    page = await api.client.get(page_url, headers=me.headers)
    assert page.status_code == 200
    assert "Tenant Globex: tool servers" in page.text
    effects, waiting = _row(page.text, "effects"), _row(page.text, "whoami")
    assert 'data-oauth="none"' in effects and "no OAuth" in effects
    assert "/connect" not in effects  # nothing to connect
    assert html.escape(fakes.mcp.url) in effects and "operator" in effects
    assert 'data-oauth="authorization_required"' in waiting
    assert "authorization required</span>: not connected yet" in waiting
    assert f"authorization code at {whoami.origin}" in waiting
    assert f'action="{page_url}/whoami/connect"' in waiting
    assert f'name="csrf" value="{me.csrf}"' in waiting
    # Its Connect form may lead to the authorization server (browsers check a form's
    # redirects against form-action too), and on to the platform's callback.
    assert _form_action(page.headers) == {"'self'", api.base_url, whoami.origin}

    connect = f"{page_url}/whoami/connect"
    for form in ({}, FORGED):
        refused = await api.client.post(connect, headers=me.headers, data=form)
        assert refused.status_code == 403
    assert whoami.registrations == 0 and await logged_actions(admin_conn) == []

    # A server that does not use OAuth: refused, and on record as refused.
    refused = await api.client.post(f"{page_url}/effects/connect", headers=me.headers,
                                    data=me.form())
    assert refused.status_code == 409 and "does not authorize with OAuth" in refused.text
    for missing in (f"{page_url}/nope/connect", f"{page_url}/NUL%00/connect",
                    f"/console/tenants/ten_{'0' * 32}/tool-servers/whoami/connect"):
        r = await api.client.post(missing, headers=me.headers, data=me.form())
        assert r.status_code == 404, missing

    sent = await api.client.post(connect, headers=me.headers, data=me.form())
    assert sent.status_code == 303
    authorize = sent.headers["location"]
    assert authorize.startswith(f"{whoami.origin}/authorize?")
    assert whoami.registrations == 1  # the platform registered itself as a client
    back = await api.client.get(authorize, follow_redirects=False)
    assert back.status_code == 302
    assert back.headers["location"].startswith(f"{api.base_url}/oauth/callback?")
    landed = await api.client.get(back.headers["location"])
    assert landed.status_code == 200 and "whoami is connected" in landed.text

    page = await api.client.get(page_url, headers=me.headers)
    connected = _row(page.text, "whoami")
    assert 'data-oauth="connected"' in connected and ">connected</span> since" in connected
    assert '<td class="num">1</td>' in connected  # its tool list, read and pinned
    assert 'data-waiting="0"' in connected
    assert not any(t in page.text for t in whoami.access_tokens + whoami.refresh_tokens)

    assert await logged_actions(admin_conn) == [
        (me.actor, "connect_tool_server", tenant, "effects",
         "refused: This tool server does not authorize with OAuth."),
        (me.actor, "connect_tool_server", tenant, "whoami", "done"),
    ]
    shown = await api.client.get(f"/console/actions?tenant={tenant}", headers=me.headers)
    assert "connect tool server" in shown.text and "sent to its authorization server" in shown.text


async def test_an_unknown_tenant_is_the_consoles_404(api: Api) -> None:
    me = operator()
    for tenant in (f"ten_{'0' * 32}", "not-an-id"):
        r = await api.client.get(f"/console/tenants/{tenant}/tool-servers", headers=me.headers)
        assert r.status_code == 404 and "No tenant with this id." in r.text
    tenant, _ = await api.tenant("Empty")
    r = await api.client.get(f"/console/tenants/{tenant}/tool-servers", headers=me.headers)
    assert r.status_code == 200 and "No tool servers." in r.text
    # No OAuth server on the page: its forms lead nowhere but this server.
    assert _form_action(r.headers) == {"'self'"}


async def test_a_client_credentials_server_is_connected_at_once_without_a_browser(
    api: Api, whoami: OAuthMcpServer, admin_conn: asyncpg.Connection,
) -> None:
    """A machine-to-machine server (a client issued beforehand, its secret in the tenant's
    vault): Connect gets its token there and then, reads and pins its tools, and comes back
    to the page saying so; nothing goes through a browser."""
    me = operator()
    tenant, _ = await api.tenant("Machines")
    whoami.machine_client("platform-bot", "cc-secret-value")
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/secrets/bot-secret",
                             headers=api.operator, json={"value": "cc-secret-value"})
    assert r.status_code in (200, 201), r.text
    await api.tool_server(tenant, whoami.url, name="machine", oauth={
        "grant": "client_credentials", "client_id": "platform-bot",
        "client_secret": "bot-secret"})
    page_url = f"/console/tenants/{tenant}/tool-servers"
    page = await api.client.get(page_url, headers=me.headers)
    assert "client credentials at" in _row(page.text, "machine")
    assert _form_action(page.headers) == {"'self'", api.base_url, whoami.origin}

    done = await api.client.post(f"{page_url}/machine/connect", headers=me.headers,
                                 data=me.form())
    assert done.status_code == 303
    assert done.headers["location"] == f"{page_url}?connected=machine"
    assert (whoami.registrations, whoami.authorizations) == (0, 0)  # no browser, no client
    assert [i.grant for i in whoami.issued] == ["client_credentials"]
    page = await api.client.get(done.headers["location"], headers=me.headers)
    assert "Tool server <code>machine</code> connected." in page.text
    row = _row(page.text, "machine")
    assert 'data-oauth="connected"' in row and '<td class="num">1</td>' in row
    assert not any(t in page.text for t in whoami.access_tokens)
    assert "cc-secret-value" not in page.text
    assert await logged_actions(admin_conn) == [
        (me.actor, "connect_tool_server", tenant, "machine", "done")]
