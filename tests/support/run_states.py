"""Runs in each live state, reached through the engine's own functions (create, claim,
approval request, park) without a worker: what a worker's step would have written, minus
the model. For the retention tests: none of these may ever be a cleanup candidate.

Only the clocks are moved by hand (``age``, as the superuser): a run cannot be made old
any other way."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

from tenantry.activities.code import versions
from tenantry.activities.code.bundle import Bundle
from tenantry.activities.code.versions import ActivitySettings
from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.ids import RunId
from tenantry.jsonutil import digest
from tenantry.runs import lease as leases
from tenantry.runs import log
from tenantry.runs import service as runs
from tenantry.runs.activity_step import activity_request
from tenantry.runs.events import ActivityRequested, ApprovalRequested, RunParked, ToolCompleted
from tenantry.runs.lease import Lease
from tenantry.tools import approvals
from tests.support.retention import Seeded

RUNS_Q = load("tenantry.runs")
ACTIVITY_Q = load("tenantry.runs", "activity_calls.sql")


async def queued(db: Database, seeded: Seeded, *, parent: RunId | None = None,
                 kind: str = "agent") -> RunId:
    req = runs.RunRequest(agent_id=seeded.agent, version=None, input={"q": "x"},
                          webhook_url=None, priority="interactive", idempotency_key=None,
                          request_sha256=digest({"q": "x"}), parent=parent)
    return (await runs.create_run(db, seeded.tenant, req, kind=kind)).run_id


async def running(db: Database, seeded: Seeded) -> Lease:
    """A queued run claimed by a (pretend) worker: running, with a live lease."""
    run = await queued(db, seeded)
    [claimed] = await leases.claim(db, "retention-test-worker", 1, 600.0)
    assert claimed.run == run
    return claimed


async def waiting_on_approval(db: Database, seeded: Seeded) -> RunId:
    """What ``waiting.request_approval`` writes: a pending approval, ApprovalRequested,
    the run parked (waiting, lease released)."""
    held = await running(db, seeded)
    async with db.tenant_tx(seeded.tenant) as conn:
        approval, expires = await approvals.open_request(
            conn, seeded.tenant, held.run, f"{held.run}:2:0", "effect", {"note": "x"})
        await log.append(conn, seeded.tenant, held.run, ApprovalRequested(
            str(approval), f"{held.run}:2:0", "effect", {"note": "x"}, expires.isoformat()),
            epoch=held.epoch)
        await conn.execute(RUNS_Q.park_run, seeded.tenant.value, held.run.uuid, held.epoch)
    return held.run


async def parked_on_outage(db: Database, seeded: Seeded) -> RunId:
    """What ``waiting.park_until(models=...)`` writes when no account serves the model."""
    held = await running(db, seeded)
    until = datetime.now(UTC) + timedelta(hours=1)
    async with db.tenant_tx(seeded.tenant) as conn:
        await log.append(conn, seeded.tenant, held.run, RunParked(
            "provider outage", until.isoformat(), ["scripted"]), epoch=held.epoch)
        await conn.execute(RUNS_Q.park_for_model, seeded.tenant.value, held.run.uuid,
                           held.epoch, ["scripted"], until)
    return held.run


async def waiting_on_activity(db: Database, seeded: Seeded) -> tuple[RunId, RunId]:
    """What ``activity_step.request_activity`` writes: the task enqueued with the call's
    key, ActivityRequested, the calling run parked. Returns (run, task)."""
    held = await running(db, seeded)
    found = await versions.publish(
        db, seeded.tenant, "resize",
        Bundle({"main.py": b"def handle(value, context):\n    return value\n"}, "main.py:handle"),
        ActivitySettings())
    key = f"{held.run}:2:0"
    async with db.tenant_tx(seeded.tenant) as conn:
        request = activity_request(found, {"w": 1}, idempotency_key=key,
                                   priority="interactive", parent=held.run)
        task = (await runs.create_run_in(conn, db, seeded.tenant, request,
                                         kind="activity")).run_id
        seq = await log.append(conn, seeded.tenant, held.run, ActivityRequested(
            key, "activity:resize", str(task), found.name, found.version), epoch=held.epoch)
        await conn.execute(ACTIVITY_Q.park_for_activity, seeded.tenant.value, held.run.uuid,
                           held.epoch, seq)
    return held.run, task


async def open_approval(db: Database, seeded: Seeded, run: RunId) -> None:
    async with db.tenant_tx(seeded.tenant) as conn:
        await approvals.open_request(conn, seeded.tenant, run, f"{run}:2:0", "effect",
                                     {"note": "x"})


async def age(admin_conn: asyncpg.Connection, runs_: list[RunId], days: float = 40) -> None:
    """Move the runs' clocks ``days`` back (finished_at too, where there is one)."""
    await admin_conn.execute(
        """
        UPDATE runs SET created_at = created_at - make_interval(days => $2),
                        started_at = started_at - make_interval(days => $2),
                        updated_at = updated_at - make_interval(days => $2),
                        finished_at = finished_at - make_interval(days => $2)
        WHERE run_id = ANY($1)
        """, [r.uuid for r in runs_], int(days))


async def footprint(admin_conn: asyncpg.Connection, run: RunId) -> dict[str, object]:
    """Everything the database holds about ``run``, read as the superuser."""
    row = await admin_conn.fetchrow("SELECT * FROM runs WHERE run_id = $1", run.uuid)
    return {
        "run": None if row is None else dict(row),
        "events": [dict(r) for r in await admin_conn.fetch(
            "SELECT seq, type, data FROM run_events WHERE run_id = $1 ORDER BY seq",
            run.uuid)],
        "payloads": await admin_conn.fetchval(
            "SELECT count(*) FROM run_event_payloads WHERE run_id = $1", run.uuid),
        "approvals": [dict(r) for r in await admin_conn.fetch(
            "SELECT * FROM approvals WHERE run_id = $1 ORDER BY approval_id", run.uuid)],
        "reservations": await admin_conn.fetchval(
            "SELECT count(*) FROM budget_reservations WHERE run_id = $1", run.uuid),
        "tombstones": await admin_conn.fetchval(
            "SELECT count(*) FROM tombstones WHERE run_id = $1", run.uuid),
        "blob_deletions": await admin_conn.fetchval(
            "SELECT count(*) FROM blob_deletions WHERE run_id = $1", run.uuid),
    }


async def with_dependents(admin_conn: asyncpg.Connection, seeded: Seeded,
                          runs_: list[RunId]) -> None:
    """Give ended runs what a real run leaves beside its events: a payload row (an event
    over 8 KiB), a decided approval and a settled budget reservation."""
    ids = [r.uuid for r in runs_]
    await admin_conn.execute(
        "INSERT INTO run_event_payloads (tenant_id, run_id, seq, data) "
        "SELECT $1, id, 2, '{\"big\": true}'::jsonb FROM unnest($2::uuid[]) AS id",
        seeded.tenant.value, ids)
    await admin_conn.execute(
        "INSERT INTO approvals (tenant_id, approval_id, run_id, key, tool, arguments, "
        "arguments_sha256, status, requested_at, expires_at, decided_at) "
        "SELECT $1, gen_random_uuid(), id, id::text || ':2:0', 'effect', '{}'::jsonb, "
        "'\\x00'::bytea, 'approved', now(), now() + interval '1 day', now() "
        "FROM unnest($2::uuid[]) AS id", seeded.tenant.value, ids)
    await admin_conn.execute(
        "INSERT INTO budget_reservations (tenant_id, reservation_id, run_id, lease_epoch, "
        "tokens, cost_micros, status, closed_at) "
        "SELECT $1, gen_random_uuid(), id, 1, 100, 1500, 'settled', now() "
        "FROM unnest($2::uuid[]) AS id", seeded.tenant.value, ids)


async def with_tool_output_blob(db: Database, seeded: Seeded, held: Lease, ref: str) -> None:
    """A live run's tool call whose output went to the blob store (what tool_step writes
    for an output over the cap)."""
    async with db.tenant_tx(seeded.tenant) as conn:
        await log.append(conn, seeded.tenant, held.run, ToolCompleted(
            f"{held.run}:2:0", "echo", 2, 0, {}, result="x" * 100, truncated=True,
            output_bytes=20000, output_ref=ref), epoch=held.epoch)
