"""Erasing a tenant end to end over HTTP (ADR 0017): it admits nothing, its secrets, data
key and tool servers go at once, its runs go through the cleaner, its tombstones stay —
and nothing of another tenant is touched."""

from __future__ import annotations

import uuid

import asyncpg

from tenantry.db import Database
from tenantry.ids import AgentId, TenantId
from tenantry.retention import erase
from tenantry.retention.cleaner import Cleaner
from tests.support.activities import version_body
from tests.support.api import Api
from tests.support.retention import Seeded, ended_runs
from tests.support.worker import Fakes

ECHO = """
    def handle(value, context):
        return value
"""


async def _count(conn: asyncpg.Connection, table: str, tenant: str) -> int:
    # The table names are this module's constants, never input.
    count: int = await conn.fetchval(f"SELECT count(*) FROM {table} WHERE tenant_id = $1",
                                     tenant)
    return count


async def test_erase_a_tenant_end_to_end(
    api: Api, db: Database, admin_conn: asyncpg.Connection, fakes: Fakes,
) -> None:
    tenant, h = await api.tenant("Leaving")
    keep, keep_h = await api.tenant("Staying")
    agent = await api.agent(h)
    seeded = Seeded(TenantId.parse(tenant), AgentId.parse(agent))
    await ended_runs(admin_conn, seeded, 3, ended_days_ago=1)  # well within retention
    await api.start(h, agent, "still queued")
    r = await api.client.post("/v1/activities", headers=h,
                              json={"name": "echo", **version_body(ECHO)})
    assert r.status_code == 201, r.text
    for who in (tenant, keep):
        r = await api.client.put(f"/admin/v1/tenants/{who}/secrets/token",
                                 json={"value": "s3cret"}, headers=api.operator)
        assert r.status_code == 201, r.text
        await api.tool_server(who, fakes.mcp.url)
        await api.model_account(f"own-{who.replace('_', '-')}", "http://127.0.0.1:9/v1",
                                tenant=who, secret_name="token")
    kept_run = await api.start(keep_h, await api.agent(keep_h), "unrelated")

    r = await api.client.post(f"/admin/v1/tenants/{tenant}/erase", headers=api.operator)
    assert r.status_code == 202, r.text
    job = r.json()
    assert (job["status"], job["tenant_id"], job["requested_by"]) == (
        "running", tenant, "operator")
    assert (job["runs_total"], job["runs_cancelled"], job["secrets_deleted"],
            job["tool_servers_deleted"]) == (4, 1, 1, 1)
    # Asked again while it runs: the same job.
    again = await api.client.post(f"/admin/v1/tenants/{tenant}/erase", headers=api.operator)
    assert again.status_code == 202 and again.json()["job_id"] == job["job_id"]

    # Crypto-shredding happened at once.
    for table in ("secrets", "tenant_keys", "tool_servers"):
        assert await _count(admin_conn, table, tenant) == 0, table
        assert await _count(admin_conn, table, keep) == 1, table
    # Its own model accounts are disabled (their keys are gone); the other's serve on.
    enabled = dict(await admin_conn.fetch(
        "SELECT tenant_id, enabled FROM model_accounts WHERE tenant_id = ANY($1)",
        [tenant, keep]))
    assert enabled == {tenant: False, keep: True}
    # Its API key is refused...
    assert (await api.client.get("/v1/runs", headers=h)).status_code == 401
    assert (await api.client.post("/v1/runs", json={"agent_id": agent, "input": 1},
                                  headers=h)).status_code == 401
    # ...and even a key whose revocation a process had not heard of admits nothing.
    await admin_conn.execute("UPDATE api_keys SET revoked_at = NULL WHERE tenant_id = $1",
                             tenant)
    before = await _count(admin_conn, "runs", tenant)
    for path, body in (("/v1/runs", {"agent_id": agent, "input": 1}),
                       ("/v1/activity-tasks", {"activity": "echo", "input": 1})):
        r = await api.client.post(path, json=body, headers=h)
        assert r.status_code == 409, (path, r.text)
        assert r.json()["type"] == "tenant_erased"
    assert await _count(admin_conn, "runs", tenant) == before
    await admin_conn.execute("UPDATE api_keys SET revoked_at = now() WHERE tenant_id = $1",
                             tenant)
    # Nor does the operator hand it a new key.
    keys = await _count(admin_conn, "api_keys", tenant)
    r = await api.client.post(f"/admin/v1/tenants/{tenant}/api-keys", headers=api.operator)
    assert r.status_code == 409 and r.json()["type"] == "tenant_erased", r.text
    assert await _count(admin_conn, "api_keys", tenant) == keys

    done = await erase.run_until_done(Cleaner(db, None), TenantId.parse(tenant),
                                      job["job_id"], poll_seconds=0.05)
    assert done.status == "done"
    r = await api.client.get(f"/admin/v1/erase-jobs/{job['job_id']}", headers=api.operator)
    assert r.status_code == 200
    final = r.json()
    assert (final["status"], final["runs_deleted"], final["runs_left"]) == ("done", 4, 0)
    assert final["finished_at"] is not None
    assert await _count(admin_conn, "runs", tenant) == 0
    assert await _count(admin_conn, "run_events", tenant) == 0
    assert await _count(admin_conn, "tombstones", tenant) == 4
    r = await api.client.get(f"/admin/v1/tenants/{tenant}/tombstones", headers=api.operator)
    assert {t["reason"] for t in r.json()["data"]} == {"erase"} and len(r.json()["data"]) == 4
    # The other tenant's run, key, secret and server are as they were.
    assert (await api.run(keep_h, kept_run))["status"] == "queued"
    assert await _count(admin_conn, "tombstones", keep) == 0


async def test_erase_job_lookups_of_unknown_jobs_are_404(api: Api) -> None:
    for job in (str(uuid.uuid4()), "not-a-job", "a%00b"):
        r = await api.client.get(f"/admin/v1/erase-jobs/{job}", headers=api.operator)
        assert r.status_code == 404 and r.json()["type"] == "not_found", job
    r = await api.client.get(f"/admin/v1/erase-jobs/{uuid.uuid4()}")
    assert r.status_code == 401
