"""Dead-lettered activity tasks for the operator (ADR 0013): the console's activities page
lists them across tenants (newest first, filterable by tenant) and requeues one with a
CSRF-checked form; /metrics counts them by tenant class and shows the recovery; the
tenant pool cannot call the cross-tenant reads behind either."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx2
import pytest

from tenantry.api.console import session
from tenantry.db import Database
from tenantry.sandbox.pool import PooledDriver
from tests.support.activities import dispatching, version_body
from tests.support.api import OPERATOR_TOKEN, Api
from tests.support.console import logged_actions, operator_of
from tests.support.sandbox import pooled_driver
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(300)

SEGFAULT = """
    import ctypes
    def handle(value, context):
        ctypes.string_at(0)
"""
ECHO = """
    def handle(value, context):
        return value
"""
GAUGE = re.compile(r'^tenantry_activity_dead_letters\{tenant_class="([^"]+)"\} (\d+)$',
                   re.MULTILINE)


@pytest.fixture
async def bwrap(tmp_path: Path) -> AsyncIterator[PooledDriver]:
    async with pooled_driver(tmp_path / "sandbox") as driver:
        yield driver


async def _console(api: Api) -> tuple[dict[str, str], str]:
    """A signed-in browser's cookie header and its CSRF token."""
    async with httpx2.AsyncClient(base_url=api.base_url, timeout=10) as browser:
        form = await browser.get("/console/login")
        found = re.search(r'name="csrf" value="([0-9a-f]+)"', form.text)
        assert found, form.text
        r = await browser.post("/console/login", data={"csrf": found[1],
                                                        "token": OPERATOR_TOKEN})
        assert r.status_code == 303, r.text
    cookie = {"Cookie": f"{session.SESSION_COOKIE}={r.cookies[session.SESSION_COOKIE]}"}
    page = await api.client.get("/console/activities", headers=cookie)
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert csrf, page.text
    return cookie, csrf[1]


async def _gauge(api: Api) -> dict[str, int]:
    text = (await api.client.get("/metrics", headers=api.operator)).text
    return {cls: int(n) for cls, n in GAUGE.findall(text)}


async def test_the_console_lists_dead_letters_across_tenants_and_requeues_one(
    api: Api, db: Database, bwrap: PooledDriver, admin_conn: asyncpg.Connection,
) -> None:
    victim, h = await api.tenant("Poisoned")
    healthy, other = await api.tenant("Healthy")
    for headers, name, source in ((h, "poison", SEGFAULT), (other, "echo", ECHO)):
        r = await api.client.post("/v1/activities", headers=headers, json={
            "name": name, **version_body(source, max_sandbox_deaths=1)})
        assert r.status_code == 201, r.text
    dead = (await api.client.post("/v1/activity-tasks", headers=h,
                                  json={"activity": "poison"})).json()["task_id"]
    fine = (await api.client.post("/v1/activity-tasks", headers=other,
                                  json={"activity": "echo"})).json()["task_id"]
    assert (await _gauge(api)).get("standard") == 0  # every class, zero included
    async with dispatching(db, bwrap, slots=2):
        async def settled() -> bool:
            one = await api.client.get(f"/v1/activity-tasks/{dead}", headers=h)
            two = await api.client.get(f"/v1/activity-tasks/{fine}", headers=other)
            return bool(one.json()["dead_lettered"] and two.json()["status"] == "finished")
        await until(settled, "one dead letter and one finished task", 240.0)
    assert (await _gauge(api)).get("standard") == 1

    cookie, csrf = await _console(api)
    page = (await api.client.get("/console/activities", headers=cookie)).text
    assert f'data-task="{dead}"' in page and "poison v1" in page and "SIGSEGV" in page
    assert fine not in page
    mine = (await api.client.get(f"/console/activities?tenant={victim}", headers=cookie)).text
    assert f'data-task="{dead}"' in mine
    theirs = (await api.client.get(f"/console/activities?tenant={healthy}",
                                   headers=cookie)).text
    assert dead not in theirs and 'id="dead-letters-empty"' in theirs
    bad = await api.client.get("/console/activities?tenant=not%20a%20tenant!", headers=cookie)
    assert bad.status_code == 200 and "No such tenant" in bad.text

    url = f"/console/activities/{victim}/{dead}/requeue"
    refused = await api.client.post(url, headers=cookie, data={"csrf": "0" * 32})
    assert refused.status_code == 403
    assert (await api.client.get(f"/v1/activity-tasks/{dead}", headers=h)).json()[
        "dead_lettered"] is True
    done = await api.client.post(url, headers=cookie, data={"csrf": csrf})
    assert done.status_code == 303, done.text
    assert (await api.client.get(done.headers["location"], headers=cookie)).text.count(
        f'data-task="{dead}"') == 0
    task = (await api.client.get(f"/v1/activity-tasks/{dead}", headers=h)).json()
    assert task["status"] == "queued" and task["dead_lettered"] is False
    assert (await _gauge(api)).get("standard") == 0  # the recovery shows
    again = await api.client.post(url, headers=cookie, data={"csrf": csrf})
    assert again.status_code == 409 and "Only a dead-lettered task" in again.text
    wrong_tenant = await api.client.post(f"/console/activities/tenant-nope/{dead}/requeue",
                                         headers=cookie, data={"csrf": csrf})
    assert wrong_tenant.status_code == 404
    # On record as the session's: the requeue, and the refused second one (a forged form
    # is no action and is not recorded).
    who = operator_of(cookie["Cookie"].split("=", 1)[1])
    logged = await logged_actions(admin_conn)
    assert logged[0] == (who, "requeue_task", victim, dead, "done")
    assert logged[1][:4] == (who, "requeue_task", victim, dead)
    assert logged[1][4].startswith("refused: Only a dead-lettered task") and len(logged) == 2


async def test_the_tenant_pool_cannot_read_dead_letters_across_tenants(db: Database) -> None:
    async with db.unscoped() as conn:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetch("SELECT * FROM tenantry_console_dead_letters(NULL, NULL, 50)")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetch("SELECT * FROM tenantry_dead_letter_gauge()")
