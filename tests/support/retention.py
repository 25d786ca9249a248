"""Ended runs in bulk, for the retention tests, chaos and benchmark: rows written straight
into Postgres as the superuser (what the engine would have left behind after a run with
``events`` events), ended ``ended_days_ago`` days ago; and, at the end, runs made and
put in a state over HTTP for the API's tests. Nothing here imports pytest."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import asyncpg

from tenantry.agents import service as agents
from tenantry.agents.spec import AgentSpec
from tenantry.db import Database
from tenantry.ids import AgentId, RunId, TenantId, uuid7
from tenantry.jsonutil import digest
from tenantry.runs import log
from tenantry.runs.events import ToolCompleted
from tenantry.tenants import service as tenants

if TYPE_CHECKING:  # only annotations: the seeding (chaos test, benchmark) needs no API
    from tests.support.api import Api


@dataclass(frozen=True, slots=True)
class Seeded:
    tenant: TenantId
    agent: AgentId


async def tenant_and_agent(db: Database, name: str) -> Seeded:
    tenant = (await tenants.create_tenant(db, name)).tenant.tenant_id
    agent = (await agents.create_agent(db, tenant, "a", AgentSpec("scripted", ""))).agent_id
    return Seeded(tenant, agent)


async def tenant_and_agent_before_live_versions(db: Database, admin: asyncpg.Connection,
                                                name: str) -> Seeded:
    """``tenant_and_agent`` on a database migrated only up to before migration 0036 (agents
    had no live version then: today's insert would not fit), written as that schema was."""
    tenant = (await tenants.create_tenant(db, name)).tenant.tenant_id
    agent = AgentId.new()
    spec = AgentSpec("scripted", "").to_json()
    await admin.execute("INSERT INTO agents (tenant_id, agent_id, name, latest_version) "
                        "VALUES ($1, $2, 'a', 1)", tenant.value, agent.uuid)
    await admin.execute("INSERT INTO agent_versions (tenant_id, agent_id, version, spec, "
                        "spec_sha256, tool_pins) VALUES ($1, $2, 1, $3::jsonb, $4, '{}')",
                        tenant.value, agent.uuid, json.dumps(spec), digest(spec))
    return Seeded(tenant, agent)


async def ended_runs(
    conn: asyncpg.Connection, seeded: Seeded, count: int, *, events: int = 10,
    ended_days_ago: float = 40.0, status: str = "finished", key_prefix: str | None = None,
    blob_refs: list[str] | None = None,
) -> list[RunId]:
    """``count`` runs that ended ``ended_days_ago`` days ago, each with ``events`` events
    (RunCreated, then ToolCompleted ones, the last RunFinished) and a model usage fact
    per run. ``blob_refs``: one per run, named by its first ToolCompleted's output_ref.
    ``status`` 'dead_lettered' writes a dead-lettered task (waiting, error flag)."""
    ids = [uuid7() for _ in range(count)]
    dead = status == "dead_lettered"
    await conn.execute(
        """
        INSERT INTO runs (tenant_id, run_id, agent_id, agent_version, status, input,
                          idempotency_key, request_sha256, kind, last_seq, steps,
                          input_tokens, output_tokens, cost_micros, error, created_at,
                          started_at, updated_at, finished_at)
        SELECT $1, r.id, $2, 1, $3, '{}'::jsonb,
               CASE WHEN $6::text IS NULL THEN NULL ELSE $6 || r.n::text END,
               '\\x00'::bytea, CASE WHEN $7 THEN 'activity' ELSE 'agent' END, $4, 3,
               100, 20, 1500, CASE WHEN $7 THEN '{"dead_lettered": true}'::jsonb END,
               now() - make_interval(days => $5::int) - interval '1 hour',
               now() - make_interval(days => $5::int) - interval '1 hour',
               now() - make_interval(days => $5::int),
               CASE WHEN $7 THEN NULL ELSE now() - make_interval(days => $5::int) END
        FROM unnest($8::uuid[]) WITH ORDINALITY AS r (id, n)
        """,
        seeded.tenant.value, seeded.agent.uuid, "waiting" if dead else status, events,
        int(ended_days_ago), key_prefix, dead, ids)
    if not dead:  # what the status change's trigger would have counted (migration 0008)
        await conn.execute(
            """
            INSERT INTO run_status_totals AS t (tenant_id, status, runs) VALUES ($1, $2, $3)
            ON CONFLICT (tenant_id, status) DO UPDATE SET runs = t.runs + $3
            """, seeded.tenant.value, status, count)
    refs = blob_refs or []
    await conn.execute(
        """
        INSERT INTO run_events (tenant_id, run_id, seq, type, data)
        SELECT $1, r.id, s.seq,
               CASE WHEN s.seq = 1 THEN 'RunCreated' WHEN s.seq = $2 THEN 'RunFinished'
                    ELSE 'ToolCompleted' END,
               CASE WHEN s.seq = 2 AND r.n <= cardinality($4::text[])
                    THEN jsonb_build_object('key', 'k', 'output_ref', $4[r.n])
                    ELSE jsonb_build_object('n', s.seq) END
        FROM unnest($3::uuid[]) WITH ORDINALITY AS r (id, n)
        CROSS JOIN generate_series(1, $2) AS s (seq)
        """,
        seeded.tenant.value, events, ids, refs)
    await conn.execute(
        """
        INSERT INTO usage_facts (tenant_id, run_id, seq, agent_id, agent_version, provider,
                                 account, model, input_tokens, cached_input_tokens,
                                 cache_write_input_tokens, output_tokens, cost_micros,
                                 price_version)
        SELECT $1, r.id, 2, $2, 1, 'scripted', 'scripted', 'scripted', 100, 0, 0, 20, 1500,
               'test'
        FROM unnest($3::uuid[]) AS r (id)
        """,
        seeded.tenant.value, seeded.agent.uuid, ids)
    return [RunId(i) for i in ids]


async def named_by_event(db: Database, tenant: TenantId, run: RunId, output_ref: str, *,
                         result_chars: int = 100, blob_refs: list[str] | None = None) -> int:
    """Append to ``run`` (an ended one: no lease) a ToolCompleted naming ``output_ref``
    (and ``blob_refs``) as the gateway writes a large output, through the log's own append;
    its seq. ``result_chars`` over 8 KiB: the event's data is spilled to
    run_event_payloads, its log row only ``{"$payload": n}``."""
    async with db.tenant_tx(tenant) as conn:
        return await log.append(conn, tenant, run, ToolCompleted(
            f"{run}:2:0", "echo", 2, 0, {}, result="x" * result_chars, truncated=True,
            output_bytes=20_000, output_ref=output_ref, blob_refs=blob_refs), epoch=None)


# -- through the API (tests/integration/retention/test_api_retention.py, test_erase.py) ----

async def cancelled_run(api: Api, headers: dict[str, str], agent: str, *,
                        idempotency_key: str | None = None,
                        body: dict[str, object] | None = None) -> str:
    """A run started and cancelled over HTTP while queued: terminal at once, no worker."""
    extra = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    r = await api.client.post("/v1/runs", json=body or {"agent_id": agent, "input": "x"},
                              headers={**headers, **extra})
    assert r.status_code == 202, r.text
    run_id: str = r.json()["run_id"]
    r = await api.client.post(f"/v1/runs/{run_id}/cancel", headers=headers)
    assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
    return run_id


async def set_status(conn: asyncpg.Connection, run_id: str, status: str) -> None:
    """Put a run (as the superuser) in a status no worker is here to give it."""
    await conn.execute("UPDATE runs SET status = $2, finished_at = NULL WHERE run_id = $1",
                       RunId.parse(run_id).uuid, status)


async def block(conn: asyncpg.Connection, tenant: str, run_id: str, blocker: str,
                child: str | None = None) -> None:
    """Keep an ended run from deletion: ``webhook_pending``, ``live_children`` (``child``:
    a live run made its child) or ``pending_approval``."""
    run = RunId.parse(run_id).uuid
    if blocker == "webhook_pending":
        await conn.execute("UPDATE runs SET webhook_url = 'http://127.0.0.1:9/hook', "
                           "webhook_state = 'pending' WHERE run_id = $1", run)
    elif blocker == "live_children":
        assert child is not None
        await conn.execute("UPDATE runs SET parent_run_id = $2 WHERE run_id = $1",
                           RunId.parse(child).uuid, run)
    else:
        await conn.execute(
            "INSERT INTO approvals (tenant_id, approval_id, run_id, key, tool, arguments, "
            "arguments_sha256, expires_at) VALUES ($1, $2, $3, 'k', 't', '{}', '\\x00', "
            "now() + interval '1 day')", tenant, uuid7(), run)
