"""Retention over HTTP: the operator's policies and tombstone listing, a tenant deleting
one of its runs, and what a deleted run looks like afterwards (ADR 0017)."""

from __future__ import annotations

import asyncpg
import pytest

from tenantry.api.console import epoch, session
from tenantry.ids import AgentId, RunId, TenantId
from tests.support.api import OPERATOR_TOKEN, Api
from tests.support.db import row_counts
from tests.support.retention import Seeded, block, cancelled_run, ended_runs, set_status

DEFAULTS = {"runs_days": 30, "tombstones_days": None, "audit_days": None,
            "blobs_follow_runs": True, "updated_at": None}


async def test_retention_defaults_then_set_then_audit_kept_apart(api: Api) -> None:
    tenant, _ = await api.tenant()
    path = f"/admin/v1/tenants/{tenant}/retention"
    r = await api.client.get(path, headers=api.operator)
    assert r.status_code == 200 and r.json() == {"tenant_id": tenant, **DEFAULTS}

    r = await api.client.put(path, json={"runs_days": 7, "tombstones_days": 365},
                             headers=api.operator)
    assert r.status_code == 200, r.text
    assert r.json()["runs_days"] == 7 and r.json()["tombstones_days"] == 365
    assert r.json()["updated_at"] is not None

    r = await api.client.put(f"/admin/v1/tenants/{tenant}/audit-retention",
                             json={"days": 3650}, headers=api.operator)
    assert r.status_code == 200 and r.json()["audit_days"] == 3650
    # The runs part stays as it was; a later runs PUT keeps the audit part.
    assert (r.json()["runs_days"], r.json()["tombstones_days"]) == (7, 365)
    r = await api.client.put(path, json={"runs_days": 0, "blobs_follow_runs": False},
                             headers=api.operator)
    got = (await api.client.get(path, headers=api.operator)).json()
    assert got == r.json()
    assert (got["runs_days"], got["tombstones_days"], got["audit_days"],
            got["blobs_follow_runs"]) == (0, None, 3650, False)
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/audit-retention",
                             json={"days": None}, headers=api.operator)
    assert r.status_code == 200 and r.json()["audit_days"] is None


@pytest.mark.parametrize("body", [
    {"runs_days": -1}, {"runs_days": 36501}, {"runs_days": 10**30}, {"runs_days": "7"},
    {"runs_days": 7.5}, {"runs_days": True}, {"runs_days": None}, {},
    {"runs_days": 7, "tombstones_days": -5}, {"runs_days": 7, "tombstones_days": "\u0000"},
    {"runs_days": 7, "blobs_follow_runs": "yes"}, {"runs_days": 7, "audit_days": 3},
    {"runs_days": 7, "note\u0000": 1},
])
async def test_bad_retention_is_refused_and_nothing_written(
    api: Api, admin_conn: asyncpg.Connection, body: dict[str, object],
) -> None:
    tenant, _ = await api.tenant()
    before = await row_counts(admin_conn)
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/retention", json=body,
                             headers=api.operator)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["type"] == "validation_error"
    assert await row_counts(admin_conn) == before


@pytest.mark.parametrize("body", [{}, {"days": -1}, {"days": 36501}, {"days": "30"},
                                  {"days": 1.5}, {"days": 30, "extra": 1}])
async def test_bad_audit_retention_is_refused(
    api: Api, admin_conn: asyncpg.Connection, body: dict[str, object],
) -> None:
    tenant, _ = await api.tenant()
    before = await row_counts(admin_conn)
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/audit-retention", json=body,
                             headers=api.operator)
    assert r.status_code == 400 and r.json()["type"] == "validation_error", r.text
    assert await row_counts(admin_conn) == before


@pytest.mark.parametrize("tenant", ["nobody-here", "NOT%20A%20SLUG", "a%00b"])
async def test_unknown_tenant_is_404_on_every_retention_route(api: Api, tenant: str) -> None:
    answers = [
        await api.client.get(f"/admin/v1/tenants/{tenant}/retention", headers=api.operator),
        await api.client.put(f"/admin/v1/tenants/{tenant}/retention", json={"runs_days": 1},
                             headers=api.operator),
        await api.client.put(f"/admin/v1/tenants/{tenant}/audit-retention",
                             json={"days": 1}, headers=api.operator),
        await api.client.post(f"/admin/v1/tenants/{tenant}/erase", headers=api.operator),
        await api.client.get(f"/admin/v1/tenants/{tenant}/tombstones", headers=api.operator),
    ]
    for r in answers:
        assert r.status_code == 404, r.text
        assert r.json()["type"] == "not_found"


async def test_retention_routes_need_the_operator_token(api: Api) -> None:
    tenant, h = await api.tenant()
    r = await api.client.get(f"/admin/v1/tenants/{tenant}/retention", headers=h)
    assert r.status_code == 401


async def _seeded(api: Api, admin_conn: asyncpg.Connection) -> tuple[str, dict[str, str], str]:
    tenant, h = await api.tenant()
    return tenant, h, await api.agent(h)


async def test_delete_an_ended_run_leaves_only_its_tombstone(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    _, h, agent = await _seeded(api, admin_conn)
    run = await cancelled_run(api, h, agent)
    r = await api.client.delete(f"/v1/runs/{run}", headers=h)
    assert r.status_code == 204 and r.content == b""
    assert await admin_conn.fetchval("SELECT count(*) FROM runs") == 0
    assert await admin_conn.fetchval("SELECT count(*) FROM run_events") == 0

    r = await api.client.get(f"/v1/tombstones/{run}", headers=h)
    assert r.status_code == 200, r.text
    stone = r.json()
    assert (stone["run_id"], stone["status"], stone["reason"], stone["kind"]) == (
        run, "cancelled", "request", "agent")
    assert stone["agent_id"] == agent and stone["events"] >= 2
    assert "input" not in stone and "answer" not in stone
    # Deleting again: the run is gone, like one that never existed.
    again = await api.client.delete(f"/v1/runs/{run}", headers=h)
    assert again.status_code == 404 and again.json()["type"] == "not_found"


async def test_a_deleted_run_answers_404_byte_for_byte_like_a_run_that_never_was(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    _, h, agent = await _seeded(api, admin_conn)
    deleted = await cancelled_run(api, h, agent)
    assert (await api.client.delete(f"/v1/runs/{deleted}", headers=h)).status_code == 204
    never = str(RunId.new())  # well-formed, never used
    for method, suffix, extra in [
        ("GET", "", {}), ("GET", "/events", {"Accept": "application/json"}),
        ("GET", "/events", {}), ("GET", "/trace", {}), ("POST", "/cancel", {}),
        ("DELETE", "", {}),
    ]:
        a = await api.client.request(method, f"/v1/runs/{deleted}{suffix}",
                                     headers={**h, **extra})
        b = await api.client.request(method, f"/v1/runs/{never}{suffix}",
                                     headers={**h, **extra})
        assert a.status_code == b.status_code == 404, (method, suffix, a.text)
        assert a.content == b.content, (method, suffix)
        assert a.headers["content-type"] == b.headers["content-type"]
    listed = (await api.client.get("/v1/runs", headers=h)).json()
    assert listed["data"] == []


async def test_tombstones_are_tenant_scoped(api: Api, admin_conn: asyncpg.Connection) -> None:
    _, h, agent = await _seeded(api, admin_conn)
    _, other = await api.tenant("Other")
    run = await cancelled_run(api, h, agent)
    assert (await api.client.delete(f"/v1/runs/{run}", headers=h)).status_code == 204
    theirs = await api.client.get(f"/v1/tombstones/{run}", headers=other)
    missing = await api.client.get(f"/v1/tombstones/{RunId.new()}", headers=h)
    garbled = await api.client.get("/v1/tombstones/run_%00", headers=h)
    assert theirs.status_code == missing.status_code == garbled.status_code == 404
    assert theirs.content == missing.content == garbled.content
    # And another tenant cannot delete the run either (it is as absent as any).
    live = await cancelled_run(api, h, agent)
    r = await api.client.delete(f"/v1/runs/{live}", headers=other)
    assert r.status_code == 404
    assert await admin_conn.fetchval("SELECT count(*) FROM runs") == 1


@pytest.mark.parametrize("status", ["queued", "running", "waiting"])
async def test_deleting_a_run_that_has_not_ended_is_409_with_its_status(
    api: Api, admin_conn: asyncpg.Connection, status: str,
) -> None:
    _, h, agent = await _seeded(api, admin_conn)
    run = await api.start(h, agent, "x")
    if status != "queued":
        await set_status(admin_conn, run, status)
    before = await row_counts(admin_conn)
    r = await api.client.delete(f"/v1/runs/{run}", headers=h)
    assert r.status_code == 409, r.text
    assert r.json()["type"] == "conflict" and r.json()["run_status"] == status
    assert "blocked_by" not in r.json()
    assert await row_counts(admin_conn) == before


async def test_a_dead_lettered_task_is_deletable(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    tenant, h, agent = await _seeded(api, admin_conn)
    seeded = Seeded(TenantId.parse(tenant), AgentId.parse(agent))
    [task] = await ended_runs(admin_conn, seeded, 1, status="dead_lettered", ended_days_ago=0)
    r = await api.client.delete(f"/v1/runs/{task}", headers=h)
    assert r.status_code == 204, r.text
    stone = (await api.client.get(f"/v1/tombstones/{task}", headers=h)).json()
    assert stone["status"] == "dead_lettered" and stone["kind"] == "activity"


@pytest.mark.parametrize("blocker", ["webhook_pending", "live_children", "pending_approval"])
async def test_an_ended_run_that_is_kept_for_now_says_why(
    api: Api, admin_conn: asyncpg.Connection, blocker: str,
) -> None:
    tenant, h, agent = await _seeded(api, admin_conn)
    run = await cancelled_run(api, h, agent)
    child = await api.start(h, agent, "child") if blocker == "live_children" else None
    await block(admin_conn, tenant, run, blocker, child)
    before = await row_counts(admin_conn)
    r = await api.client.delete(f"/v1/runs/{run}", headers=h)
    assert r.status_code == 409, r.text
    assert r.json()["blocked_by"] == blocker and r.json()["run_status"] == "cancelled"
    assert await row_counts(admin_conn) == before


async def test_the_idempotency_key_of_a_deleted_run_is_not_reusable(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    _, h, agent = await _seeded(api, admin_conn)
    body = {"agent_id": agent, "input": {"order": 7}}
    run = await cancelled_run(api, h, agent, idempotency_key="order-7", body=body)
    assert (await api.client.delete(f"/v1/runs/{run}", headers=h)).status_code == 204
    before = await row_counts(admin_conn)
    r = await api.client.post("/v1/runs", json=body,
                              headers={**h, "Idempotency-Key": "order-7"})
    assert r.status_code == 409, r.text
    problem = r.json()
    assert problem["type"] == "conflict" and problem["tombstoned"] is True
    assert problem["run_id"] == run
    assert await row_counts(admin_conn) == before
    # Another key starts a run as ever.
    other = await api.client.post("/v1/runs", json=body,
                                  headers={**h, "Idempotency-Key": "order-8"})
    assert other.status_code == 202


async def test_the_operators_tombstone_listing_pages_newest_first(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    tenant, h, agent = await _seeded(api, admin_conn)
    runs = [await cancelled_run(api, h, agent) for _ in range(5)]
    for run in runs:
        assert (await api.client.delete(f"/v1/runs/{run}", headers=h)).status_code == 204
    path = f"/admin/v1/tenants/{tenant}/tombstones"
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        r = await api.client.get(path, params=params, headers=api.operator)
        assert r.status_code == 200, r.text
        seen += [t["run_id"] for t in r.json()["data"]]
        cursor = r.json()["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(runs))
    for bad in ["nonsense", "12.run_x", "-1." + runs[0], "\u0000"]:
        r = await api.client.get(path, params={"cursor": bad}, headers=api.operator)
        assert r.status_code == 400 and r.json()["type"] == "validation_error", bad
    r = await api.client.get(path, params={"limit": "0"}, headers=api.operator)
    assert r.status_code == 400


async def test_the_consoles_tenants_page_shows_each_tenants_retention(api: Api) -> None:
    default, _ = await api.tenant("Default")
    kept, _ = await api.tenant("Kept")
    r = await api.client.put(f"/admin/v1/tenants/{kept}/retention",
                             json={"runs_days": 90, "tombstones_days": 400},
                             headers=api.operator)
    assert r.status_code == 200
    cookie, _ = session.issue(OPERATOR_TOKEN, epoch=epoch.FIRST)
    page = await api.client.get("/console/tenants",
                                headers={"Cookie": f"{session.SESSION_COOKIE}={cookie}"})
    assert page.status_code == 200, page.text

    def cell(tenant: str) -> str:
        row = page.text.split(f'<tr data-tenant="{tenant}">', 1)[1].split("</tr>", 1)[0]
        return row.split('<td class="retention">', 1)[1].split("</td>", 1)[0]

    assert cell(default) == "30 d / forever"
    assert cell(kept) == "90 d / 400 d"
