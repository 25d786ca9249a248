"""The audit trail, readable: a tenant reads every tool call its runs made and every change
to its account with who made it; the operator reads the same; another tenant reads none
of it; the audit-retention policy expires account changes as it does tool calls."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

from tenantry.db import Database
from tenantry.ids import TenantId
from tenantry.retention.cleaner import Cleaner
from tenantry.tools.audit import digest
from tests.support.api import Api
from tests.support.scripts import answer, call, scripted
from tests.support.worker import Fakes


async def _trail(api: Api, path: str, headers: dict[str, str], **query: object
                 ) -> list[dict[str, object]]:
    """Every entry, a page of 2 at a time (each page after the last's cursor)."""
    entries: list[dict[str, object]] = []
    cursor = None
    while True:
        params = {"limit": 2, **query, **({"cursor": cursor} if cursor else {})}
        r = await api.client.get(path, headers=headers, params=params)
        assert r.status_code == 200, r.text
        entries += r.json()["data"]
        cursor = r.json()["next_cursor"]
        if cursor is None:
            return entries


async def test_tool_calls_and_account_changes_with_who_made_them(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    tenant, h = await api.tenant("A")
    _, other = await api.tenant("B")
    [admin_key] = (await api.client.get("/v1/api-keys", headers=h)).json()["data"]
    # Changes: the tenant's key makes a key and stores a secret, the operator another secret;
    # a refused change is no change.
    made = await api.client.post("/v1/api-keys", headers=h, json={"scopes": ["runs:read"]})
    assert made.status_code == 201
    assert (await api.client.put("/v1/secrets/crm", headers=h,
                                 json={"value": "s3cret"})).status_code == 201
    assert (await api.client.post("/v1/api-keys", headers=h,
                                  json={"scopes": ["nope"]})).status_code == 400
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/secrets/ops", headers=api.operator,
                             json={"value": "x"})
    assert r.status_code == 201
    # A tool call, by a run.
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["echo"])
    run_id = await api.start(h, agent, scripted(call("echo", text="hi"), answer("done")))
    assert (await api.events_until_end(h, run_id))[-1]["type"] == "RunFinished"

    trail = await _trail(api, "/v1/audit", h)
    assert [e["at"] for e in trail] == sorted((e["at"] for e in trail), reverse=True)
    assert len({e["id"] for e in trail}) == len(trail)  # no page repeats another's entry
    changes = [(e["actor"], e["action"], e["target"]) for e in trail if e["kind"] == "change"]
    me = f"key:{admin_key['key_id']}"
    assert (me, "POST /v1/api-keys", "/v1/api-keys") in changes
    assert (me, "PUT /v1/secrets/{name}", "/v1/secrets/crm") in changes
    assert ("operator", "PUT /admin/v1/tenants/{tenant_id}/secrets/{name}",
            f"/admin/v1/tenants/{tenant}/secrets/ops") in changes
    assert not any("nope" in str(e) or "s3cret" in str(e) for e in trail)
    assert [c for c in changes if c[1] == "POST /v1/api-keys"] == [
        (me, "POST /v1/api-keys", "/v1/api-keys")]  # the refused one is not there
    [tool_call] = [e for e in trail if e["kind"] == "tool_call"]
    assert (tool_call["run_id"], tool_call["tool"], tool_call["outcome"]) == (run_id, "echo",
                                                                              "ok")
    assert str(tool_call["key"]).startswith(f"{run_id}:")
    assert tool_call["arguments_sha256"] == digest({"text": "hi"}).hex()

    # Filters, and the operator's reading of the same trail.
    assert await _trail(api, "/v1/audit", h, run_id=run_id) == [tool_call]
    assert {e["kind"] for e in await _trail(api, "/v1/audit", h, kind="change")} == {"change"}
    assert {e["actor"] for e in await _trail(api, "/v1/audit", h, actor="operator")} == {
        "operator"}
    assert await _trail(api, f"/admin/v1/tenants/{tenant}/audit", api.operator) == trail
    # Another tenant sees none of it; a key without audit:read sees nothing at all.
    assert all(e["kind"] == "change" for e in await _trail(api, "/v1/audit", other))
    assert not {e["id"] for e in trail} & {e["id"] for e in await _trail(api, "/v1/audit",
                                                                           other)}
    viewer = {"Authorization": f"Bearer {made.json()['api_key']}"}
    r = await api.client.get("/v1/audit", headers=viewer)
    assert r.status_code == 403 and r.json()["scope"] == "audit:read"


async def test_bad_audit_queries_are_400s(api: Api) -> None:
    _, h = await api.tenant()
    for query in ("cursor=1.2", "cursor=1.%s" % ("0" * 31), "kind=other",
                  "run_id=run_x", "actor=root", "since=yesterday", "since=2030-01-01T00:00:00",
                  "since=0.5", "since=1700000000",
                  "limit=0", "limit=201", "actor=key:%00"):
        r = await api.client.get(f"/v1/audit?{query}", headers=h)
        assert r.status_code == 400, (query, r.text)
        assert r.headers["content-type"] == "application/problem+json"


async def test_audit_retention_expires_account_changes_too(
    api: Api, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    tenant, h = await api.tenant()
    for n in range(3):
        r = await api.client.put(f"/v1/secrets/s{n}", headers=h, json={"value": "v"})
        assert r.status_code == 201
    await admin_conn.execute(  # two of them made long ago (the table is append-only)
        "ALTER TABLE account_changes DISABLE TRIGGER account_changes_append_only")
    await admin_conn.execute(
        "UPDATE account_changes SET created_at = $2 WHERE tenant_id = $1 AND target <> "
        "'/v1/secrets/s2'", tenant, datetime.now(UTC) - timedelta(days=40))
    await admin_conn.execute(
        "ALTER TABLE account_changes ENABLE TRIGGER account_changes_append_only")
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/audit-retention",
                             headers=api.operator, json={"days": 30})
    assert r.status_code == 200, r.text
    [result] = await Cleaner(db, None).run_once([TenantId.parse(tenant)])
    assert result.audit_expired >= 2
    targets = {e["target"] for e in await _trail(api, "/v1/audit", h, kind="change")}
    assert "/v1/secrets/s2" in targets and not {"/v1/secrets/s0", "/v1/secrets/s1"} & targets
