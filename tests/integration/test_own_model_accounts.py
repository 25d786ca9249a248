"""Tenants register their own model provider accounts with their own key
(``/v1/model-accounts``: bring your own key), and the operator decides where such an
account may be (the tool servers' rules, tools/destinations.py).

A tenant's own account serves that tenant's runs alone — another tenant on the same model
never reaches it, the operator's account serving that other tenant counts none of the
first tenant's calls — and usage says which calls went through it. The key is write-only,
stored in the tenant's vault with the account (both or neither), rotated and removed
with it. Bad input is a 4xx problem naming the field, with nothing stored; with the
default rules a loopback, private or metadata base URL is refused before anything is sent
to it, and a worker's connection to such an account goes only to a vetted address."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tenantry.models.accounts import ModelAccount
from tenantry.models.clients import http_client
from tenantry.models.errors import ModelUnavailable
from tenantry.models.loopback import LoopbackServer
from tenantry.models.own_accounts import MAX_OWN_ACCOUNTS
from tenantry.models.types import ModelRequest
from tenantry.testing.fake_model import FakeModelServer
from tenantry.tools.destinations import MODEL_ACCOUNT, Destinations
from tests.support.api import Api, serving_api
from tests.support.db import row_counts
from tests.support.scripts import answer, scripted
from tests.support.worker import TEST_GATEWAY, running_worker

REFUSED = "model_account_url_refused"


def _account(base_url: str, **fields: object) -> dict[str, object]:
    return {"provider": "openai", "base_url": base_url, "models": ["scripted"],
            "region": "us", "api_key": "sk-own-1", **fields}


def _replies(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["type"] == "ModelReplied"]


def _inputs_seen(server: FakeModelServer) -> list[str]:
    """The run inputs (their unique text) of every call this provider answered."""
    seen = []
    for request in server.requests:
        body = request.json()
        if not isinstance(body, dict):
            continue
        for message in body.get("messages", []):
            content = message.get("content")
            if message.get("role") == "user" and isinstance(content, str) \
                    and content.startswith("{"):
                seen.append(orjson.loads(content)["input"])
                break
    return seen


async def _nothing_stored(api: Api, h: dict[str, str]) -> None:
    assert (await api.client.get("/v1/model-accounts", headers=h)).json()["data"] == []
    assert (await api.client.get("/v1/secrets", headers=h)).json()["data"] == []


async def _written(admin: asyncpg.Connection) -> dict[str, int]:
    """Rows per table, the tenants' data keys too (a first secret creates one)."""
    return {**await row_counts(admin),
            "tenant_keys": await admin.fetchval("SELECT count(*) FROM tenant_keys")}


@pytest.fixture
async def provider() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer(provider="openai") as server:
        yield server


async def test_a_tenant_registers_reads_rotates_and_disables_its_own_account(
    api: Api, provider: FakeModelServer, database_dsn: str,
) -> None:
    tenant, h = await api.tenant()
    r = await api.client.post("/v1/model-accounts", headers=h,
                              json=_account(provider.base_url, rpm=600, priority=-3))
    assert r.status_code == 201, r.text
    assert "sk-own-1" not in r.text  # write-only
    account = r.json()
    account_id, secret = account["account_id"], account["secret"]
    assert account["tenant_id"] == tenant and account["registered_by"] == "tenant"
    assert account["rpm"] == 600 and account["priority"] == -3 and account["has_secret"]
    assert secret == f"model-account.{account_id}"

    listed = (await api.client.get("/v1/model-accounts", headers=h)).json()
    assert listed == {"data": [account], "next_cursor": None}
    assert (await api.client.get(f"/v1/model-accounts/{account_id}", headers=h)).json() \
        == account
    # Its key is one of the tenant's secrets (name and dates only), which it cannot remove
    # while the account calls with it.
    assert (await api.client.get(f"/v1/secrets/{secret}", headers=h)).status_code == 200
    r = await api.client.delete(f"/v1/secrets/{secret}", headers=h)
    assert r.status_code == 409 and r.json()["model_accounts"] == [account_id], r.text
    # The operator sees it as the tenant's own, registered by the tenant.
    r = await api.client.get(f"/admin/v1/tenants/{tenant}/model-accounts/{account_id}",
                             headers=api.operator)
    assert r.status_code == 200 and r.json()["registered_by"] == "tenant", r.text

    # Its runs call the provider with the tenant's key; a rotated key is used from then on
    # (the workers here read keys again at every call).
    agent = await api.agent(h)
    every_call = dataclasses.replace(TEST_GATEWAY, credential_ttl_seconds=0)
    async with running_worker(database_dsn, None, model_gateway=every_call):
        first = await api.start(h, agent, scripted(answer("one"), text="first"))
        events = await api.events_until_end(h, first)
        assert [r["account"] for r in _replies(events)] == [account_id]
        r = await api.client.put(f"/v1/model-accounts/{account_id}/api-key", headers=h,
                                 json={"api_key": "sk-own-2"})
        assert r.status_code == 200 and "sk-own-2" not in r.text, r.text
        second = await api.start(h, agent, scripted(answer("two"), text="second"))
        await api.events_until_end(h, second)
    assert [q.headers.get("authorization") for q in provider.requests] == [
        "Bearer sk-own-1", "Bearer sk-own-2"]
    assert "sk-own" not in orjson.dumps(events).decode()  # never in the log

    # Disabled: gone from its URL, listed as disabled, its key deleted with it.
    r = await api.client.delete(f"/v1/model-accounts/{account_id}", headers=h)
    assert r.status_code == 200 and r.json()["enabled"] is False, r.text
    assert (await api.client.get(f"/v1/model-accounts/{account_id}", headers=h)).status_code \
        == 404
    listed = (await api.client.get("/v1/model-accounts", headers=h)).json()["data"]
    assert [(a["account_id"], a["enabled"]) for a in listed] == [(account_id, False)]
    assert (await api.client.get(f"/v1/secrets/{secret}", headers=h)).status_code == 404
    assert (await api.client.delete(f"/v1/model-accounts/{account_id}", headers=h)) \
        .status_code == 404
    r = await api.client.put(f"/v1/model-accounts/{account_id}/api-key", headers=h,
                             json={"api_key": "sk-own-3"})
    assert r.status_code == 404, r.text
    assert (await api.client.get("/v1/secrets", headers=h)).json()["data"] == []
    # Each change is in the tenant's audit trail, by route and target; never a key.
    r = await api.client.get("/v1/audit", headers=h, params={"kind": "change"})
    assert r.status_code == 200 and "sk-own" not in r.text, r.text
    changes = {(e["action"], e["target"]) for e in r.json()["data"]}
    assert {("POST /v1/model-accounts", "/v1/model-accounts"),
            ("PUT /v1/model-accounts/{account_id}/api-key",
             f"/v1/model-accounts/{account_id}/api-key"),
            ("DELETE /v1/model-accounts/{account_id}",
             f"/v1/model-accounts/{account_id}")} <= changes, changes


async def test_another_tenants_or_the_platforms_account_is_missing_to_a_tenant(
    api: Api, provider: FakeModelServer,
) -> None:
    _, owner = await api.tenant("Owner")
    _, other = await api.tenant("Other")
    r = await api.client.post("/v1/model-accounts", headers=owner,
                              json=_account(provider.base_url))
    assert r.status_code == 201, r.text
    theirs = r.json()["account_id"]
    await api.model_account("platform-main", provider.base_url, secret="sk-platform")
    for account_id in (theirs, "platform-main", "no-such-account", "a%00b", "x" * 300):
        for method, path, body in (
                ("GET", f"/v1/model-accounts/{account_id}", None),
                ("DELETE", f"/v1/model-accounts/{account_id}", None),
                ("PUT", f"/v1/model-accounts/{account_id}/api-key", {"api_key": "sk-x"})):
            r = await api.client.request(method, path, headers=other, json=body)
            assert r.status_code == 404, (method, path, r.text)
            assert r.json()["type"] == "not_found"
    assert (await api.client.get("/v1/model-accounts", headers=other)).json()["data"] == []
    # Untouched: the owner's account and key, the platform's account.
    r = await api.client.get(f"/v1/model-accounts/{theirs}", headers=owner)
    assert r.status_code == 200 and r.json()["enabled"], r.text
    r = await api.client.get("/admin/v1/model-accounts/platform-main", headers=api.operator)
    assert r.status_code == 200 and r.json()["enabled"], r.text


@pytest.mark.parametrize(("change", "status", "field"), [
    ({"provider": "scripted"}, 400, "provider"),
    ({"provider": "cohere"}, 400, "provider"),
    ({"base_url": "ftp://models.example.com/v1"}, 400, "base_url"),
    ({"base_url": "http://"}, 400, "base_url"),
    ({"base_url": "https://exa\x00mple.com/v1"}, 400, "base_url"),
    ({"models": []}, 400, "models"),
    ({"models": ["scr\x00ipted"]}, 400, "models"),
    ({"models": ["no-price-for-this-model"]}, 409, "models"),
    ({"region": "u\x00s"}, 400, "region"),
    ({"api_key": "sk-\x00"}, 400, "api_key"),
    ({"api_key": ""}, 400, "api_key"),
    ({"rpm": 10**30}, 400, "rpm"),
    ({"tpm": 2**31}, 400, "tpm"),
    ({"priority": -(10**20)}, 400, "priority"),
    ({"account_id": "mine"}, 400, "account_id"),  # ids are the platform's to give
    ({"tenant_id": "ten_other"}, 400, "tenant_id"),
])
async def test_bad_input_is_a_problem_naming_the_field_with_nothing_stored(
    api: Api, provider: FakeModelServer, admin_conn: asyncpg.Connection,
    change: dict[str, object], status: int, field: str,
) -> None:
    _, h = await api.tenant()
    before = await _written(admin_conn)
    r = await api.client.post("/v1/model-accounts", headers=h,
                              json={**_account(provider.base_url), **change})
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["detail"].startswith(field), r.text
    assert await _written(admin_conn) == before
    await _nothing_stored(api, h)
    assert provider.requests == []


async def test_the_region_must_be_the_tenants_or_inside_it(
    api: Api, provider: FakeModelServer,
) -> None:
    _, h = await api.tenant("Euro GmbH", region="eu")
    for region in ("us", "default", "eurasia"):
        r = await api.client.post("/v1/model-accounts", headers=h,
                                  json=_account(provider.base_url, region=region))
        assert r.status_code == 400, r.text
        assert r.json()["field"] == "region" and "eu" in r.json()["detail"], r.text
    await _nothing_stored(api, h)
    for region in ("eu", "eu-west-1"):
        r = await api.client.post("/v1/model-accounts", headers=h,
                                  json=_account(provider.base_url, region=region))
        assert r.status_code == 201, r.text


async def test_a_tenant_has_a_bounded_number_of_enabled_accounts(
    api: Api, provider: FakeModelServer,
) -> None:
    _, h = await api.tenant()
    ids = []
    for _ in range(MAX_OWN_ACCOUNTS):
        r = await api.client.post("/v1/model-accounts", headers=h,
                                  json=_account(provider.base_url))
        assert r.status_code == 201, r.text
        ids.append(r.json()["account_id"])
    r = await api.client.post("/v1/model-accounts", headers=h, json=_account(provider.base_url))
    assert r.status_code == 409 and r.json()["type"] == "conflict", r.text
    secrets = (await api.client.get("/v1/secrets?limit=100", headers=h)).json()["data"]
    assert len(secrets) == MAX_OWN_ACCOUNTS  # the refused one's key was not kept
    assert (await api.client.delete(f"/v1/model-accounts/{ids[0]}", headers=h)).status_code \
        == 200
    r = await api.client.post("/v1/model-accounts", headers=h, json=_account(provider.base_url))
    assert r.status_code == 201, r.text


async def test_a_failed_insert_leaves_no_key_in_the_vault(
    api: Api, provider: FakeModelServer, admin_conn: asyncpg.Connection,
) -> None:
    """The key and the account commit together: an insert the database refuses (here a
    check constraint added for the test) takes the key written before it along, and the
    tenant's data key its first secret created."""
    _, h = await api.tenant()
    before = await _written(admin_conn)
    await admin_conn.execute("ALTER TABLE model_accounts ADD CONSTRAINT test_refuse_own "
                             "CHECK (registered_by <> 'tenant') NOT VALID")
    try:
        r = await api.client.post("/v1/model-accounts", headers=h,
                                  json=_account(provider.base_url))
        assert r.status_code == 500 and r.json()["type"] == "internal_error", r.text
    finally:
        await admin_conn.execute("ALTER TABLE model_accounts DROP CONSTRAINT test_refuse_own")
    assert await _written(admin_conn) == before
    await _nothing_stored(api, h)


class Counting:
    """A server on this machine counting every request it gets: nothing may reach it."""

    def __init__(self) -> None:
        self.hits = 0

        async def count(request: Request) -> Response:
            self.hits += 1
            return Response(b"{}", 200, media_type="application/json")

        self.http = LoopbackServer(Starlette(routes=[
            Route("/{path:path}", count, methods=["GET", "POST"])]))


@pytest.fixture
async def counting() -> AsyncIterator[Counting]:
    server = Counting()
    await server.http.start()
    try:
        yield server
    finally:
        await server.http.stop()


@pytest.mark.parametrize(("url", "said"), [
    ("https://127.0.0.1:{port}/v1", "loopback"),
    ("https://localhost:{port}/v1", "loopback"),
    ("https://[::1]:{port}/v1", "loopback"),
    ("https://[::ffff:127.0.0.1]:{port}/v1", "loopback"),
    ("https://169.254.169.254/v1", "169.254.169.254"),
    ("https://10.1.2.3/v1", "private"),
    ("https://192.168.0.7/v1", "private"),
    ("http://models.example.com/v1", "https"),
])
async def test_the_default_rules_refuse_an_account_off_the_public_internet(
    database_dsn: str, admin_conn: asyncpg.Connection, counting: Counting, url: str, said: str,
) -> None:
    async with serving_api(database_dsn, tenant_tool_servers_allow_private=False) as api:
        _, h = await api.tenant()
        before = await _written(admin_conn)
        r = await api.client.post("/v1/model-accounts", headers=h, json=_account(
            url.format(port=counting.http.port)))
        assert r.status_code == 422, r.text
        assert r.headers["content-type"] == "application/problem+json"
        problem = r.json()
        assert problem["type"] == REFUSED and problem["field"] == "base_url", problem
        assert said in problem["detail"], problem
        assert await _written(admin_conn) == before
        await _nothing_stored(api, h)
    assert counting.hits == 0  # nothing was sent to it


async def test_the_operator_allows_only_its_provider_hosts_apart_from_its_tool_hosts(
    database_dsn: str, counting: Counting,
) -> None:
    async with serving_api(database_dsn, tenant_tool_servers_allow_private=False,
                           tenant_tool_server_hosts=("mcp.example.com",),
                           tenant_model_account_hosts=("llm.example.com",)) as api:
        _, h = await api.tenant()
        for url in ("https://mcp.example.com/v1", "https://models.example.org/v1"):
            r = await api.client.post("/v1/model-accounts", headers=h, json=_account(url))
            assert r.status_code == 422 and r.json()["type"] == REFUSED, r.text
            assert "TENANTRY_TENANT_MODEL_ACCOUNT_HOSTS" in r.json()["detail"], r.text
        await _nothing_stored(api, h)


async def test_a_worker_connects_to_a_tenants_own_account_only_where_the_rules_allow(
    provider: FakeModelServer,
) -> None:
    """At every connection, not only at registration (a name may resolve elsewhere later):
    the production wiring's guard refuses the tenant's account at loopback, while an
    operator's registration at the same address is the operator's decision."""
    # The production wiring's, with the defaults: no private addresses.
    guard = Destinations(subject=MODEL_ACCOUNT).connect_to
    request = ModelRequest(model="scripted", messages=({"role": "user", "content": "hi"},))
    own = ModelAccount("own-1", "openai", provider.base_url, ("scripted",), "us",
                       tenant="ten_a", secret_name="k", registered_by="tenant")
    client = http_client(own, "sk-own", 5.0, guard=guard)
    try:
        with pytest.raises(ModelUnavailable, match="loopback"):
            await client.complete(request)
    finally:
        await client.aclose()
    assert provider.requests == []
    operators = dataclasses.replace(own, registered_by="operator")
    client = http_client(operators, "sk-op", 5.0, guard=guard)
    try:
        await client.complete(request)
    finally:
        await client.aclose()
    assert len(provider.requests) == 1


async def test_a_tenants_own_account_serves_only_its_runs_and_usage_says_so(
    api: Api, database_dsn: str,
) -> None:
    """Must show (issue 41): two tenants on the same model; A registers its own account on
    a counting provider. A's runs reach only A's account; B's never reach it; the
    operator's account serves B, and counts none of A's calls; usage shows A's calls as
    through its own account, B's as not."""
    async with FakeModelServer(provider="openai") as platform, \
            FakeModelServer(provider="openai") as own:
        await api.model_account("platform-main", platform.base_url, secret="sk-platform")
        before = (await api.client.get("/admin/v1/model-accounts/platform-main",
                                       headers=api.operator)).json()
        a, a_h = await api.tenant("Brings Keys")
        b, b_h = await api.tenant("Uses Ours")
        r = await api.client.post("/v1/model-accounts", headers=a_h,
                                  json=_account(own.base_url, api_key="sk-tenant-a"))
        assert r.status_code == 201, r.text
        a_account = r.json()["account_id"]
        a_agent, b_agent = await api.agent(a_h), await api.agent(b_h)  # both on `scripted`
        async with running_worker(database_dsn, None):
            a_runs = [await api.start(a_h, a_agent, scripted(answer("a"), text=f"a-{i}"))
                      for i in range(3)]
            b_runs = [await api.start(b_h, b_agent, scripted(answer("b"), text=f"b-{i}"))
                      for i in range(3)]
            a_events = [await api.events_until_end(a_h, run) for run in a_runs]
            b_events = [await api.events_until_end(b_h, run) for run in b_runs]
    assert all(events[-1]["type"] == "RunFinished" for events in a_events + b_events)
    assert {r["account"] for events in a_events for r in _replies(events)} == {a_account}
    assert {r["account"] for events in b_events for r in _replies(events)} == {"platform-main"}
    # Counted at the providers: A's account saw A's calls only, with A's key; the platform's
    # saw B's only.
    assert sorted(_inputs_seen(own)) == ["a-0", "a-1", "a-2"]
    assert {q.headers.get("authorization") for q in own.requests} == {"Bearer sk-tenant-a"}
    assert sorted(_inputs_seen(platform)) == ["b-0", "b-1", "b-2"]
    assert len(platform.requests) == 3
    after = (await api.client.get("/admin/v1/model-accounts/platform-main",
                                  headers=api.operator)).json()
    assert after == before  # the operator's account is untouched

    # Usage: A's calls through its own account, B's through the platform's.
    a_usage = (await api.client.get("/v1/usage", headers=a_h)).json()["total"]
    b_usage = (await api.client.get("/v1/usage", headers=b_h)).json()["total"]
    assert a_usage["calls"] == 3 and a_usage["own_accounts"]["calls"] == 3, a_usage
    assert a_usage["own_accounts"]["cost_micros"] == a_usage["cost_micros"] > 0
    assert a_usage["own_accounts"]["input_tokens"] == a_usage["input_tokens"] > 0
    assert b_usage["calls"] == 3 and b_usage["own_accounts"] == {
        "calls": 0, "input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0,
        "cost_micros": 0}, b_usage
    by_day = (await api.client.get("/v1/usage?group_by=day", headers=a_h)).json()["groups"]
    assert sum(g["own_accounts"]["calls"] for g in by_day) == 3
    rows = (await api.client.get("/admin/v1/usage", headers=api.operator)).json()
    per_tenant = {row["tenant_id"]: row["own_accounts"]["calls"] for row in rows}
    assert per_tenant == {a: 3, b: 0}
    # The billing record itself says whose account served each call.
    conn = await asyncpg.connect(database_dsn)
    try:
        owners = {(row["tenant_id"], row["account"], row["account_owner"])
                  for row in await conn.fetch(
                      "SELECT tenant_id, account, account_owner FROM usage_facts")}
    finally:
        await conn.close()
    assert owners == {(a, a_account, "tenant"), (b, "platform-main", "platform")}
