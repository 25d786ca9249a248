"""Operator endpoints for tenants and keys; tenant endpoints for agents and versions."""

from __future__ import annotations

import asyncio

import asyncpg

from tests.support.api import Api, serving_api
from tests.support.db import row_counts


async def test_operator_creates_tenant_and_key_that_authenticates(
    api: Api, admin_conn: asyncpg.Connection
) -> None:
    r = await api.client.post("/admin/v1/tenants", json={"name": "Acme", "region": "eu"},
                              headers=api.operator)
    assert r.status_code == 201
    tenant = r.json()
    assert tenant["tenant_id"].startswith("ten_") and tenant["region"] == "eu"
    r = await api.client.post(f"/admin/v1/tenants/{tenant['tenant_id']}/api-keys",
                              json={"name": "ci"}, headers=api.operator)
    assert r.status_code == 201
    key = r.json()["api_key"]
    stored = await admin_conn.fetchval("SELECT count(*) FROM api_keys WHERE key_prefix = $1",
                                       key[:10])
    assert stored == 1
    # The plaintext key is nowhere in the database.
    dump = await admin_conn.fetchval("SELECT string_agg(t::text, ' ') FROM api_keys t")
    assert key not in dump
    r = await api.client.get("/v1/agents", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200 and r.json() == {"data": [], "next_cursor": None}


async def test_operator_endpoints_need_the_operator_token(api: Api) -> None:
    _, tenant_headers = await api.tenant()
    for headers in ({}, {"Authorization": "Bearer wrong"}, tenant_headers):
        r = await api.client.post("/admin/v1/tenants", json={"name": "x"}, headers=headers)
        assert r.status_code == 401
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["type"] == "unauthorized"


async def test_revoked_key_is_refused(api: Api) -> None:
    tenant_id, _ = await api.tenant()
    r = await api.client.post(f"/admin/v1/tenants/{tenant_id}/api-keys", headers=api.operator)
    key, key_id = r.json()["api_key"], r.json()["key_id"]
    headers = {"Authorization": f"Bearer {key}"}
    assert (await api.client.get("/v1/agents", headers=headers)).status_code == 200
    r = await api.client.delete(f"/admin/v1/tenants/{tenant_id}/api-keys/{key_id}",
                                headers=api.operator)
    assert r.status_code == 200
    r = await api.client.get("/v1/agents", headers=headers)
    assert r.status_code == 401 and r.json()["type"] == "unauthorized"


async def test_a_revoked_key_stops_working_in_every_api_process(
    api: Api, database_dsn: str
) -> None:
    """Each API process caches key → tenant briefly; a revocation in one process reaches
    the others' caches through a Postgres notification."""
    tenant_id, _ = await api.tenant()
    r = await api.client.post(f"/admin/v1/tenants/{tenant_id}/api-keys", headers=api.operator)
    headers = {"Authorization": f"Bearer {r.json()['api_key']}"}
    async with serving_api(database_dsn) as other:
        assert (await other.client.get("/v1/agents", headers=headers)).status_code == 200
        await api.client.delete(f"/admin/v1/tenants/{tenant_id}/api-keys/{r.json()['key_id']}",
                                headers=api.operator)
        assert (await api.client.get("/v1/agents", headers=headers)).status_code == 401
        # Well under the cache's 5 s lifetime: only the notification can make this pass.
        async with asyncio.timeout(2):
            # Polling another process's answer: there is no event to await here.
            while (await other.client.get("/v1/agents", headers=headers)).status_code != 401:  # noqa: ASYNC110
                await asyncio.sleep(0.01)


async def test_agent_versions_are_immutable_and_numbered(
    api: Api, admin_conn: asyncpg.Connection
) -> None:
    _, h = await api.tenant()
    agent = await api.agent(h, tools=["search", "refund"], needs_approval=["refund"],
                            limits={"max_steps": 5})
    r = await api.client.get(f"/v1/agents/{agent}", headers=h)
    assert r.json()["version"] == 1
    assert r.json()["needs_approval"] == ["refund"] and r.json()["limits"]["max_steps"] == 5

    body = {"model": "scripted", "system_prompt": "v2 prompt", "tools": ["search"]}
    r = await api.client.post(f"/v1/agents/{agent}/versions", json=body, headers=h)
    assert r.status_code == 201 and r.json()["version"] == 2
    assert r.headers["location"] == f"/v1/agents/{agent}/versions/2"

    v1 = (await api.client.get(f"/v1/agents/{agent}/versions/1", headers=h)).json()
    assert v1["system_prompt"] == "Be brief." and v1["tools"] == ["search", "refund"]
    latest = (await api.client.get(f"/v1/agents/{agent}", headers=h)).json()
    assert latest["version"] == 2 and latest["system_prompt"] == "v2 prompt"

    before = await row_counts(admin_conn)
    # A version body that names an existing version is an attempt to change it.
    r = await api.client.post(f"/v1/agents/{agent}/versions", json={**body, "version": 1},
                              headers=h)
    assert r.status_code == 409 and r.json()["type"] == "conflict"
    assert r.json()["next_version"] == 3
    for method in ("PUT", "PATCH", "DELETE"):
        r = await api.client.request(method, f"/v1/agents/{agent}/versions/1", json=body,
                                     headers=h)
        assert r.status_code == 409, method
    assert await row_counts(admin_conn) == before
    v1_again = (await api.client.get(f"/v1/agents/{agent}/versions/1", headers=h)).json()
    assert v1_again == v1


async def test_duplicate_agent_name_conflicts(api: Api) -> None:
    _, h = await api.tenant()
    await api.agent(h, name="same")
    r = await api.client.post("/v1/agents", json={"name": "same", "model": "scripted",
                                                  "system_prompt": ""}, headers=h)
    assert r.status_code == 409 and r.json()["type"] == "conflict"


async def test_another_tenants_agent_looks_missing_byte_for_byte(api: Api) -> None:
    _, owner = await api.tenant("Owner")
    _, other = await api.tenant("Other")
    agent = await api.agent(owner)
    missing = "agt_" + "0" * 32
    for path in ("/v1/agents/{}", "/v1/agents/{}/versions/1"):
        theirs = await api.client.get(path.format(agent), headers=other)
        nothing = await api.client.get(path.format(missing), headers=other)
        assert theirs.status_code == nothing.status_code == 404
        assert theirs.content == nothing.content
        assert theirs.headers["content-length"] == nothing.headers["content-length"]
    r = await api.client.post(f"/v1/agents/{agent}/versions",
                              json={"model": "scripted", "system_prompt": ""}, headers=other)
    assert r.status_code == 404


async def test_agent_list_is_paginated(api: Api) -> None:
    _, h = await api.tenant()
    made = [await api.agent(h, name=f"agent-{i}") for i in range(5)]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await api.client.get("/v1/agents", params=params, headers=h)).json()
        seen += [a["agent_id"] for a in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(made))
