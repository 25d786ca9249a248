"""Refused egress of activity attempts on real sandboxes and a real
Postgres: an activity whose code keeps trying the cloud metadata address, an internal
address and a host off its allow-list, over several attempts, finds each attempt's refusals
on that attempt (the API: the first 20 with host, port and reason code, a count of the
rest, counts by reason; the task's total; the task's trace), counted in the dispatcher's
metric by tenant class, its version flagged for review once the count reaches the
operator's threshold (the activity API and the console), and the proxy holding nothing for
it once its attempts end — whether the attempt failed, completed, timed out, lost its lease
or was cut short by a stop."""

from __future__ import annotations

import json
import re
from typing import Any

import asyncpg
import pytest

from tenantry.activities.tasks.metrics import watch_dispatcher
from tenantry.api.console import epoch, session
from tenantry.db import Database
from tenantry.ids import RunId
from tenantry.sandbox.pool import PooledDriver
from tenantry.telemetry.registry import Registry
from tests.support.activities import dispatching, publish_activity
from tests.support.activity_rig import WITHIN, steal_lease
from tests.support.api import OPERATOR_TOKEN, Api
from tests.support.sandbox import ASK_THROUGH_RELAY
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(600)

ROUNDS = 8  # of the three targets, per attempt
TARGETS = ["169.254.169.254:80", "10.1.2.3:443", "evil.example:443"]
PER_ATTEMPT = ROUNDS * len(TARGETS)  # 24: more than an attempt lists one by one (20)
EXPECTED = [("169.254.169.254", 80, "metadata_address"), ("10.1.2.3", 443, "internal_address"),
            ("evil.example", 443, "not_allowed")] * ROUNDS
BY_REASON = {"metadata_address": ROUNDS, "internal_address": ROUNDS, "not_allowed": ROUNDS}
THRESHOLD = 60  # two failed attempts (48) stay under it; a third attempt (72) crosses it

#: Asks for every target in turn through the sandbox's relay, then does as its input says:
#: fail (exit 75, listed as retryable), hang (until the host ends the attempt), or return
#: the status lines it was answered.
PROBE = ASK_THROUGH_RELAY + f'''
import sys, time

def handle(value, context):
    said = [ask(t) for t in {TARGETS * ROUNDS!r}]
    if value.get("mode") == "fail":
        print(json.dumps(said[:3]))
        sys.exit(75)
    if value.get("mode") == "hang":
        while True:
            time.sleep(1)
    return said
'''


def refused_metric(scraped: str, reason: str) -> float:
    found = re.search(rf'^tenantry_activity_egress_refused_total\{{[^}}]*reason="{reason}"'
                      r'[^}]*\} (\S+)$', scraped, re.MULTILINE)
    return float(found[1]) if found else 0.0


async def _get(api: Api, h: dict[str, str], path: str) -> Any:
    r = await api.client.get(path, headers=h)
    assert r.status_code == 200, r.text
    return r.json()


async def _enqueue(api: Api, h: dict[str, str], activity: str, value: Any) -> str:
    r = await api.client.post("/v1/activity-tasks", headers=h,
                              json={"activity": activity, "input": value})
    assert r.status_code == 202, r.text
    return str(r.json()["task_id"])


async def _settled(api: Api, h: dict[str, str], task: str) -> dict[str, Any]:
    async def ended() -> bool:
        found = await _get(api, h, f"/v1/activity-tasks/{task}")
        return found["status"] in ("finished", "failed", "cancelled") \
            or bool(found["dead_lettered"])
    await until(ended, f"task {task} settles", WITHIN)
    found: dict[str, Any] = await _get(api, h, f"/v1/activity-tasks/{task}")
    return found


def _refusals(attempt: dict[str, Any]) -> list[tuple[str, int, str]]:
    return [(r["host"], r["port"], r["reason_code"]) for r in attempt["egress_refused"]]


@pytest.mark.parametrize("driver", ["bwrap", "gvisor", "microvm"], indirect=True)
async def test_refused_egress_of_attempts_is_recorded_counted_flagged_and_freed(
    api: Api, db: Database, driver: PooledDriver,
) -> None:
    tenant, h = await api.tenant("Prober")
    await publish_activity(api, h, "probe", PROBE, egress=["api.example.com"],
                           retry={"max_attempts": 2, "backoff_seconds": 0},
                           retryable_exit_codes=[75])
    registry = Registry()
    async with dispatching(db, driver, egress_flag_threshold=THRESHOLD) as dispatcher:
        unwatch = watch_dispatcher(registry, lambda: dispatcher.outcomes,
                                   lambda: dispatcher.egress_refused)
        # A tenant error, retried once: two attempts, each with its own refusals.
        failing = await _enqueue(api, h, "probe", {"mode": "fail"})
        task = await _settled(api, h, failing)
        assert task["status"] == "failed" and task["attempts"] == 2, task
        assert task["egress_refused"] == 2 * PER_ATTEMPT
        attempts = (await _get(api, h, f"/v1/activity-tasks/{failing}/attempts"))["data"]
        assert [a["status"] for a in attempts] == ["retryable", "retryable"]
        for attempt in attempts:
            assert _refusals(attempt) == EXPECTED[:20]
            assert attempt["egress_refused_more"] == PER_ATTEMPT - 20
            assert attempt["egress_refused_by_reason"] == BY_REASON
        # The code was told no each time, and went on.
        assert all(line.startswith("HTTP/1.1 403 Forbidden")
                   for line in json.loads(attempts[0]["stdout"]))
        version = await _get(api, h, "/v1/activities/probe")
        assert version["flagged_for_review"] is None  # 48 refused: under the threshold
        assert driver.egress.held(tenant).refused == 0

        # A completed attempt's refusals are recorded too, and cross the threshold.
        completing = await _enqueue(api, h, "probe", {"mode": "ok"})
        task = await _settled(api, h, completing)
        assert task["status"] == "finished", task
        assert all(line.startswith("HTTP/1.1 403 Forbidden") for line in task["result"])
        [attempt] = (await _get(api, h, f"/v1/activity-tasks/{completing}/attempts"))["data"]
        assert _refusals(attempt) == EXPECTED[:20]
        assert attempt["egress_refused_by_reason"] == BY_REASON
        trace = await _get(api, h, f"/v1/runs/{completing}/trace")
        assert trace["egress_refused"] == {"total": PER_ATTEMPT, "by_reason": BY_REASON}
        scraped = registry.render()
        unwatch()

    flag = (await _get(api, h, "/v1/activities/probe"))["flagged_for_review"]
    assert flag is not None and flag["reason"] == "egress_refused"
    assert flag["refused_egress"] == 3 * PER_ATTEMPT
    assert (await _get(api, h, "/v1/activities/probe/versions/1"))["flagged_for_review"] == flag
    for reason, count in BY_REASON.items():
        assert refused_metric(scraped, reason) == 3 * count
    assert 'tenant_class="standard"' in scraped and tenant not in scraped
    # The operator sees the flagged version on the console's tenants page.
    cookie, _ = session.issue(OPERATOR_TOKEN, epoch=epoch.FIRST)
    page = await api.client.get("/console/tenants",
                                headers={"Cookie": f"{session.SESSION_COOKIE}={cookie}"})
    assert page.status_code == 200, page.text
    row = page.text.split(f'<tr data-tenant="{tenant}">', 1)[1].split("</tr>", 1)[0]
    assert "probe v1: egress_refused" in row
    assert f"{3 * PER_ATTEMPT} refused egress attempts" in row
    # Taken, and freed: the proxy holds nothing of the tenant's attempts.
    held = driver.egress.held(tenant)
    assert (held.keys, held.kept, held.refused) == (0, 0, 0)


@pytest.mark.parametrize("driver", ["bwrap"], indirect=True)
async def test_a_timed_out_attempt_records_what_it_was_refused(
    api: Api, db: Database, driver: PooledDriver,
) -> None:
    tenant, h = await api.tenant("Prober")
    await publish_activity(api, h, "probe", PROBE, egress=["api.example.com"],
                           timeout_seconds=10, retry={"max_attempts": 1})
    async with dispatching(db, driver):
        hanging = await _enqueue(api, h, "probe", {"mode": "hang"})
        task = await _settled(api, h, hanging)
    assert task["status"] == "failed" and task["egress_refused"] == PER_ATTEMPT, task
    [attempt] = (await _get(api, h, f"/v1/activity-tasks/{hanging}/attempts"))["data"]
    assert attempt["error"].startswith("timeout") and attempt["killed_sandbox"]
    assert _refusals(attempt) == EXPECTED[:20]
    assert attempt["egress_refused_by_reason"] == BY_REASON
    held = driver.egress.held(tenant)
    assert (held.keys, held.refused) == (0, 0)


@pytest.mark.parametrize("driver", ["bwrap"], indirect=True)
@pytest.mark.parametrize("how", ["lease_lost", "stopped"])
async def test_an_attempt_that_records_nothing_still_frees_counts_and_flags_its_refusals(
    api: Api, db: Database, driver: PooledDriver, admin_conn: asyncpg.Connection,
    how: str,
) -> None:
    tenant, h = await api.tenant("Prober")
    await publish_activity(api, h, "probe", PROBE, egress=["api.example.com"],
                           timeout_seconds=3600)
    async with dispatching(db, driver, egress_flag_threshold=PER_ATTEMPT) as dispatcher:
        task = await _enqueue(api, h, "probe", {"mode": "hang"})

        async def refused() -> bool:
            return driver.egress.held(tenant).refused == PER_ATTEMPT
        # Every target asked and refused; the code now waits for the host to end it.
        await until(refused, "the attempt's refusals are held by the proxy", WITHIN)
        if how == "lease_lost":
            await steal_lease(admin_conn, RunId.parse(task))
        else:
            await dispatcher.stop()  # returns once its attempts have ended

        async def flagged() -> bool:
            found = await _get(api, h, "/v1/activities/probe")
            return found["flagged_for_review"] is not None
        # What the code tried flags the version, though no attempt of it is recorded...
        await until(flagged, "the version is flagged", WITHIN)
        flag = (await _get(api, h, "/v1/activities/probe"))["flagged_for_review"]
        assert flag["refused_egress"] == PER_ATTEMPT
        assert dispatcher.outcomes["lease_lost"] == int(how == "lease_lost")
        # ...is counted in the metric...
        assert dispatcher.egress_refused == {("standard", reason): n
                                             for reason, n in BY_REASON.items()}
    assert (await _get(api, h, f"/v1/activity-tasks/{task}/attempts"))["data"] == []
    # ...and nothing of it is left in the proxy.
    held = driver.egress.held(tenant)
    assert (held.keys, held.refused) == (0, 0)
