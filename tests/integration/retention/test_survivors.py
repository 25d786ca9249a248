"""Billing and audit outlive the operational record: runs made by the engine (a real
worker, the fake model, a real MCP server) leave usage facts and audit rows; once the
runs are past retention and deleted, the usage API's sums and every audit row are what
they were."""

from __future__ import annotations

from typing import Any

import asyncpg

from tenantry.db import Database
from tenantry.ids import TenantId
from tenantry.retention.cleaner import Cleaner
from tests.support.api import Api
from tests.support.scripts import answer, call, scripted
from tests.support.worker import Fakes


async def _usage(api: Api, h: dict[str, str]) -> list[dict[str, Any]]:
    views = []
    for params in ({}, {"group_by": "agent"}, {"group_by": "day"}):
        r = await api.client.get("/v1/usage", params=params, headers=h)
        assert r.status_code == 200, r.text
        views.append(r.json())
    return views


async def test_usage_sums_and_the_audit_log_are_unchanged_by_cleanup(
    api: Api, fakes: Fakes, worker: object, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["echo", "effect"])
    runs = [await api.start(h, agent, scripted(
        call("echo", text=f"hello {i}"), call("effect", note=f"n{i}"), answer("done"),
        text=f"run {i}")) for i in range(3)]
    for run_id in runs:
        events = await api.events_until_end(h, run_id)
        assert events[-1]["type"] == "RunFinished"
    usage_before = await _usage(api, h)
    assert usage_before[0]["total"]["runs"] == 3 and usage_before[0]["total"]["calls"] == 9
    assert usage_before[0]["total"]["cost_micros"] > 0
    audit_before = [dict(r) for r in await admin_conn.fetch(
        "SELECT * FROM audit_log WHERE tenant_id = $1 ORDER BY audit_id", tenant)]
    assert len(audit_before) == 6  # two tool calls per run
    facts_before = [dict(r) for r in await admin_conn.fetch(
        "SELECT * FROM usage_facts WHERE tenant_id = $1 ORDER BY run_id, seq", tenant)]
    # Age the runs past the default 30 days (the clock is the only thing set by hand).
    await admin_conn.execute(
        "UPDATE runs SET finished_at = finished_at - interval '40 days' WHERE tenant_id = $1",
        tenant)

    [result] = await Cleaner(db, None).run_once([TenantId(tenant)])

    assert result.runs == 3
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM runs WHERE tenant_id = $1", tenant) == 0
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM tombstones WHERE tenant_id = $1", tenant) == 3
    for run_id in runs:
        assert (await api.client.get(f"/v1/runs/{run_id}", headers=h)).status_code == 404
    assert await _usage(api, h) == usage_before
    assert [dict(r) for r in await admin_conn.fetch(
        "SELECT * FROM audit_log WHERE tenant_id = $1 ORDER BY audit_id", tenant)] \
        == audit_before
    assert [dict(r) for r in await admin_conn.fetch(
        "SELECT * FROM usage_facts WHERE tenant_id = $1 ORDER BY run_id, seq", tenant)] \
        == facts_before
