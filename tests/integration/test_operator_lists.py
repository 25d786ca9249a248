"""Operators list and fetch everything they create, page by page, through real HTTP:
tenants, API keys, secrets (names only), tool servers on real MCP servers, model accounts."""

from __future__ import annotations

import base64
import hashlib
import html
import re
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest

from tenantry.api.console import epoch, reads, session
from tenantry.testing.mcp_server import EffectsMcpServer
from tests.support.api import OPERATOR_TOKEN, Api
from tests.support.bank_server import BankMcpServer
from tests.support.db import row_counts

TENANTS = 3
UNROUTABLE = "http://127.0.0.1:9/v1"  # registering an account never calls the provider


@dataclass
class Created:
    """What the operator created, and every one-time secret that must never come back."""

    tenants: dict[str, dict[str, Any]] = field(default_factory=dict)
    keys: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # tenant → id →
    secret_names: dict[str, set[str]] = field(default_factory=dict)
    servers: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    accounts: dict[str, dict[str, Any]] = field(default_factory=dict)  # every account by id
    byok: dict[str, str] = field(default_factory=dict)  # tenant → its own account's id
    forbidden: set[str] = field(default_factory=set)  # must appear in no answer
    bodies: list[str] = field(default_factory=list)  # every answer read, to search

    def never_shown(self, text: str) -> None:
        self.forbidden.add(text)


@pytest.fixture
async def mcp_servers() -> AsyncIterator[tuple[EffectsMcpServer, BankMcpServer]]:
    async with EffectsMcpServer() as effects, BankMcpServer() as bank:
        yield effects, bank


async def _post(api: Api, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    r = await api.client.post(path, json=body, headers=api.operator)
    assert r.status_code == 201, r.text
    created: dict[str, Any] = r.json()
    return created


@pytest.fixture
async def created(api: Api, mcp_servers: tuple[EffectsMcpServer, BankMcpServer]) -> Created:
    effects, bank = mcp_servers
    c = Created()
    for i in range(TENANTS):
        tenant = await _post(api, "/admin/v1/tenants", {"name": f"Tenant {i}"})
        tid = tenant.pop("tenant_id")
        c.never_shown(tenant.pop("webhook_secret"))
        c.tenants[tid] = {"tenant_id": tid, **tenant}
        c.keys[tid] = {}
        for n in range(3):
            key = await _post(api, f"/admin/v1/tenants/{tid}/api-keys", {"name": f"k{n}"})
            plaintext = key.pop("api_key")
            digest = hashlib.sha256(plaintext.encode()).digest()
            c.never_shown(plaintext)
            c.never_shown(digest.hex())
            c.never_shown(base64.b64encode(digest).decode())
            c.keys[tid][key["key_id"]] = {**key, "name": f"k{n}", "revoked_at": None}
        revoked = next(iter(c.keys[tid]))
        r = await api.client.delete(f"/admin/v1/tenants/{tid}/api-keys/{revoked}",
                                    headers=api.operator)
        assert r.status_code == 200, r.text
        c.keys[tid][revoked]["revoked_at"] = r.json()["revoked_at"]
        c.secret_names[tid] = set()
        for name in (f"t{i}-crm", f"t{i}-openai", f"t{i}-spare"):
            value = f"secret-value-{secrets.token_hex(12)}"
            c.never_shown(value)
            r = await api.client.put(f"/admin/v1/tenants/{tid}/secrets/{name}",
                                     json={"value": value}, headers=api.operator)
            assert r.status_code == 201, r.text
            c.secret_names[tid].add(name)
        c.servers[tid] = {}
        for name, url, secret in ((f"fx-{i}", effects.url, f"t{i}-crm"),
                                  (f"bank-{i}", bank.url, None)):
            server = await _post(api, f"/admin/v1/tenants/{tid}/tool-servers", {
                "name": name, "url": url, "honours_idempotency_keys": True, "secret": secret})
            c.servers[tid][name] = server
        own = await api.model_account(f"own-{i}", UNROUTABLE, tenant=tid,
                                      secret_name=f"t{i}-openai")
        c.accounts[str(own["account_id"])] = own
        c.byok[tid] = str(own["account_id"])
    for n in range(2):
        platform_key = f"sk-platform-{secrets.token_hex(12)}"
        c.never_shown(platform_key)
        account = await api.model_account(f"platform-{n}", UNROUTABLE, secret=platform_key)
        c.accounts[str(account["account_id"])] = account
    return c


async def _get(api: Api, c: Created, path: str, **params: Any) -> dict[str, Any]:
    r = await api.client.get(path, params=params, headers=api.operator)
    assert r.status_code == 200, (path, r.text)
    c.bodies.append(r.text)
    body: dict[str, Any] = r.json()
    return body


async def _every_page(api: Api, c: Created, path: str, limit: int) -> list[dict[str, Any]]:
    """Follow next_cursor to the end; each page holds at most ``limit`` items."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(100):
        page = await _get(api, c, path, limit=limit, **({"cursor": cursor} if cursor else {}))
        assert set(page) == {"data", "next_cursor"}
        assert len(page["data"]) <= limit
        items += page["data"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items
    raise AssertionError(f"{path}: more than 100 pages")


def _once(items: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    ids = [item[key] for item in items]
    assert len(ids) == len(set(ids)), f"listed twice: {ids}"
    return {item[key]: item for item in items}


async def test_every_created_resource_is_listed_once_and_fetched(
    api: Api, created: Created,
) -> None:
    c = created
    # Tenants, two per page.
    tenants = _once(await _every_page(api, c, "/admin/v1/tenants", 2), "tenant_id")
    assert tenants == c.tenants
    for tid, tenant in c.tenants.items():
        assert await _get(api, c, f"/admin/v1/tenants/{tid}") == tenant

        keys = _once(await _every_page(api, c, f"/admin/v1/tenants/{tid}/api-keys", 1),
                     "key_id")
        assert set(keys) == set(c.keys[tid])
        for key_id, key in keys.items():
            expected = c.keys[tid][key_id]
            assert set(key) == {"key_id", "prefix", "name", "created_at", "revoked_at", "scopes",
                                "expires_at", "created_by", "replaces"}
            assert (key["prefix"], key["name"], key["created_at"], key["revoked_at"]) == (
                expected["prefix"], expected["name"], expected["created_at"],
                expected["revoked_at"])
            # A revoked key is listed (with revoked_at) but gone from its own URL.
            if key["revoked_at"] is None:
                assert await _get(api, c, f"/admin/v1/tenants/{tid}/api-keys/{key_id}") == key
            else:
                r = await api.client.get(f"/admin/v1/tenants/{tid}/api-keys/{key_id}",
                                         headers=api.operator)
                assert r.status_code == 404 and r.json()["type"] == "not_found", r.text
        assert sum(k["revoked_at"] is not None for k in keys.values()) == 1
        assert list(keys) == sorted(keys, reverse=True), "keys are listed newest first"

        listed_secrets = _once(await _every_page(api, c, f"/admin/v1/tenants/{tid}/secrets", 2),
                               "name")
        assert set(listed_secrets) == c.secret_names[tid]
        for name, secret in listed_secrets.items():
            assert set(secret) == {"name", "created_at", "updated_at"}
            assert await _get(api, c, f"/admin/v1/tenants/{tid}/secrets/{name}") == secret

        servers = _once(await _every_page(api, c, f"/admin/v1/tenants/{tid}/tool-servers", 1),
                        "name")
        assert servers == c.servers[tid]
        for name, server in servers.items():
            assert await _get(api, c, f"/admin/v1/tenants/{tid}/tool-servers/{name}") == server

        own = _once(await _every_page(api, c, f"/admin/v1/tenants/{tid}/model-accounts", 1),
                    "account_id")
        assert list(own) == [c.byok[tid]] and own[c.byok[tid]] == c.accounts[c.byok[tid]]
        assert await _get(api, c, f"/admin/v1/tenants/{tid}/model-accounts/{c.byok[tid]}") \
            == own[c.byok[tid]]

    accounts = _once(await _every_page(api, c, "/admin/v1/model-accounts", 2), "account_id")
    assert accounts == c.accounts
    for account_id, account in accounts.items():
        assert account["enabled"] is True
        assert await _get(api, c, f"/admin/v1/model-accounts/{account_id}") == account

    # Nothing shown once (API keys, webhook secrets), no key hash and no secret value, in
    # any answer read above.
    assert c.bodies
    for body in c.bodies:
        for text in c.forbidden:
            assert text not in body


async def test_a_disabled_account_stays_listed_as_disabled(api: Api, created: Created) -> None:
    r = await api.client.delete("/admin/v1/model-accounts/platform-0", headers=api.operator)
    assert r.status_code == 200 and r.json()["enabled"] is False
    listed = _once(await _every_page(api, created, "/admin/v1/model-accounts", 200),
                   "account_id")
    assert listed["platform-0"]["enabled"] is False and listed["platform-1"]["enabled"] is True
    # Deleted from its own URL, as DELETE says (the list keeps it, disabled), and so is a
    # tenant's own account once disabled.
    r = await api.client.get("/admin/v1/model-accounts/platform-0", headers=api.operator)
    assert r.status_code == 404 and r.json()["type"] == "not_found", r.text
    tid, own = next(iter(created.byok.items()))
    for path in (f"/admin/v1/model-accounts/{own}",
                 f"/admin/v1/tenants/{tid}/model-accounts/{own}"):
        assert (await api.client.get(path, headers=api.operator)).status_code == 200, path
    r = await api.client.delete(f"/admin/v1/model-accounts/{own}", headers=api.operator)
    assert r.status_code == 200 and r.json()["enabled"] is False
    for path in (f"/admin/v1/model-accounts/{own}",
                 f"/admin/v1/tenants/{tid}/model-accounts/{own}"):
        assert (await api.client.get(path, headers=api.operator)).status_code == 404, path


async def test_another_tenants_resource_under_the_wrong_tenant_is_not_found(
    api: Api, created: Created,
) -> None:
    first, second = list(created.tenants)[:2]
    key_id = next(k for k, key in created.keys[first].items() if key["revoked_at"] is None)
    platform_account = "platform-0"
    for path in (f"/admin/v1/tenants/{second}/api-keys/{key_id}",
                 f"/admin/v1/tenants/{second}/secrets/t0-crm",
                 f"/admin/v1/tenants/{second}/tool-servers/fx-0",
                 f"/admin/v1/tenants/{second}/model-accounts/{created.byok[first]}",
                 f"/admin/v1/tenants/{first}/model-accounts/{platform_account}"):
        r = await api.client.get(path, headers=api.operator)
        assert r.status_code == 404, (path, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["type"] == "not_found"
    # The right tenant's path finds each of them.
    for path in (f"/admin/v1/tenants/{first}/api-keys/{key_id}",
                 f"/admin/v1/tenants/{first}/secrets/t0-crm",
                 f"/admin/v1/tenants/{first}/tool-servers/fx-0",
                 f"/admin/v1/tenants/{first}/model-accounts/{created.byok[first]}"):
        assert (await api.client.get(path, headers=api.operator)).status_code == 200, path


async def test_unknown_and_ill_formed_ids_are_not_found(api: Api, created: Created) -> None:
    tid = next(iter(created.tenants))
    paths = [
        "/admin/v1/tenants/ten_nobody", "/admin/v1/tenants/NOT%20A%20SLUG",
        "/admin/v1/tenants/ten_nobody/api-keys", "/admin/v1/tenants/ten_nobody/secrets",
        "/admin/v1/tenants/ten_nobody/tool-servers",
        "/admin/v1/tenants/ten_nobody/model-accounts",
        f"/admin/v1/tenants/{tid}/api-keys/key_{'0' * 32}", f"/admin/v1/tenants/{tid}/api-keys/x",
        f"/admin/v1/tenants/{tid}/secrets/missing", f"/admin/v1/tenants/{tid}/secrets/a%00b",
        f"/admin/v1/tenants/{tid}/secrets/t0-crm%0A",
        f"/admin/v1/tenants/{tid}/tool-servers/missing",
        f"/admin/v1/tenants/{tid}/tool-servers/a%00b",
        f"/admin/v1/tenants/{tid}/model-accounts/missing",
        "/admin/v1/model-accounts/missing", "/admin/v1/model-accounts/a%00b",
        "/admin/v1/model-accounts/platform-0%0A",
    ]
    for path in paths:
        r = await api.client.get(path, headers=api.operator)
        assert r.status_code == 404, (path, r.status_code, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["type"] == "not_found"
    r = await api.client.delete("/admin/v1/model-accounts/a%00b", headers=api.operator)
    assert r.status_code == 404, r.text
    r = await api.client.post(f"/admin/v1/tenants/{tid}/tool-servers/a%00b/pin",
                              headers=api.operator)
    assert r.status_code == 404, r.text
    # A name the pattern's `$` let through with a trailing newline is refused, not a 500.
    r = await api.client.put(f"/admin/v1/tenants/{tid}/secrets/t0-crm%0A",
                             json={"value": "v"}, headers=api.operator)
    assert r.status_code == 400 and r.json()["type"] == "validation_error", r.text


LISTS = ["/admin/v1/tenants", "/admin/v1/tenants/{tid}/api-keys",
         "/admin/v1/tenants/{tid}/secrets", "/admin/v1/tenants/{tid}/tool-servers",
         "/admin/v1/tenants/{tid}/model-accounts", "/admin/v1/model-accounts"]
#: For each list, a cursor that could not have come from it.
BAD_CURSORS = {
    "/admin/v1/tenants": ["NOT A SLUG", "x"], "/admin/v1/tenants/{tid}/api-keys": ["key_zz"],
    "/admin/v1/tenants/{tid}/secrets": ["no spaces"],
    "/admin/v1/tenants/{tid}/tool-servers": ["Upper"],
    "/admin/v1/tenants/{tid}/model-accounts": ["-x"], "/admin/v1/model-accounts": ["-x"],
}


async def test_bad_cursors_and_limits_are_refused_and_write_nothing(
    api: Api, created: Created, admin_conn: asyncpg.Connection,
) -> None:
    tid = next(iter(created.tenants))
    before = await row_counts(admin_conn)
    for template in LISTS:
        path = template.format(tid=tid)
        refused: list[dict[str, Any]] = [
            *({"cursor": cursor} for cursor in BAD_CURSORS[template]),
            {"cursor": "a\x00b"}, {"cursor": "y" * 300}, {"cursor": ""},
            {"limit": 0}, {"limit": 201}, {"limit": "ten"}, {"limit": -1},
        ]
        for params in refused:
            r = await api.client.get(path, params=params, headers=api.operator)
            assert r.status_code == 400, (path, params, r.text)
            assert r.headers["content-type"] == "application/problem+json"
            body = r.json()
            assert body["type"] == "validation_error" and body["detail"]
        page = await _get(api, created, path, limit=200)
        assert page["next_cursor"] is None
    assert await row_counts(admin_conn) == before


async def test_tenant_keys_and_no_credentials_cannot_list(api: Api, created: Created) -> None:
    tid = next(iter(created.tenants))
    _, tenant_auth = await api.tenant("Curious")
    paths = [p.format(tid=tid) for p in LISTS] + [
        f"/admin/v1/tenants/{tid}", f"/admin/v1/tenants/{tid}/secrets/t0-crm",
        f"/admin/v1/tenants/{tid}/tool-servers/fx-0",
        f"/admin/v1/tenants/{tid}/api-keys/{next(iter(created.keys[tid]))}",
        "/admin/v1/model-accounts/platform-0",
        f"/admin/v1/tenants/{tid}/model-accounts/{created.byok[tid]}"]
    for path in paths:
        for headers in (tenant_auth, {}):
            r = await api.client.get(path, headers=headers)
            assert r.status_code == 401, (path, r.text)
            assert r.json()["type"] == "unauthorized"
            assert "t0-crm" not in r.text and "fx-0" not in r.text


async def test_openapi_declares_the_lists_and_their_items(api: Api, created: Created) -> None:
    """Each list's page schema names exactly the fields its items carry."""
    doc = (await api.client.get("/openapi.json")).json()
    schemas = doc["components"]["schemas"]
    tid = next(iter(created.tenants))
    for template in LISTS:
        openapi_path = template.replace("{tid}", "{tenant_id}")
        operation = doc["paths"][openapi_path]["get"]
        params = {p["name"]: p for p in operation["parameters"]}
        assert params["limit"]["schema"]["maximum"] == 200
        assert params["limit"]["schema"]["minimum"] == 1
        assert set(operation["responses"]) >= {"200", "400", "401"}
        page_ref = operation["responses"]["200"]["content"]["application/json"]["schema"]
        page_schema = schemas[page_ref["$ref"].rsplit("/", 1)[1]]
        assert set(page_schema["properties"]) == {"data", "next_cursor"}
        item_schema = schemas[page_schema["properties"]["data"]["items"]["$ref"].rsplit("/")[-1]]
        page = await _get(api, created, template.format(tid=tid), limit=1)
        assert page["data"], template
        assert set(page["data"][0]) == set(item_schema["properties"]), template


async def test_console_models_page_reads_the_same_pages(api: Api) -> None:
    """The console's model accounts page pages through the API's own listing."""
    count = reads.PAGE + 2
    for n in range(count):
        await api.model_account(f"acct-{n:03d}", UNROUTABLE)
    r = await api.client.delete("/admin/v1/model-accounts/acct-000", headers=api.operator)
    assert r.status_code == 200
    cookie, _ = session.issue(OPERATOR_TOKEN, epoch=epoch.FIRST)
    headers = {"Cookie": f"{session.SESSION_COOKIE}={cookie}"}
    seen: list[str] = []
    path: str | None = "/console/models"
    pages = 0
    while path is not None and pages < 5:
        r = await api.client.get(path, headers=headers)
        assert r.status_code == 200, r.text
        rows = r.text.split('<tr data-account="')[1:]
        seen += [row.split('"', 1)[0] for row in rows]
        if pages == 0:
            assert "disabled" in rows[0] and "disabled" not in rows[1]
        more = re.search(r'<a href="([^"]+)">More →</a>', r.text)
        path = html.unescape(more[1]) if more else None
        pages += 1
    assert seen == [f"acct-{n:03d}" for n in range(count)] and pages == 2
