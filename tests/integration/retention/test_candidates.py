"""Candidates: only terminal runs and tasks past retention. Every live state — whatever its
age — and every terminal run something still depends on is left exactly as it was, with
no tombstone. Each state is reached through the engine's own functions
(tests/support/run_states.py); only the clocks are moved back by hand."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from tenantry.db import Database
from tenantry.ids import RunId
from tenantry.retention.cleaner import Cleaner
from tests.support import run_states as states
from tests.support.retention import Seeded, ended_runs, tenant_and_agent

Make = Callable[[Database, asyncpg.Connection, Seeded], Awaitable[list[RunId]]]


async def _queued(db: Database, admin: asyncpg.Connection, s: Seeded) -> list[RunId]:
    return [await states.queued(db, s)]


async def _running(db: Database, admin: asyncpg.Connection, s: Seeded) -> list[RunId]:
    return [(await states.running(db, s)).run]


async def _waiting_on_approval(db: Database, admin: asyncpg.Connection,
                               s: Seeded) -> list[RunId]:
    return [await states.waiting_on_approval(db, s)]


async def _parked(db: Database, admin: asyncpg.Connection, s: Seeded) -> list[RunId]:
    return [await states.parked_on_outage(db, s)]


async def _waiting_on_activity(db: Database, admin: asyncpg.Connection,
                               s: Seeded) -> list[RunId]:
    return list(await states.waiting_on_activity(db, s))


async def _parent_of_a_live_child(db: Database, admin: asyncpg.Connection,
                                  s: Seeded) -> list[RunId]:
    # A parent that ended (cancelled) while its task was still queued: seeded ended, as
    # the cancel by a worker would have left it; the child is created by the service.
    [parent] = await ended_runs(admin, s, 1, status="cancelled")
    return [parent, await states.queued(db, s, parent=parent, kind="activity")]


async def _ended_with_pending_approval(db: Database, admin: asyncpg.Connection,
                                       s: Seeded) -> list[RunId]:
    [run] = await ended_runs(admin, s, 1, status="failed")
    await states.open_approval(db, s, run)
    return [run]


async def _ended_with_undelivered_webhook(db: Database, admin: asyncpg.Connection,
                                          s: Seeded) -> list[RunId]:
    [run] = await ended_runs(admin, s, 1)
    # Direct SQL: the webhook outbox state is set by a worker ending the run.
    await admin.execute("UPDATE runs SET webhook_url = 'http://127.0.0.1:9/hook', "
                        "webhook_state = 'pending', webhook_next_at = now() "
                        "WHERE run_id = $1", run.uuid)
    return [run]


#: Each state, and the statuses its runs are in (checked: the state is what it says).
LIVE: dict[str, tuple[Make, list[str]]] = {
    "queued": (_queued, ["queued"]),
    "running_with_a_live_lease": (_running, ["running"]),
    "waiting_on_an_approval": (_waiting_on_approval, ["waiting"]),
    "parked_on_a_provider_outage": (_parked, ["waiting"]),
    "waiting_on_an_activity_task": (_waiting_on_activity, ["waiting", "queued"]),
    "parent_whose_child_is_not_terminal": (_parent_of_a_live_child, ["cancelled", "queued"]),
    "terminal_with_a_pending_approval": (_ended_with_pending_approval, ["failed"]),
    "terminal_with_an_undelivered_webhook": (_ended_with_undelivered_webhook, ["finished"]),
}


@pytest.mark.parametrize("state", list(LIVE))
async def test_a_run_in_a_live_state_is_never_a_candidate_whatever_its_age(
    state: str, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    seeded = await tenant_and_agent(db, "acme")
    make, statuses = LIVE[state]
    kept = await make(db, admin_conn, seeded)
    await states.age(admin_conn, kept, days=400)  # far past the 30 days of the default
    [control] = await ended_runs(admin_conn, seeded, 1)  # proves the pass deletes at all
    before = {run: await states.footprint(admin_conn, run) for run in kept}
    assert [f["run"]["status"] for f in before.values()] == statuses  # type: ignore[index]
    assert all(f["events"] for f in before.values())
    if state == "running_with_a_live_lease":
        assert await admin_conn.fetchval(
            "SELECT lease_expires_at > now() FROM runs WHERE run_id = $1", kept[0].uuid)
    if state == "parked_on_a_provider_outage":
        assert await admin_conn.fetchval(
            "SELECT parked_on FROM runs WHERE run_id = $1", kept[0].uuid) == ["scripted"]

    [result] = await Cleaner(db, None).run_once([seeded.tenant])

    assert result.runs == 1 and not result.lease_lost
    assert (await states.footprint(admin_conn, control))["tombstones"] == 1
    for run in kept:
        after = await states.footprint(admin_conn, run)
        assert after == before[run], state
        assert after["tombstones"] == 0


@pytest.mark.parametrize("status", ["finished", "failed", "cancelled", "dead_lettered"])
async def test_each_terminal_status_past_retention_is_deleted(
    status: str, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    seeded = await tenant_and_agent(db, "acme")
    [old] = await ended_runs(admin_conn, seeded, 1, status=status, ended_days_ago=31)
    [young] = await ended_runs(admin_conn, seeded, 1, status=status, ended_days_ago=29)

    [result] = await Cleaner(db, None).run_once([seeded.tenant])

    assert (result.runs, result.events) == (1, 10)
    gone = await states.footprint(admin_conn, old)
    assert (gone["run"], gone["events"], gone["tombstones"]) == (None, [], 1)
    assert await admin_conn.fetchval(
        "SELECT status FROM tombstones WHERE run_id = $1", old.uuid) == status
    left = await states.footprint(admin_conn, young)
    assert left["run"] is not None and len(left["events"]) == 10 and left["tombstones"] == 0
