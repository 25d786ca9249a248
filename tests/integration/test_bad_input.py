"""Bad input gets a clear problem+json answer and writes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest

from tests.conftest import Api
from tests.integration.helpers import row_counts


@dataclass
class World:
    api: Api
    admin: asyncpg.Connection
    h: dict[str, str]
    tenant: str
    agent: str
    run: str


@pytest.fixture
async def world(api: Api, admin_conn: asyncpg.Connection) -> World:
    tenant, h = await api.tenant()
    agent = await api.agent(h)
    r = await api.client.post("/v1/runs", json={"agent_id": agent, "input": "x"}, headers=h)
    return World(api, admin_conn, h, tenant, agent, r.json()["run_id"])


async def expect_refusal(
    w: World, method: str, path: str, status: int, type_: str, **kwargs: Any
) -> dict[str, Any]:
    before = await row_counts(w.admin)
    r = await w.api.client.request(method, path, **kwargs)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = r.json()
    assert body["type"] == type_ and body["status"] == status and body["detail"]
    assert await row_counts(w.admin) == before, "a refused request wrote rows"
    return body


def _json(w: World, raw: bytes, extra: dict[str, str] | None = None) -> dict[str, Any]:
    return {"content": raw, "headers": {**w.h, "Content-Type": "application/json", **(extra or {})}}


async def test_malformed_json(world: World) -> None:
    w = world
    for path in ("/v1/runs", "/v1/agents", f"/v1/agents/{w.agent}/versions"):
        await expect_refusal(w, "POST", path, 400, "validation_error",
                             **_json(w, b'{"agent_id": "x", "input": '))
    await expect_refusal(w, "POST", "/admin/v1/tenants", 400, "validation_error",
                         content=b"{nope", headers={**w.api.operator,
                                                    "Content-Type": "application/json"})


async def test_wrong_types(world: World) -> None:
    w = world
    body = await expect_refusal(w, "POST", "/v1/runs", 400, "validation_error",
                                json={"agent_id": w.agent, "input": "x", "version": "one"},
                                headers=w.h)
    assert body["errors"][0]["loc"] == ["body", "version"]
    await expect_refusal(w, "POST", "/v1/agents", 400, "validation_error",
                         json={"name": "n", "model": "m", "system_prompt": "",
                               "limits": {"max_steps": "many"}}, headers=w.h)
    await expect_refusal(w, "POST", "/v1/agents", 400, "validation_error",
                         json={"name": "n", "model": "m", "system_prompt": "", "tools": "all"},
                         headers=w.h)
    await expect_refusal(w, "POST", "/v1/runs", 400, "validation_error", json=["a list"],
                         headers=w.h)


async def test_missing_required_fields(world: World) -> None:
    w = world
    body = await expect_refusal(w, "POST", "/v1/runs", 400, "validation_error",
                                json={"agent_id": w.agent}, headers=w.h)
    assert "input" in body["detail"]
    body = await expect_refusal(w, "POST", "/v1/runs", 400, "validation_error",
                                json={"agent_id": w.agent, "input": None}, headers=w.h)
    assert "input must not be null" in body["detail"]


async def test_unknown_fields(world: World) -> None:
    w = world
    await expect_refusal(w, "POST", "/v1/runs", 400, "validation_error",
                         json={"agent_id": w.agent, "input": "x", "tenant_id": "someone-else"},
                         headers=w.h)
    await expect_refusal(w, "POST", "/v1/agents", 400, "validation_error",
                         json={"name": "n", "model": "m", "system_prompt": "", "tenant": "x"},
                         headers=w.h)
    await expect_refusal(w, "POST", "/admin/v1/tenants", 400, "validation_error",
                         json={"name": "n", "plan_x": 1}, headers=w.api.operator)


async def test_inconsistent_agent_spec(world: World) -> None:
    w = world
    body = await expect_refusal(w, "POST", "/v1/agents", 400, "validation_error",
                                json={"name": "n", "model": "m", "system_prompt": "",
                                      "tools": ["a"], "needs_approval": ["b"]}, headers=w.h)
    assert "needs_approval" in body["detail"]


@pytest.mark.parametrize(("entry", "said"), [
    ("a..b", "not a host name"), ("-x.example", "not a host name"),
    ("api.example:0", "bad port"), ("api.example:99999", "bad port"),
    ("*.com", "two or more labels"),
])
async def test_an_egress_entry_no_proxy_could_enforce_is_refused(
        world: World, entry: str, said: str) -> None:
    w = world
    spec = {"model": "m", "system_prompt": "",
            "sandbox": {"egress": ["api.example", entry]}}
    for path, body in (("/v1/agents", {"name": "n", **spec}),
                       (f"/v1/agents/{w.agent}/versions", spec)):
        refused = await expect_refusal(w, "POST", path, 400, "validation_error", json=body,
                                       headers=w.h)
        assert "sandbox.egress[1]" in refused["detail"] and said in refused["detail"]


async def test_a_wildcard_egress_entry_allows_subdomains(world: World) -> None:
    w = world
    r = await w.api.client.post("/v1/agents", headers=w.h, json={
        "name": "wild", "model": "m", "system_prompt": "",
        "sandbox": {"egress": ["*.example.com", "api.example.org:8443"]}})
    assert r.status_code == 201, r.text
    assert r.json()["sandbox"]["egress"] == ["*.example.com", "api.example.org:8443"]


async def test_oversize_body(world: World) -> None:
    w = world  # the test app allows 64 KiB
    big = b'{"agent_id": "%s", "input": "%s"}' % (w.agent.encode(), b"x" * 70_000)
    body = await expect_refusal(w, "POST", "/v1/runs", 413, "payload_too_large",
                                **_json(w, big))
    assert body["max_bytes"] == 64 * 1024

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: chunked upload
        for _ in range(10):
            yield b" " * 8000
        yield big

    await expect_refusal(w, "POST", "/v1/runs", 413, "payload_too_large",
                         content=chunks(), headers={**w.h, "Content-Type": "application/json"})


async def test_unknown_priority(world: World) -> None:
    w = world
    await expect_refusal(w, "POST", "/v1/runs", 400, "validation_error",
                         json={"agent_id": w.agent, "input": "x", "priority": "urgent"},
                         headers=w.h)


async def test_missing_or_bad_credentials(world: World) -> None:
    w = world
    for headers in ({}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer"},
                    {"Authorization": "Bearer tnt_not-a-real-key"},
                    {"Authorization": f"Bearer {w.api.operator['Authorization'][7:]}"}):
        r = await w.api.client.post("/v1/runs", json={"agent_id": w.agent, "input": "x"},
                                    headers=headers)
        assert r.status_code == 401 and r.json()["type"] == "unauthorized", headers
        assert r.headers["www-authenticate"] == "Bearer"
    assert (await row_counts(w.admin))["runs"] == 1


async def test_unknown_agent_or_version(world: World) -> None:
    w = world
    await expect_refusal(w, "POST", "/v1/runs", 404, "not_found",
                         json={"agent_id": "agt_" + "1" * 32, "input": "x"}, headers=w.h)
    await expect_refusal(w, "POST", "/v1/runs", 404, "not_found",
                         json={"agent_id": w.agent, "version": 7, "input": "x"}, headers=w.h)
    await expect_refusal(w, "GET", f"/v1/agents/{w.agent}/versions/7", 404, "not_found",
                         headers=w.h)


@pytest.mark.parametrize("bad_id", ["abc", "run_xyz", "run_" + "g" * 32, "agt_" + "0" * 32,
                                    "run_" + "0" * 31, "%20", "run_" + "0" * 32 + "0"])
async def test_ill_formed_run_ids_are_404(world: World, bad_id: str) -> None:
    w = world
    for method, path in (("GET", "/v1/runs/{}"), ("GET", "/v1/runs/{}/events"),
                         ("POST", "/v1/runs/{}/cancel")):
        await expect_refusal(w, method, path.format(bad_id), 404, "not_found", headers=w.h)


async def test_ill_formed_agent_tenant_and_version_ids_are_404(world: World) -> None:
    w = world
    await expect_refusal(w, "GET", "/v1/agents/agt_nothex", 404, "not_found", headers=w.h)
    await expect_refusal(w, "GET", "/v1/agents/" + w.run, 404, "not_found", headers=w.h)
    await expect_refusal(w, "POST", "/v1/runs", 404, "not_found",
                         json={"agent_id": "not-an-id", "input": "x"}, headers=w.h)
    for version in ("abc", "0", "-1", "99999999999"):
        await expect_refusal(w, "GET", f"/v1/agents/{w.agent}/versions/{version}", 404,
                             "not_found", headers=w.h)
    await expect_refusal(w, "POST", "/admin/v1/tenants/NOT_A_SLUG/api-keys", 404, "not_found",
                         headers=w.api.operator)
    await expect_refusal(w, "POST", "/admin/v1/tenants/ten_missing/api-keys", 404,
                         "not_found", headers=w.api.operator)
    await expect_refusal(w, "DELETE", f"/admin/v1/tenants/{w.tenant}/api-keys/key_zz", 404,
                         "not_found", headers=w.api.operator)


async def test_after_must_be_an_integer(world: World) -> None:
    w = world
    for after in ("abc", "1.5", "-1"):
        body = await expect_refusal(w, "GET", f"/v1/runs/{w.run}/events", 400,
                                    "validation_error", params={"after": after}, headers=w.h)
        assert "after" in body["detail"]
    await expect_refusal(w, "GET", f"/v1/runs/{w.run}/events", 400, "validation_error",
                         headers={**w.h, "Last-Event-ID": "x1"})


async def test_bad_cursor_and_limits(world: World) -> None:
    w = world
    await expect_refusal(w, "GET", "/v1/runs", 400, "validation_error",
                         params={"cursor": "garbage"}, headers=w.h)
    await expect_refusal(w, "GET", "/v1/runs", 400, "validation_error",
                         params={"limit": 0}, headers=w.h)
    await expect_refusal(w, "GET", "/v1/runs", 400, "validation_error",
                         params={"status": "exploded"}, headers=w.h)


async def test_webhook_must_be_http(world: World) -> None:
    w = world
    for url in ("ftp://example.com/hook", "file:///etc/passwd", "javascript:alert(1)",
                "http://", "not a url"):
        body = await expect_refusal(w, "POST", "/v1/runs", 400, "validation_error",
                                    json={"agent_id": w.agent, "input": "x", "webhook": url},
                                    headers=w.h)
        assert "webhook" in body["detail"]


async def test_bad_idempotency_key(world: World) -> None:
    w = world
    for key in ("k" * 256, "has space"):
        await expect_refusal(w, "POST", "/v1/runs", 400, "validation_error",
                             json={"agent_id": w.agent, "input": "x"},
                             headers={**w.h, "Idempotency-Key": key})


async def test_unknown_route_and_method(world: World) -> None:
    w = world
    await expect_refusal(w, "GET", "/v1/nothing", 404, "not_found", headers=w.h)
    await expect_refusal(w, "DELETE", "/v1/runs", 405, "method_not_allowed", headers=w.h)
