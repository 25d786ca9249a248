"""The client SDK (``client.secrets``, ``client.tool_servers``) and the CLI (``tenantry
secrets``, ``tenantry tool-servers``) against the real tenant routes (``/v1/secrets``,
``/v1/tool-servers``): a tenant stores a secret, registers a server that sends it, lists,
reads, re-pins, connects an OAuth server through the browser's round trip, and removes
them, typed all the way; the operator's rules refuse a URL as a typed exception.

The servers are on this machine: the ``api`` fixture lets tenants register loopback
addresses (``tenant_tool_servers_allow_private``), as a developer's platform would; the
refusal test serves the API with the default rules. (The routes' own behaviour — the
guarded connections, the rules in detail — is tests/integration/test_own_tool_servers.py.)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from tenantry.client import (
    AsyncClient,
    Client,
    Conflict,
    NotFound,
    Page,
    Secret,
    ToolServer,
    ToolServerConnection,
    ToolServerUrlRefused,
)
from tenantry.ids import TenantId
from tenantry.testing.mcp_server import EffectsMcpServer
from tests.support.api import Api, serving_api
from tests.support.cli import cli
from tests.support.oauth_mcp_server import OAuthMcpServer


async def _tenant_key(api: Api) -> tuple[str, str]:
    tenant, h = await api.tenant()
    return tenant, h["Authorization"].removeprefix("Bearer ")


async def _authorize(api: Api, authorization_url: str) -> None:
    """What the browser of the person authorizing does: open the URL, and follow the
    authorization server's redirect back to the platform's callback."""
    back = await api.client.get(authorization_url, follow_redirects=False)
    assert back.status_code == 302, back.text
    callback = back.headers["location"]
    assert callback.startswith(f"{api.base_url}/oauth/callback?")
    r = await api.client.get(callback)
    assert r.status_code == 200 and "is connected" in r.text, r.text


async def test_the_sdk_puts_a_secret_registers_pins_connects_and_removes_servers(
    api: Api,
) -> None:
    tenant, key = await _tenant_key(api)
    async with EffectsMcpServer() as effects, OAuthMcpServer() as hosted, \
            AsyncClient(api.base_url, key) as client:
        stored = await client.secrets.put("effects-key", "s3cret")
        assert isinstance(stored, Secret) and stored.name == "effects-key"
        assert not stored.replaced
        rotated = await client.secrets.put("effects-key", "rotated")
        assert rotated.replaced and rotated.created_at == stored.created_at
        assert await client.secrets.get("effects-key") == rotated
        # Write-only: the answers carry names and dates, never the value.
        assert set(stored.raw) == {"name", "created_at", "updated_at"}
        assert await api.platform.vault.get(TenantId(tenant), "effects-key") == "rotated"

        server = await client.tool_servers.register(
            "effects", effects.url, honours_idempotency_keys=True, secret="effects-key",
            call_timeout_seconds=45)
        assert isinstance(server, ToolServer)
        assert (server.name, server.url, server.registered_by, server.secret,
                server.call_timeout_seconds, server.oauth) == (
            "effects", effects.url, "tenant", "effects-key", 45, None)
        assert server.honours_idempotency_keys and {"echo", "effect"} <= set(server.tools)
        listed = await client.tool_servers.list()
        assert list(listed) == [server] and listed.next_cursor is None
        assert await client.tool_servers.get("effects") == server
        repinned = await client.tool_servers.pin("effects")
        assert (repinned.tools, repinned.tools_sha256) == (server.tools, server.tools_sha256)
        with pytest.raises(Conflict, match="OAuth"):
            await client.tool_servers.connect("effects")  # it authorizes with its secret
        with pytest.raises(Conflict) as in_use:
            await client.secrets.delete("effects-key")
        assert in_use.value.extra["tool_servers"] == ["effects"]

        # An OAuth server: registered waiting, connected by the browser's round trip.
        waiting = await client.tool_servers.register("hosted", hosted.url,
                                                     honours_idempotency_keys=False)
        assert waiting.tools == () and waiting.oauth is not None
        assert (waiting.oauth.status, waiting.oauth.issuer) == (
            "authorization_required", hosted.origin)
        connection = await client.tool_servers.connect("hosted")
        assert isinstance(connection, ToolServerConnection)
        assert connection.authorization_url is not None
        assert connection.server.name == "hosted"
        await _authorize(api, connection.authorization_url)
        connected = await client.tool_servers.get("hosted")
        assert connected.oauth is not None and connected.oauth.connected
        assert connected.oauth.connected_at is not None and connected.tools == ("whoami",)

        await client.tool_servers.remove("effects")
        await client.tool_servers.remove("hosted")
        with pytest.raises(NotFound):
            await client.tool_servers.get("effects")
        await client.secrets.delete("effects-key")
        with pytest.raises(NotFound):
            await client.secrets.get("effects-key")
        assert list(await client.secrets.list()) == []
        assert list(await client.tool_servers.list()) == []


async def test_the_blocking_client_pages_through_secrets_and_servers(api: Api) -> None:
    _, key = await _tenant_key(api)
    async with EffectsMcpServer() as effects, OAuthMcpServer() as hosted:
        def tour() -> tuple[list[list[str]], list[list[str]]]:
            with Client(api.base_url, key) as client:
                for name in ("a-key", "b-key", "c-key"):
                    client.secrets.put(name, f"value of {name}")
                # One server per tool name: the OAuth ones serve none until connected.
                client.tool_servers.register("alpha", effects.url, secret="a-key",
                                             honours_idempotency_keys=True)
                for name in ("beta", "gamma"):
                    client.tool_servers.register(name, hosted.url,
                                                 honours_idempotency_keys=False)
                return (_pages(lambda c: client.secrets.list(limit=2, cursor=c)),
                        _pages(lambda c: client.tool_servers.list(limit=2, cursor=c)))

        secret_pages, server_pages = await asyncio.to_thread(tour)
    assert secret_pages == [["a-key", "b-key"], ["c-key"]]
    assert server_pages == [["alpha", "beta"], ["gamma"]]


def _pages(read: Callable[[str | None], Page[Secret] | Page[ToolServer]]) -> list[list[str]]:
    """Every page's names, following ``next_cursor`` to the end."""
    pages: list[list[str]] = []
    cursor: str | None = None
    while True:
        page = read(cursor)
        pages.append([item.name for item in page])
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor


async def test_a_url_the_operators_rules_refuse_is_a_typed_exception(
    database_dsn: str,
) -> None:
    async with serving_api(database_dsn, tenant_tool_servers_allow_private=False) as api, \
            EffectsMcpServer() as effects:
        _, key = await _tenant_key(api)
        async with AsyncClient(api.base_url, key) as client:
            with pytest.raises(ToolServerUrlRefused, match="https") as plain:
                await client.tool_servers.register("effects", effects.url,
                                                   honours_idempotency_keys=True)
            loopback = effects.url.replace("http://", "https://")
            with pytest.raises(ToolServerUrlRefused, match="loopback") as inside:
                await client.tool_servers.register("effects", loopback,
                                                   honours_idempotency_keys=True)
            assert list(await client.tool_servers.list()) == []
    for refused in (plain.value, inside.value):
        assert (refused.status, refused.type) == (422, "tool_server_url_refused")
        assert refused.extra.get("field") == "url"


async def test_the_cli_manages_a_tenants_servers_and_secrets(api: Api) -> None:
    tenant, key = await _tenant_key(api)
    env = {"TENANTRY_URL": api.base_url, "TENANTRY_API_KEY": key}
    async with EffectsMcpServer() as effects, OAuthMcpServer() as hosted:
        # The value on stdin, as from a file or a pipe: never an argument.
        code, out, err = await cli("secrets", "put", "effects-key", env=env,
                                   stdin="s3cret\n")
        assert (code, out) == (0, "stored secret effects-key\n"), err
        assert await api.platform.vault.get(TenantId(tenant), "effects-key") == "s3cret"

        code, out, err = await cli("tool-servers", "register", "effects", effects.url,
                                   "--honours-idempotency-keys", "--secret", "effects-key",
                                   env=env)
        assert code == 0, err
        fields = dict(line.split("\t", 1) for line in out.splitlines()[1:])
        assert fields["registered by"] == "tenant" and fields["secret"] == "effects-key"
        assert "echo" in fields["tools"].split(", ")

        code, out, err = await cli("tool-servers", "register", "hosted", hosted.url,
                                   "--no-honours-idempotency-keys", env=env)
        assert code == 0 and "tenantry tool-servers connect hosted" in err, err
        # Into a pipe: tab-separated lines, a header first, whole values.
        code, out, err = await cli("tool-servers", "list", env=env)
        assert code == 0, err
        rows = [line.split("\t") for line in out.splitlines()]
        assert [row[:4] for row in rows[1:]] == [
            ["effects", effects.url, str(len(fields["tools"].split(", "))),
             "secret effects-key"],
            ["hosted", hosted.url, "0", "oauth authorization_required"]]
        code, out, err = await cli("tool-servers", "show", "effects", "--json", env=env)
        assert code == 0 and json.loads(out) == (await api.client.get(
            "/v1/tool-servers/effects", headers={"Authorization": f"Bearer {key}"})).json()
        code, out, err = await cli("tool-servers", "pin", "effects", env=env)
        assert code == 0 and out.startswith("pinned effects: "), err

        # connect prints the URL alone on stdout: the person authorizing opens it.
        code, out, err = await cli("tool-servers", "connect", "hosted", env=env)
        assert code == 0 and "browser" in err, err
        await _authorize(api, out.strip())
        code, out, err = await cli("tool-servers", "show", "hosted", env=env)
        assert code == 0 and "oauth\tconnected" in out.splitlines(), out
        code, _, err = await cli("tool-servers", "connect", "effects", env=env)
        assert code == 2 and err.startswith("error: 409: "), err

        # A secret a server still sends is not removed (exit 1, the server named).
        code, _, err = await cli("secrets", "remove", "effects-key", env=env)
        assert code == 1 and "refused" in err and "effects" in err, err
        for name in ("effects", "hosted"):
            code, out, err = await cli("tool-servers", "remove", name, env=env)
            assert (code, out) == (0, f"removed tool server {name}\n"), err
        code, out, err = await cli("secrets", "remove", "effects-key", env=env)
        assert (code, out) == (0, "removed secret effects-key\n"), err
        code, out, err = await cli("secrets", "list", env=env)
        assert (code, out) == (0, "name\tcreated (UTC)\tupdated (UTC)\n"), err
        code, _, err = await cli("tool-servers", "show", "effects", env=env)
        assert code == 2 and err.startswith("error: 404: "), err
