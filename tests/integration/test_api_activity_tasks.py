"""The read and cancel edge of activity tasks over real HTTP (ADR 0013): lists of
activities and tasks page like every list and filter by status, dead letter and activity;
the attempt log shows each attempt a real bubblewrap dispatcher made; a task no dispatcher
holds (queued, waiting for its backoff, dead-lettered) is cancelled at once with the event
in its log, and no dispatcher runs it afterwards; an ended task answers 409, another
tenant's 404; the operator sets max_activity_slots in the tenant policy."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tenantry.db import Database
from tenantry.sandbox.pool import PooledDriver
from tests.support.activities import dispatching, version_body
from tests.support.api import Api
from tests.support.sandbox import pooled_driver
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(300)

ECHO = """
    def handle(value, context):
        return value
"""
#: Exit 75 is listed as retryable below: the attempt fails fast and asks for a retry.
RETRY_ME = """
    import sys
    def handle(value, context):
        print("trying", value)
        sys.exit(75)
"""
SEGFAULT = """
    import ctypes
    def handle(value, context):
        ctypes.string_at(0)
"""


@pytest.fixture
async def bwrap(tmp_path: Path) -> AsyncIterator[PooledDriver]:
    async with pooled_driver(tmp_path / "sandbox") as driver:
        yield driver


async def _publish(api: Api, h: dict[str, str], name: str, source: str = ECHO,
                   **over: Any) -> None:
    r = await api.client.post("/v1/activities", headers=h,
                              json={"name": name, **version_body(source, **over)})
    assert r.status_code == 201, r.text


async def _enqueue(api: Api, h: dict[str, str], activity: str, value: Any = None) -> str:
    r = await api.client.post("/v1/activity-tasks", headers=h,
                              json={"activity": activity, "input": value})
    assert r.status_code == 202, r.text
    return str(r.json()["task_id"])


async def _task(api: Api, h: dict[str, str], task: str) -> dict[str, Any]:
    r = await api.client.get(f"/v1/activity-tasks/{task}", headers=h)
    assert r.status_code == 200, r.text
    found: dict[str, Any] = r.json()
    return found


async def _event_types(api: Api, h: dict[str, str], task: str) -> list[str]:
    # A task is a run of kind 'activity': its log is served as every run's is.
    r = await api.client.get(f"/v1/runs/{task}/events", headers={
        **h, "Accept": "application/json"})
    assert r.status_code == 200, r.text
    return [e["type"] for e in r.json()["events"]]


async def test_activities_are_listed_by_name_with_their_latest_version_page_by_page(
    api: Api,
) -> None:
    _, h = await api.tenant()
    for name in ("gamma", "alpha", "beta"):
        await _publish(api, h, name)
    r = await api.client.post("/v1/activities/beta/versions", headers=h,
                              json=version_body(ECHO))
    assert r.status_code == 201, r.text
    _, other = await api.tenant("Other")
    await _publish(api, other, "zeta")

    first = (await api.client.get("/v1/activities?limit=2", headers=h)).json()
    assert [(a["name"], a["latest_version"]) for a in first["data"]] == [
        ("alpha", 1), ("beta", 2)]
    assert first["next_cursor"] == "beta"
    rest = (await api.client.get(f"/v1/activities?limit=2&cursor={first['next_cursor']}",
                                 headers=h)).json()
    assert [a["name"] for a in rest["data"]] == ["gamma"] and rest["next_cursor"] is None
    beta = first["data"][1]
    assert beta["updated_at"] > beta["created_at"]
    bad = await api.client.get("/v1/activities?cursor=no/slash", headers=h)
    assert bad.status_code == 400 and bad.json()["type"] == "validation_error"


async def test_tasks_are_listed_newest_first_and_filtered(
    api: Api, db: Database, bwrap: PooledDriver,
) -> None:
    _, h = await api.tenant()
    await _publish(api, h, "echo")
    await _publish(api, h, "poison", SEGFAULT, max_sandbox_deaths=1)
    echoes = [await _enqueue(api, h, "echo", {"n": i}) for i in range(3)]
    poison = await _enqueue(api, h, "poison")
    _, other = await api.tenant("Other")
    await _publish(api, other, "echo")
    theirs = await _enqueue(api, other, "echo")
    cancelled = await api.client.post(f"/v1/activity-tasks/{theirs}/cancel", headers=other)
    assert cancelled.status_code == 200, cancelled.text

    async with dispatching(db, bwrap, slots=2):
        async def settled() -> bool:
            shown = [await _task(api, h, t) for t in [*echoes, poison]]
            return all(t["status"] == "finished" or t["dead_lettered"] for t in shown)
        await until(settled, "the echoes finish and the poison is dead-lettered", 240.0)

    listed = (await api.client.get("/v1/activity-tasks", headers=h)).json()
    assert [t["task_id"] for t in listed["data"]] == [poison, *reversed(echoes)]
    page = (await api.client.get("/v1/activity-tasks?limit=2", headers=h)).json()
    assert [t["task_id"] for t in page["data"]] == [poison, echoes[2]]
    after = (await api.client.get(f"/v1/activity-tasks?limit=2&cursor={page['next_cursor']}",
                                  headers=h)).json()
    assert [t["task_id"] for t in after["data"]] == [echoes[1], echoes[0]]

    async def ids(query: str) -> list[str]:
        r = await api.client.get(f"/v1/activity-tasks?{query}", headers=h)
        assert r.status_code == 200, r.text
        return [t["task_id"] for t in r.json()["data"]]

    assert await ids("dead_lettered=true") == [poison]
    assert await ids("dead_lettered=false") == list(reversed(echoes))
    assert await ids("status=finished") == list(reversed(echoes))
    assert await ids("status=waiting&dead_lettered=true") == [poison]
    assert await ids("activity=poison") == [poison]
    assert await ids("activity=missing") == []
    assert await ids("status=cancelled") == []  # the other tenant's cancel is theirs
    dead = (await api.client.get("/v1/activity-tasks?dead_lettered=true", headers=h)).json()
    assert dead["data"][0]["attempts"] == 1 and "SIGSEGV" in dead["data"][0]["last_error"]
    for query in ("status=nope", "dead_lettered=maybe", "activity=a/b",
                  "cursor=run_nothex", "limit=0"):
        r = await api.client.get(f"/v1/activity-tasks?{query}", headers=h)
        assert r.status_code == 400 and r.json()["type"] == "validation_error", query


async def test_the_attempt_log_shows_every_attempt_with_its_outcome_and_output(
    api: Api, db: Database, bwrap: PooledDriver,
) -> None:
    _, h = await api.tenant()
    await _publish(api, h, "flaky", RETRY_ME, retryable_exit_codes=[75],
                   retry={"max_attempts": 3, "backoff_seconds": 0})
    task = await _enqueue(api, h, "flaky", "x")
    async with dispatching(db, bwrap):
        async def failed() -> bool:
            return (await _task(api, h, task))["status"] == "failed"
        await until(failed, "the task fails after its attempts", 240.0)

    r = await api.client.get(f"/v1/activity-tasks/{task}/attempts", headers=h)
    assert r.status_code == 200, r.text
    log = r.json()
    assert [a["attempt"] for a in log["data"]] == [1, 2, 3]
    for a in log["data"]:
        assert a["status"] == "retryable" and a["exit_code"] == 75, a
        assert a["killed_sandbox"] is False and a["stdout"].strip() == "trying x"
        assert a["duration_ms"] > 0 and a["at"]
    assert log["next_cursor"] is None
    first = (await api.client.get(f"/v1/activity-tasks/{task}/attempts?limit=2",
                                  headers=h)).json()
    assert [a["attempt"] for a in first["data"]] == [1, 2]
    rest = (await api.client.get(
        f"/v1/activity-tasks/{task}/attempts?limit=2&cursor={first['next_cursor']}",
        headers=h)).json()
    assert [a["attempt"] for a in rest["data"]] == [3]
    bad = await api.client.get(f"/v1/activity-tasks/{task}/attempts?cursor=-1", headers=h)
    assert bad.status_code == 400
    _, other = await api.tenant("Other")
    for probe in (task, "run_" + "0" * 32, "nonsense"):
        missing = await api.client.get(f"/v1/activity-tasks/{probe}/attempts", headers=other)
        assert missing.status_code == 404 and missing.json()["type"] == "not_found"


async def test_a_queued_task_is_cancelled_at_once_and_never_dispatched(
    api: Api, db: Database, bwrap: PooledDriver,
) -> None:
    _, h = await api.tenant()
    await _publish(api, h, "echo")
    doomed = await _enqueue(api, h, "echo", {"n": 1})
    r = await api.client.post(f"/v1/activity-tasks/{doomed}/cancel", headers=h)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "cancelled" and r.json()["finished_at"] is not None
    assert await _event_types(api, h, doomed) == [
        "RunCreated", "CancelRequested", "RunCancelled"]
    again = await api.client.post(f"/v1/activity-tasks/{doomed}/cancel", headers=h)
    assert again.status_code == 409 and again.json()["task_status"] == "cancelled"

    kept = await _enqueue(api, h, "echo", {"n": 2})
    async with dispatching(db, bwrap):
        async def finished() -> bool:
            return (await _task(api, h, kept))["status"] == "finished"
        await until(finished, "the next task finishes", 240.0)
    assert (await _task(api, h, doomed))["attempts"] == 0
    ended = await api.client.post(f"/v1/activity-tasks/{kept}/cancel", headers=h)
    assert ended.status_code == 409 and ended.json()["task_status"] == "finished"


async def test_a_task_waiting_for_its_backoff_or_dead_lettered_is_cancelled_at_once(
    api: Api, db: Database, bwrap: PooledDriver,
) -> None:
    _, h = await api.tenant()
    await _publish(api, h, "flaky", RETRY_ME, retryable_exit_codes=[75],
                   retry={"max_attempts": 5, "backoff_seconds": 3600})
    await _publish(api, h, "poison", SEGFAULT, max_sandbox_deaths=1)
    backing_off = await _enqueue(api, h, "flaky")
    dead = await _enqueue(api, h, "poison")
    async with dispatching(db, bwrap, slots=2):
        async def parked() -> bool:
            one, two = await _task(api, h, backing_off), await _task(api, h, dead)
            return one["attempts"] == 1 and one["status"] == "queued" and two["dead_lettered"]
        await until(parked, "a retry waits for its backoff and a dead letter", 240.0)
        for task in (backing_off, dead):
            r = await api.client.post(f"/v1/activity-tasks/{task}/cancel", headers=h)
            assert r.status_code == 200, r.text
            assert r.json()["status"] == "cancelled" and r.json()["dead_lettered"] is False
            assert (await _event_types(api, h, task))[-2:] == ["CancelRequested",
                                                               "RunCancelled"]
    requeue = await api.client.post(f"/v1/activity-tasks/{dead}/requeue", headers=h)
    assert requeue.status_code == 409


async def test_another_tenants_task_cannot_be_cancelled_and_answers_404(api: Api) -> None:
    _, h = await api.tenant()
    await _publish(api, h, "echo")
    task = await _enqueue(api, h, "echo")
    _, other = await api.tenant("Other")
    for probe in (task, "run_" + "f" * 32, "not-an-id", "run_%00"):
        r = await api.client.post(f"/v1/activity-tasks/{probe}/cancel", headers=other)
        assert r.status_code == 404 and r.json()["type"] == "not_found", probe
    assert (await _task(api, h, task))["status"] == "queued"
    # An agent run is not an activity task, even of the same tenant.
    agent = await api.agent(h)
    run = (await api.client.post("/v1/runs", headers=h,
                                 json={"agent_id": agent, "input": "x"})).json()
    r = await api.client.post(f"/v1/activity-tasks/{run['run_id']}/cancel", headers=h)
    assert r.status_code == 404


async def test_the_operator_sets_max_activity_slots_in_the_tenant_policy(api: Api) -> None:
    tenant, _ = await api.tenant()
    url = f"/admin/v1/tenants/{tenant}/policy"
    shown = (await api.client.get(url, headers=api.operator)).json()
    assert shown["max_activity_slots"] == 2
    r = await api.client.put(url, headers=api.operator,
                             json={"weight": 3, "max_activity_slots": 200})
    assert r.status_code == 200, r.text
    assert r.json()["max_activity_slots"] == 200 and r.json()["weight"] == 3
    assert (await api.client.get(url, headers=api.operator)).json()["max_activity_slots"] == 200
    for bad in (0, 100_001, 2**70, "2", None, 1.5):
        r = await api.client.put(url, headers=api.operator, json={"max_activity_slots": bad})
        assert r.status_code == 400 and r.json()["type"] == "validation_error", bad
    assert (await api.client.get(url, headers=api.operator)).json()["max_activity_slots"] == 200
    # The whole policy is replaced: a field left out takes its default again.
    r = await api.client.put(url, headers=api.operator, json={"weight": 1})
    assert r.json()["max_activity_slots"] == 2


async def test_a_cancel_recorded_while_a_dead_dispatcher_held_the_task_starts_no_attempt(
    api: Api, db: Database, bwrap: PooledDriver,
) -> None:
    _, h = await api.tenant()
    await _publish(api, h, "echo")
    task = await _enqueue(api, h, "echo", {"n": 1})
    async with db.unscoped() as conn:  # a dispatcher that claims it and dies at once
        claimed = await conn.fetch(
            "SELECT run_id FROM tenantry_claim_activities('gone-dispatcher', 1, 0.5)")
    assert len(claimed) == 1
    r = await api.client.post(f"/v1/activity-tasks/{task}/cancel", headers=h)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "running" and r.json()["cancel_requested"] is True
    twice = await api.client.post(f"/v1/activity-tasks/{task}/cancel", headers=h)
    assert twice.status_code == 200 and twice.json()["status"] == "running"

    async with dispatching(db, bwrap) as dispatcher:  # takes the expired lease over
        async def ended() -> bool:
            return (await _task(api, h, task))["status"] == "cancelled"
        await until(ended, "the task ends cancelled", 240.0)
    assert dispatcher.outcomes["cancelled"] == 1
    shown = await _task(api, h, task)
    assert shown["attempts"] == 0 and shown["result"] is None
    assert await _event_types(api, h, task) == ["RunCreated", "CancelRequested",
                                                "RunCancelled"]


async def test_hostile_query_values_on_the_new_routes_are_400_or_404_never_5xx(
    api: Api,
) -> None:
    _, h = await api.tenant()
    await _publish(api, h, "echo")
    task = await _enqueue(api, h, "echo")
    huge = "9" * 40
    everywhere = ("cursor=%00", f"limit={huge}", "limit=%00", "limit=-1", "cursor=",
                  "cursor=" + "a" * 257)
    lists = {  # cursors that could not have come from that list (a name, an id, a seq)
        "/v1/activities": ("cursor=a%2Fb", "cursor=-x", "cursor=" + "a" * 129),
        "/v1/activity-tasks": (f"cursor={huge}", "cursor=run_" + "g" * 32, "cursor=echo"),
        f"/v1/activity-tasks/{task}/attempts": (f"cursor={huge}", "cursor=-1", "cursor=1.5",
                                                 "cursor=12345678901"),
    }
    for url, own in lists.items():
        for query in (*everywhere, *own):
            r = await api.client.get(f"{url}?{query}", headers=h)
            assert r.status_code == 400, (url, query, r.text)
            assert r.headers["content-type"].startswith("application/problem+json")
    for query in ("activity=%00", f"status={huge}", "dead_lettered=%00",
                  "activity=" + "a" * 129):
        r = await api.client.get(f"/v1/activity-tasks?{query}", headers=h)
        assert r.status_code == 400, (query, r.text)
    for path in (f"run_{huge}", "%00", "run_" + "0" * 31 + "%00", huge):
        for method, suffix in (("GET", "/attempts"), ("POST", "/cancel")):
            r = await api.client.request(method, f"/v1/activity-tasks/{path}{suffix}",
                                         headers=h)
            assert r.status_code == 404, (method, path, r.text)
    assert (await _task(api, h, task))["status"] == "queued"
