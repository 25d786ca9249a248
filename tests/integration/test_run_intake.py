"""POST /v1/runs' group commit (ADR 0019): many requests admitted in one transaction, each
still answered for itself, and a tenant's limits and load counters exact."""

from __future__ import annotations

import asyncio

import asyncpg

from tenantry.api.run_bodies import StartRun
from tenantry.api.runs import request_digest
from tenantry.db import Database
from tenantry.errors import Conflict, NotFound, QuotaExceeded
from tenantry.ids import AgentId, TenantId
from tenantry.runs.intake import RunIntake
from tenantry.runs.service import Created, RunRequest
from tests.support.api import Api

LIVE = "('queued', 'running', 'waiting')"


async def _policy(api: Api, tenant: str, **body: object) -> None:
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/policy", json=body,
                             headers=api.operator)
    assert r.status_code == 200, r.text


async def _load_matches_rows(conn: asyncpg.Connection, tenant: str) -> tuple[int, int]:
    """(live runs counted from the rows, as tenant_load holds them)."""
    counted = await conn.fetchval(
        f"SELECT count(*) FROM runs WHERE tenant_id = $1 AND status IN {LIVE}", tenant)
    held = await conn.fetchval(
        "SELECT queued + running + waiting FROM tenant_load WHERE tenant_id = $1", tenant)
    return counted, held


def _request(agent: str, value: object, *, key: str | None = None,
             version: int | None = None) -> RunRequest:
    # The digest the API takes of the same body, so a request over HTTP can replay it.
    body = StartRun(agent_id=agent, version=version, input=value)
    return RunRequest(agent_id=AgentId.parse(agent), version=version, input=value,
                      webhook_url=None, priority="interactive", idempotency_key=key,
                      request_sha256=request_digest(body))


async def test_concurrent_creates_never_pass_max_queued_and_the_count_equals_the_rows(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    whale, wh = await api.tenant("Whale")
    small, sh = await api.tenant("Small")
    await _policy(api, whale, max_queued=25)
    await _policy(api, small, max_queued=7)
    whale_agent, small_agent = await api.agent(wh), await api.agent(sh)

    async def post(h: dict[str, str], agent: str, i: int) -> tuple[int, str]:
        r = await api.client.post("/v1/runs", json={"agent_id": agent, "input": i}, headers=h)
        return r.status_code, r.json().get("type", "")

    for wave in range(2):  # the second wave finds both tenants already at their limit
        answers = await asyncio.gather(
            *(post(wh, whale_agent, i) for i in range(80)),
            *(post(sh, small_agent, i) for i in range(30)))
        whale_answers, small_answers = answers[:80], answers[80:]
        accepted = 0 if wave else 1
        assert whale_answers.count((202, "")) == 25 * accepted
        assert small_answers.count((202, "")) == 7 * accepted
        refused = {a for a in answers if a[0] != 202}
        assert refused == {(429, "quota_exceeded")}
        assert await _load_matches_rows(admin_conn, whale) == (25, 25)
        assert await _load_matches_rows(admin_conn, small) == (7, 7)
    # Every run admitted has its RunCreated, and nothing else was written.
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM runs r JOIN run_events e USING (tenant_id, run_id)"
        " WHERE e.seq = 1 AND e.type = 'RunCreated'") == 32
    assert await admin_conn.fetchval("SELECT count(*) FROM run_events") == 32


async def test_concurrent_creates_admit_exactly_up_to_the_limit_after_runs_end(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    tenant, h = await api.tenant()
    await _policy(api, tenant, max_queued=10)
    agent = await api.agent(h)
    first = [await api.start(h, agent, f"run {i}") for i in range(10)]
    for run in first[:4]:  # four end: exactly four more fit
        r = await api.client.post(f"/v1/runs/{run}/cancel", headers=h)
        assert r.status_code == 200
    answers = await asyncio.gather(*(
        api.client.post("/v1/runs", json={"agent_id": agent, "input": i}, headers=h)
        for i in range(40)))
    assert sorted(r.status_code for r in answers) == [202] * 4 + [429] * 36
    assert await _load_matches_rows(admin_conn, tenant) == (10, 10)


async def test_replays_inside_one_batch_answer_the_same_run(
    api: Api, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    tenant_id, h = await api.tenant()
    agent = await api.agent(h)
    tenant = TenantId(tenant_id)
    intake = RunIntake(db, flushers=1)
    try:
        # Gathered before the intake's task runs: one batch.
        answers = await asyncio.gather(
            intake.create(tenant, _request(agent, {"order": 1}, key="order-1")),
            intake.create(tenant, _request(agent, {"order": 1}, key="order-1")),
            intake.create(tenant, _request(agent, {"order": 2}, key="order-1")),
            intake.create(tenant, _request(agent, {"order": 1}, key="order-1")),
            intake.create(tenant, _request(agent, "other")),
            return_exceptions=True)
        assert intake.batches == 1
    finally:
        await intake.close()
    first, replay, changed, replay_again, other = answers
    assert isinstance(first, Created) and first.created
    assert replay == replay_again == Created(first.run_id, first.status, False)
    assert isinstance(changed, Conflict) and changed.extra["run_id"] == str(first.run_id)
    assert isinstance(other, Created) and other.created and other.run_id != first.run_id
    assert await admin_conn.fetchval("SELECT count(*) FROM runs") == 2
    assert await _load_matches_rows(admin_conn, tenant_id) == (2, 2)
    # A later retry, in a batch of its own, finds the same run.
    again = await api.client.post("/v1/runs", json={"agent_id": agent, "input": {"order": 1}},
                                  headers={**h, "Idempotency-Key": "order-1"})
    assert again.status_code == 202 and again.json()["run_id"] == str(first.run_id)


async def test_a_refused_item_does_not_affect_the_others_in_its_batch(
    api: Api, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    a_id, ah = await api.tenant("A")
    b_id, bh = await api.tenant("B")
    await _policy(api, b_id, max_queued=1)
    a_agent, b_agent = await api.agent(ah), await api.agent(bh)
    taken = await api.client.post("/v1/runs", json={"agent_id": a_agent, "input": "x"},
                                  headers={**ah, "Idempotency-Key": "taken"})
    assert taken.status_code == 202
    a, b = TenantId(a_id), TenantId(b_id)
    intake = RunIntake(db, flushers=1)
    try:
        answers = await asyncio.gather(
            intake.create(a, _request(a_agent, "fine 1")),
            intake.create(a, _request(a_agent, "another body", key="taken")),
            intake.create(a, _request(b_agent, "not A's agent")),  # RLS: unknown to A
            intake.create(a, _request(a_agent, "no such version", version=9)),
            intake.create(b, _request(b_agent, "B's only slot")),
            intake.create(b, _request(b_agent, "past B's limit")),
            intake.create(a, _request(a_agent, "fine 2")),
            return_exceptions=True)
        assert intake.batches == 1
    finally:
        await intake.close()
    fine1, conflict, foreign, no_version, b_ok, b_over, fine2 = answers
    for ok in (fine1, fine2, b_ok):
        assert isinstance(ok, Created) and ok.created
    assert isinstance(conflict, Conflict)
    assert conflict.extra["run_id"] == taken.json()["run_id"]
    assert isinstance(foreign, NotFound) and isinstance(no_version, NotFound)
    assert isinstance(b_over, QuotaExceeded)
    assert b_over.extra == {"limit": "max_queued", "limit_value": 1, "current": 1}
    rows = await admin_conn.fetch(
        "SELECT r.tenant_id, r.input, e.data FROM runs r"
        " JOIN run_events e USING (tenant_id, run_id) ORDER BY r.created_at, r.input::text")
    assert sorted((r["tenant_id"], r["input"]) for r in rows) == sorted([
        (a_id, '"x"'), (a_id, '"fine 1"'), (a_id, '"fine 2"'), (b_id, '"B\'s only slot"')])
    # RunCreated as a run made one at a time has it (the version resolved in SQL).
    for r in rows:
        assert '"version": 1' in r["data"] and '"priority": "interactive"' in r["data"]
    assert await _load_matches_rows(admin_conn, a_id) == (3, 3)
    assert await _load_matches_rows(admin_conn, b_id) == (1, 1)
