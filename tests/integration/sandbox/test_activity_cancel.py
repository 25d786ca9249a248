"""Cancelling a running activity task on every sandbox backend (ADR 0013): the attempt in
flight is not killed — it runs to its end — and then no further attempt starts. An
attempt that would have been retried ends the task ``cancelled``; one that completes wins,
and the task finishes with its result."""

from __future__ import annotations

from typing import Any

import pytest

from tenantry.db import Database
from tenantry.sandbox.pool import PooledDriver
from tests.support.activities import dispatching, version_body
from tests.support.api import Api
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(600)

#: Sleeps long enough for the test to see the task running and cancel it, then ends the
#: way its input says: 75 (listed as retryable) or a result.
SLOW = """
    import sys, time
    def handle(value, context):
        time.sleep(value["sleep"])
        print("slept", value["sleep"])
        if value["exit"]:
            sys.exit(value["exit"])
        return {"done": True}
"""
SLEEP_S = 5


async def _run_and_cancel(api: Api, db: Database, driver: PooledDriver,
                          exit_code: int) -> tuple[dict[str, str], str, dict[str, Any]]:
    _, h = await api.tenant()
    r = await api.client.post("/v1/activities", headers=h, json={
        "name": "slow", **version_body(SLOW, retryable_exit_codes=[75],
                                       retry={"max_attempts": 5, "backoff_seconds": 0})})
    assert r.status_code == 201, r.text
    r = await api.client.post("/v1/activity-tasks", headers=h, json={
        "activity": "slow", "input": {"sleep": SLEEP_S, "exit": exit_code}})
    task = r.json()["task_id"]
    url = f"/v1/activity-tasks/{task}"
    async with dispatching(db, driver):
        async def running() -> bool:
            # Its code runs once its sandbox is bound (ActivityStarted); "running" alone is
            # the claim, and the sandbox may still be being made then.
            events = (await api.client.get(f"/v1/runs/{task}/events", headers={
                **h, "Accept": "application/json"})).json()["events"]
            return any(e["type"] == "ActivityStarted" for e in events)
        await until(running, "the dispatcher starts the attempt", 240.0)
        cancel = await api.client.post(f"{url}/cancel", headers=h)
        assert cancel.status_code == 200, cancel.text
        assert cancel.json()["status"] == "running" and cancel.json()["cancel_requested"]

        async def ended() -> bool:
            status = (await api.client.get(url, headers=h)).json()["status"]
            return status in ("finished", "failed", "cancelled")
        await until(ended, "the task ends", 240.0)
    return h, task, (await api.client.get(url, headers=h)).json()


async def test_a_running_attempt_is_not_killed_and_no_retry_follows_the_cancel(
    api: Api, db: Database, driver: PooledDriver,
) -> None:
    h, task, shown = await _run_and_cancel(api, db, driver, exit_code=75)
    assert shown["status"] == "cancelled" and shown["attempts"] == 1, shown
    attempts = (await api.client.get(f"/v1/activity-tasks/{task}/attempts",
                                     headers=h)).json()["data"]
    # It ran to its end (slept, printed, exited 75): the cancel did not cut it short.
    assert len(attempts) == 1 and attempts[0]["exit_code"] == 75, attempts
    assert attempts[0]["stdout"].strip() == f"slept {SLEEP_S}"
    assert attempts[0]["killed_sandbox"] is False
    events = (await api.client.get(f"/v1/runs/{task}/events", headers={
        **h, "Accept": "application/json"})).json()["events"]
    assert [e["type"] for e in events][-4:] == ["ActivityStarted", "CancelRequested",
                                                "ActivityAttempted", "RunCancelled"]


async def test_an_attempt_that_completes_after_the_cancel_keeps_its_result(
    api: Api, db: Database, driver: PooledDriver,
) -> None:
    _, _, shown = await _run_and_cancel(api, db, driver, exit_code=0)
    assert shown["status"] == "finished" and shown["result"] == {"done": True}, shown
    assert shown["attempts"] == 1 and shown["cancel_requested"] is True
