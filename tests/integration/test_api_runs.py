"""Starting, reading, listing and cancelling runs over HTTP."""

from __future__ import annotations

import asyncpg

from tests.support.api import Api
from tests.support.db import row_counts


async def _setup(api: Api) -> tuple[dict[str, str], str]:
    _, h = await api.tenant()
    return h, await api.agent(h)


async def test_start_run_writes_run_and_run_created_together(
    api: Api, admin_conn: asyncpg.Connection
) -> None:
    h, agent = await _setup(api)
    r = await api.client.post("/v1/runs", json={"agent_id": agent, "input": {"q": "hi"}},
                              headers=h)
    assert r.status_code == 202
    body = r.json()
    assert body["status"] == "queued"
    assert body["events_url"] == f"/v1/runs/{body['run_id']}/events"
    events = await admin_conn.fetch("SELECT seq, type, data FROM run_events ORDER BY seq")
    assert [(e["seq"], e["type"]) for e in events] == [(1, "RunCreated")]
    run = (await api.client.get(f"/v1/runs/{body['run_id']}", headers=h)).json()
    assert run["status"] == "queued" and run["version"] == 1 and run["input"] == {"q": "hi"}
    assert run["last_seq"] == 1 and run["usage"] == {"input_tokens": 0, "output_tokens": 0}


async def test_run_pins_the_version_it_started_with(api: Api) -> None:
    h, agent = await _setup(api)
    first = (await api.client.post("/v1/runs", json={"agent_id": agent, "input": "a"},
                                   headers=h)).json()
    await api.client.post(f"/v1/agents/{agent}/versions",
                          json={"model": "gpt-4o", "system_prompt": "new"}, headers=h)
    # Publishing does not make a version live (ADR 0034): promoting does.
    second = (await api.client.post("/v1/runs", json={"agent_id": agent, "input": "b"},
                                    headers=h)).json()
    r = await api.client.post(f"/v1/agents/{agent}/promote", json={"version": 2}, headers=h)
    assert r.status_code == 200, r.text
    third = (await api.client.post("/v1/runs", json={"agent_id": agent, "input": "c"},
                                   headers=h)).json()
    pinned = (await api.client.post("/v1/runs", json={"agent_id": agent, "version": 1,
                                                      "input": "d"}, headers=h)).json()
    versions = [
        (await api.client.get(f"/v1/runs/{r['run_id']}", headers=h)).json()["version"]
        for r in (first, second, third, pinned)
    ]
    assert versions == [1, 1, 2, 1]


async def test_idempotency_key_returns_the_same_run_or_conflicts(
    api: Api, admin_conn: asyncpg.Connection
) -> None:
    h, agent = await _setup(api)
    keyed = {**h, "Idempotency-Key": "order-42"}
    body = {"agent_id": agent, "input": {"order": 42}}
    first = await api.client.post("/v1/runs", json=body, headers=keyed)
    retry = await api.client.post("/v1/runs", json=body, headers=keyed)
    assert first.status_code == retry.status_code == 202
    assert first.json()["run_id"] == retry.json()["run_id"]
    before = await row_counts(admin_conn)
    changed = await api.client.post("/v1/runs", json={**body, "input": {"order": 43}},
                                    headers=keyed)
    assert changed.status_code == 409 and changed.json()["type"] == "conflict"
    assert await row_counts(admin_conn) == before
    assert before["runs"] == 1
    # The key is scoped to the tenant: another tenant may use the same key.
    _, other = await api.tenant("Other")
    other_agent = await api.agent(other)
    r = await api.client.post("/v1/runs", json={"agent_id": other_agent, "input": 1},
                              headers={**other, "Idempotency-Key": "order-42"})
    assert r.status_code == 202 and r.json()["run_id"] != first.json()["run_id"]


async def test_list_runs_with_cursor_and_status_filter(api: Api) -> None:
    h, agent = await _setup(api)
    ids = []
    for i in range(5):
        r = await api.client.post("/v1/runs", json={"agent_id": agent, "input": i}, headers=h)
        ids.append(r.json()["run_id"])
    await api.client.post(f"/v1/runs/{ids[0]}/cancel", headers=h)
    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await api.client.get("/v1/runs", params=params, headers=h)).json()
        seen += [r["run_id"] for r in page["data"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == list(reversed(ids))
    cancelled = (await api.client.get("/v1/runs", params={"status": "cancelled"},
                                      headers=h)).json()
    assert [r["run_id"] for r in cancelled["data"]] == [ids[0]]


async def test_cancel_a_queued_run_ends_it_at_once(
    api: Api, admin_conn: asyncpg.Connection
) -> None:
    h, agent = await _setup(api)
    run_id = (await api.client.post("/v1/runs", json={"agent_id": agent, "input": "x"},
                                    headers=h)).json()["run_id"]
    r = await api.client.post(f"/v1/runs/{run_id}/cancel", headers=h)
    assert r.status_code == 200
    assert r.json()["status"] == "cancelled" and r.json()["finished_at"] is not None
    types = [e["type"] for e in await admin_conn.fetch(
        "SELECT type FROM run_events ORDER BY seq")]
    assert types == ["RunCreated", "CancelRequested", "RunCancelled"]
    again = await api.client.post(f"/v1/runs/{run_id}/cancel", headers=h)
    assert again.status_code == 200 and again.json()["status"] == "cancelled"
    assert await admin_conn.fetchval("SELECT count(*) FROM run_events") == 3


async def test_cancel_a_running_run_is_recorded_for_its_worker(
    api: Api, admin_conn: asyncpg.Connection
) -> None:
    h, agent = await _setup(api)
    run_id = (await api.client.post("/v1/runs", json={"agent_id": agent, "input": "x"},
                                    headers=h)).json()["run_id"]
    # Pretend a worker holds it (the engine does this through its claim).
    await admin_conn.execute("UPDATE runs SET status = 'running', lease_owner = 'w1', "
                             "lease_epoch = 1, lease_expires_at = now() + interval '30 s'")
    r = await api.client.post(f"/v1/runs/{run_id}/cancel", headers=h)
    assert r.json()["status"] == "running" and r.json()["cancel_requested"] is True
    types = [e["type"] for e in await admin_conn.fetch("SELECT type FROM run_events ORDER BY seq")]
    assert types == ["RunCreated", "CancelRequested"]


async def test_cancel_a_finished_run_conflicts(api: Api, admin_conn: asyncpg.Connection) -> None:
    h, agent = await _setup(api)
    run_id = (await api.client.post("/v1/runs", json={"agent_id": agent, "input": "x"},
                                    headers=h)).json()["run_id"]
    await admin_conn.execute("UPDATE runs SET status = 'finished'")
    r = await api.client.post(f"/v1/runs/{run_id}/cancel", headers=h)
    assert r.status_code == 409 and r.json()["run_status"] == "finished"


async def test_another_tenants_run_looks_missing_byte_for_byte(api: Api) -> None:
    h, agent = await _setup(api)
    run_id = (await api.client.post("/v1/runs", json={"agent_id": agent, "input": "x"},
                                    headers=h)).json()["run_id"]
    _, other = await api.tenant("Other")
    missing = "run_" + "f" * 32
    for method, path in (("GET", "/v1/runs/{}"), ("GET", "/v1/runs/{}/events"),
                         ("POST", "/v1/runs/{}/cancel")):
        theirs = await api.client.request(method, path.format(run_id), headers=other)
        nothing = await api.client.request(method, path.format(missing), headers=other)
        assert theirs.status_code == nothing.status_code == 404, path
        assert theirs.content == nothing.content
        assert dict(theirs.headers) .keys() == dict(nothing.headers).keys()
    # And the owner's run was not touched by the other tenant's cancel.
    assert (await api.client.get(f"/v1/runs/{run_id}", headers=h)).json()["status"] == "queued"
    # Using another tenant's agent id to start a run is a missing agent, too.
    r = await api.client.post("/v1/runs", json={"agent_id": agent, "input": "x"}, headers=other)
    assert r.status_code == 404
