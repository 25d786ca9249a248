"""Tombstones, the event log and the audit log cannot be changed by the application: its
role holds no UPDATE or DELETE on them, and their triggers refuse the owner too, except
the deletes of a retention batch (inside its own SECURITY DEFINER function)."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from tenantry.db import Database
from tenantry.retention.cleaner import Cleaner
from tests.support.retention import Seeded, ended_runs, tenant_and_agent


async def _a_tombstone_a_live_log_and_audit(
    db: Database, admin_conn: asyncpg.Connection,
) -> tuple[Seeded, uuid.UUID, uuid.UUID]:
    seeded = await tenant_and_agent(db, "acme")
    [gone] = await ended_runs(admin_conn, seeded, 1)
    [live] = await ended_runs(admin_conn, seeded, 1, ended_days_ago=1)
    await admin_conn.execute(
        "INSERT INTO audit_log (tenant_id, audit_id, run_id, tool, key, outcome, duration_ms) "
        "VALUES ($1, gen_random_uuid(), $2, 'echo', 'k', 'ok', 1)",
        seeded.tenant.value, live.uuid)
    [result] = await Cleaner(db, None).run_once([seeded.tenant])
    assert result.runs == 1
    return seeded, gone.uuid, live.uuid


#: (statement, whose run id it names: the deleted run's tombstone or the live run's rows)
APP_REFUSED = [
    ("UPDATE tombstones SET status = 'failed' WHERE run_id = $1::uuid", "gone"),
    ("DELETE FROM tombstones WHERE run_id = $1::uuid", "gone"),
    ("DELETE FROM run_events WHERE run_id = $1::uuid", "live"),
    ("DELETE FROM audit_log WHERE run_id = $1::uuid", "live"),
    ("UPDATE run_events SET data = '{}' WHERE run_id = $1::uuid", "live"),
    ("UPDATE audit_log SET outcome = 'error' WHERE run_id = $1::uuid", "live"),
]


@pytest.mark.parametrize(("statement", "target"), APP_REFUSED)
async def test_the_app_role_may_not_change_tombstones_events_or_audit(
    statement: str, target: str, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    seeded, gone, live = await _a_tombstone_a_live_log_and_audit(db, admin_conn)
    before = await _everything(admin_conn)
    async with db.tenant_tx(seeded.tenant) as conn:
        # Even saying a retention batch is under way (the trigger's exemption) gives no
        # privilege the role does not hold.
        await conn.execute("SELECT set_config('tenantry.retention', 'on', true)")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute(statement, gone if target == "gone" else live)
    assert await _everything(admin_conn) == before


OWNER_REFUSED = [
    ("UPDATE tombstones SET status = 'failed' WHERE run_id = $1::uuid", "gone"),
    ("DELETE FROM tombstones WHERE run_id = $1::uuid", "gone"),
    ("DELETE FROM run_events WHERE run_id = $1::uuid", "live"),
    ("UPDATE run_events SET data = '{}' WHERE run_id = $1::uuid", "live"),
    ("DELETE FROM audit_log WHERE run_id = $1::uuid", "live"),
]


@pytest.mark.parametrize(("statement", "target"), OWNER_REFUSED)
async def test_the_triggers_refuse_even_the_superuser_outside_a_retention_batch(
    statement: str, target: str, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    _, gone, live = await _a_tombstone_a_live_log_and_audit(db, admin_conn)
    before = await _everything(admin_conn)
    with pytest.raises(asyncpg.RestrictViolationError, match="immutable"):
        await admin_conn.execute(statement, gone if target == "gone" else live)
    assert await _everything(admin_conn) == before


async def _everything(admin_conn: asyncpg.Connection) -> tuple[object, ...]:
    return tuple([
        [dict(r) for r in await admin_conn.fetch("SELECT * FROM tombstones ORDER BY run_id")],
        [dict(r) for r in await admin_conn.fetch(
            "SELECT * FROM run_events ORDER BY run_id, seq")],
        [dict(r) for r in await admin_conn.fetch("SELECT * FROM audit_log ORDER BY audit_id")],
    ])


@pytest.mark.parametrize("call", [
    # One run on request (nothing to delete here), and an expiry under a lease.
    "SELECT * FROM tenantry_retention_batch($1, 'x', NULL, now(), 1, 'request', "
    "gen_random_uuid())",
    "SELECT * FROM tenantry_retention_expire($1, 'x', tenantry_take_cleanup_lease($1, 'x', 30), "
    "now(), NULL, 10)",
])
async def test_the_retention_exemption_ends_with_the_retention_function(
    call: str, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    seeded, _, live = await _a_tombstone_a_live_log_and_audit(db, admin_conn)
    before = await _everything(admin_conn)
    async with admin_conn.transaction():
        await admin_conn.fetch(call, seeded.tenant.value)
        # Later in the same transaction is outside the batch: refused again.
        with pytest.raises(asyncpg.RestrictViolationError, match="immutable"):
            await admin_conn.execute("DELETE FROM run_events WHERE run_id = $1", live)
    assert await _everything(admin_conn) == before
