"""Bad input gets a clear problem+json answer and writes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest

from tenantry.api.console import epoch, session
from tests.support.api import OPERATOR_TOKEN, Api
from tests.support.db import row_counts


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


@pytest.mark.parametrize("entry", [
    "a..b", "-x.example", "api.example:0", "api.example:99999", "*.com", "*.1.2", "a_b.example",
    "api.example.", "[::1]",
])
async def test_an_egress_entry_no_proxy_could_enforce_is_refused(
        world: World, entry: str) -> None:
    """The document's pattern for an entry is the rule (every entry of it the proxy
    enforces), so what it refuses is named by its place."""
    w = world
    spec = {"model": "m", "system_prompt": "",
            "sandbox": {"egress": ["api.example", entry]}}
    for path, body in (("/v1/agents", {"name": "n", **spec}),
                       (f"/v1/agents/{w.agent}/versions", spec)):
        refused = await expect_refusal(w, "POST", path, 400, "validation_error", json=body,
                                       headers=w.h)
        assert refused["detail"].startswith("sandbox.egress.1: String should match pattern")


async def test_a_wildcard_egress_entry_allows_subdomains(world: World) -> None:
    w = world
    r = await w.api.client.post("/v1/agents", headers=w.h, json={
        "name": "wild", "model": "scripted", "system_prompt": "",
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


# -- the edge's rules (docs/reference/api.md, "Input rules") --------------------------------
# Each of these reached Postgres (or the network) and answered 5xx before the edge knew it.

INT4_MAX = 2**31 - 1


def _account(**fields: object) -> dict[str, object]:
    return {"account_id": "acct-edge", "provider": "openai", "base_url": "http://127.0.0.1:9/v1",
            "models": ["scripted"], "region": "us", **fields}


@pytest.mark.parametrize("tpm", [INT4_MAX + 1, 10_000_000_000, 2**63])
async def test_a_tpm_larger_than_its_column_is_refused(world: World, tpm: int) -> None:
    w = world
    body = await expect_refusal(w, "POST", "/admin/v1/model-accounts", 400, "validation_error",
                                json=_account(tpm=tpm), headers=w.api.operator)
    assert body["errors"][0]["loc"] == ["body", "tpm"]
    await expect_refusal(w, "POST", f"/admin/v1/tenants/{w.tenant}/model-accounts", 400,
                         "validation_error", json={**_account(tpm=tpm), "secret_name": "k"},
                         headers=w.api.operator)
    # The largest the column holds is accepted, and read back as given.
    r = await w.api.client.post("/admin/v1/model-accounts", json=_account(tpm=INT4_MAX),
                                headers=w.api.operator)
    assert r.status_code == 201, r.text
    assert r.json()["tpm"] == INT4_MAX


@pytest.mark.parametrize("field", ["name", "model", "system_prompt"])
async def test_a_nul_in_an_agents_text_is_refused(world: World, field: str) -> None:
    w = world
    spec = {"name": "n", "model": "scripted", "system_prompt": "", field: "a\x00b"}
    body = await expect_refusal(w, "POST", "/v1/agents", 400, "validation_error", json=spec,
                                headers=w.h)
    assert body["errors"][0]["loc"] == ["body", field] and "NUL" in body["detail"]
    if field != "name":
        spec.pop("name")
        await expect_refusal(w, "POST", f"/v1/agents/{w.agent}/versions", 400,
                             "validation_error", json=spec, headers=w.h)


async def test_a_nul_or_lone_surrogate_anywhere_in_text_or_json_is_refused(world: World) -> None:
    w = world
    fallback = {"name": "n", "model": "m", "system_prompt": "", "fallback_models": ["x\x00"]}
    await expect_refusal(w, "POST", "/v1/agents", 400, "validation_error", json=fallback,
                         headers=w.h)
    for value in ({"deep": [{"k": "v\x00"}]}, {"k\x00": 1}, "\x00"):
        body = await expect_refusal(w, "POST", "/v1/runs", 400, "validation_error",
                                    json={"agent_id": w.agent, "input": value}, headers=w.h)
        assert "input" in body["detail"] and "NUL" in body["detail"]
    # JSON may spell an unpaired surrogate; nothing downstream can encode one.
    raw = b'{"agent_id": "%s", "input": {"text": "\\ud800"}}' % w.agent.encode()
    body = await expect_refusal(w, "POST", "/v1/runs", 400, "validation_error",
                                **_json(w, raw))
    assert "surrogate" in body["detail"]
    await expect_refusal(w, "POST", "/admin/v1/tenants", 400, "validation_error",
                         json={"name": "Acme\x00"}, headers=w.api.operator)


@pytest.mark.parametrize("number", [2**64, -(2**63) - 1, 2**70, -(10**30)])
async def test_an_integer_past_64_bits_in_json_is_refused_not_500(world: World,
                                                                  number: int) -> None:
    w = world
    for value in ({"x": number}, [1, [number]], number):
        body = await expect_refusal(w, "POST", "/v1/runs", 400, "validation_error",
                                    json={"agent_id": w.agent, "input": value}, headers=w.h)
        assert "64 bits" in body["detail"]
    # The largest ones the encoder writes are accepted.
    for edge in (2**64 - 1, -(2**63)):
        response = await w.api.client.post("/v1/runs", headers=w.h,
                                           json={"agent_id": w.agent, "input": {"x": edge}})
        assert response.status_code == 202, response.text


@pytest.mark.parametrize("url", ["http://", "https://", "http://:80/mcp", "http://u:p@host/mcp",
                                 "http://host:0/mcp", "http://host:99999/mcp",
                                 "http://ho st/mcp", "http://host/m\x00cp", "HTTP://host/mcp",
                                 "http://õz>\"-/", "http://[zz]/mcp"])
async def test_a_tool_server_url_no_client_can_call_is_refused_not_502(
        world: World, url: str) -> None:
    w = world
    body = await expect_refusal(
        w, "POST", f"/admin/v1/tenants/{w.tenant}/tool-servers", 400, "validation_error",
        json={"name": "crm", "url": url, "honours_idempotency_keys": True},
        headers=w.api.operator)
    assert body["errors"][0]["loc"] == ["body", "url"]
    await expect_refusal(w, "POST", "/admin/v1/model-accounts", 400, "validation_error",
                         json=_account(base_url=url), headers=w.api.operator)
    await expect_refusal(w, "POST", "/v1/runs", 400, "validation_error",
                         json={"agent_id": w.agent, "input": "x", "webhook": url}, headers=w.h)


async def test_integers_beyond_their_column_are_refused(world: World) -> None:
    w = world
    spec = {"model": "m", "system_prompt": ""}
    await expect_refusal(w, "POST", f"/v1/agents/{w.agent}/versions", 400, "validation_error",
                         json={**spec, "version": INT4_MAX + 1}, headers=w.h)
    await expect_refusal(w, "POST", "/v1/runs", 400, "validation_error",
                         json={"agent_id": w.agent, "input": "x", "version": 2**63},
                         headers=w.h)
    await expect_refusal(w, "GET", f"/v1/runs/{w.run}/events", 400, "validation_error",
                         params={"after": INT4_MAX + 1}, headers=w.h)


@pytest.mark.parametrize("value", ["\u00b2", "\u0661", "\uff11", "99999999999", "-1"])
async def test_digits_in_paths_and_headers_are_ascii_and_in_range(
        world: World, value: str) -> None:
    """str.isdigit() says yes to '²' and int() then raises: that was a 500."""
    w = world
    await expect_refusal(w, "GET", f"/v1/agents/{w.agent}/versions/{value}", 404, "not_found",
                         headers=w.h)
    body = await expect_refusal(w, "GET", f"/v1/runs/{w.run}/events", 400, "validation_error",
                                headers={**w.h, "Last-Event-ID": value.encode()})
    assert "last-event-id" in body["detail"].lower()


async def test_integers_are_not_coerced_from_strings_or_booleans(world: World) -> None:
    w = world
    for bad in ("5", True, 5.5):
        await expect_refusal(w, "POST", "/v1/agents", 400, "validation_error", json={
            "name": "n", "model": "m", "system_prompt": "", "limits": {"max_steps": bad}},
            headers=w.h)
    await expect_refusal(w, "POST", f"/admin/v1/tenants/{w.tenant}/tool-servers", 400,
                         "validation_error", json={"name": "crm", "url": "http://host/mcp",
                                                   "honours_idempotency_keys": "yes"},
                         headers=w.api.operator)


async def test_path_names_that_cannot_name_anything_are_404(world: World) -> None:
    w = world
    for name in ("a%00b", "UPPER", "x" * 100):
        await expect_refusal(w, "POST", f"/admin/v1/tenants/{w.tenant}/tool-servers/{name}/pin",
                             404, "not_found", headers=w.api.operator)
        await expect_refusal(w, "DELETE", f"/admin/v1/model-accounts/{name}", 404, "not_found",
                             headers=w.api.operator)
    await expect_refusal(w, "PUT", f"/admin/v1/tenants/{w.tenant}/secrets/a%00b", 400,
                         "validation_error", json={"value": "v"}, headers=w.api.operator)
    await expect_refusal(w, "PUT", f"/admin/v1/tenants/{w.tenant}/secrets/k", 400,
                         "validation_error", json={"value": "v\x00"}, headers=w.api.operator)


async def test_a_usage_window_at_the_end_of_the_calendar_is_refused(world: World) -> None:
    w = world
    await expect_refusal(w, "GET", "/v1/usage", 400, "validation_error",
                         params={"from": "9999-12-30", "to": "9999-12-31"}, headers=w.h)
    await expect_refusal(w, "GET", "/admin/v1/usage", 400, "validation_error",
                         params={"from": "9999-12-30", "to": "9999-12-31"},
                         headers=w.api.operator)


# -- integers in queries and headers are ASCII digits, within their column ----------------
# pydantic's lax int took '+1', ' 1', '1_0', '-0' and '1.0'; int() takes '١٢'; 2**63 fits
# no column. Each must be the same 400 problem+json, never a 5xx and never a silent guess.

NOT_ASCII_DIGITS = ["\u00b2", "\u0661\u0662", "\uff11", "+1", "1_0", "-0", "1.0", "0x1",
                    str(2**63), "9" * 40, ""]


def _integer_parameters(w: World) -> list[tuple[str, str, dict[str, str]]]:
    """Every integer query parameter of the API: (path, parameter, credentials)."""
    op = w.api.operator
    return [("/v1/runs", "limit", w.h), ("/v1/agents", "limit", w.h),
            (f"/v1/runs/{w.run}/events", "after", w.h),
            (f"/v1/runs/{w.run}/events", "limit", {**w.h, "Accept": "application/json"}),
            ("/admin/v1/tenants", "limit", op),
            (f"/admin/v1/tenants/{w.tenant}/api-keys", "limit", op),
            ("/admin/v1/billing/reconciliations", "limit", op),
            ("/admin/v1/prices/scripted", "limit", op), ("/admin/v1/prices", "limit", op),
            ("/admin/v1/approvals/pending", "each", op),
            (f"/admin/v1/tenants/{w.tenant}/approvals/pending", "limit", op)]


@pytest.mark.parametrize("value", [*NOT_ASCII_DIGITS, " 1", "1 "])
async def test_integer_query_parameters_are_ascii_digits(world: World, value: str) -> None:
    w = world
    for path, name, headers in _integer_parameters(w):
        body = await expect_refusal(w, "GET", path, 400, "validation_error",
                                    params={name: value}, headers=headers)
        assert body["errors"][0]["loc"] == ["query", name], (path, name)


@pytest.mark.parametrize("value", NOT_ASCII_DIGITS)
async def test_last_event_id_is_ascii_digits(world: World, value: str) -> None:
    """(' 1' cannot be sent: HTTP strips a header value's surrounding whitespace.)"""
    w = world
    for accept in ("text/event-stream", "application/json"):
        body = await expect_refusal(w, "GET", f"/v1/runs/{w.run}/events", 400,
                                    "validation_error", headers={
                                        **w.h, "Accept": accept,
                                        "Last-Event-ID": value.encode()})
        assert body["errors"][0]["loc"] == ["header", "last-event-id"]


async def test_the_largest_seq_and_limit_are_accepted(world: World) -> None:
    w = world
    r = await w.api.client.get(f"/v1/runs/{w.run}/events", headers={
        **w.h, "Accept": "application/json"}, params={"after": INT4_MAX, "limit": 1000})
    assert r.status_code == 200 and r.json()["events"] == []
    r = await w.api.client.get(f"/v1/runs/{w.run}/events", headers={
        **w.h, "Accept": "application/json", "Last-Event-ID": "0"})
    assert r.status_code == 200 and r.json()["events"][0]["seq"] == 1


@pytest.mark.parametrize("value", ["\u00b2", "\u0661\u0662", "+1", "-0", str(2**63)])
async def test_the_consoles_stream_resumes_only_from_ascii_digits(
        world: World, value: str) -> None:
    w = world
    cookie, _ = session.issue(OPERATOR_TOKEN, epoch=epoch.FIRST)
    r = await w.api.client.get(f"/console/runs/{w.tenant}/{w.run}/events",
                               params={"after": value},
                               headers={"Cookie": f"{session.SESSION_COOKIE}={cookie}"})
    assert r.status_code == 400 and "event seq" in r.text
