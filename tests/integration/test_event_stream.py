"""The run's event log served as Server-Sent Events (resumable, pushed by LISTEN/NOTIFY)
and as JSON pages."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

import asyncpg
import pytest

from tenantry.db import Database
from tenantry.ids import RunId, TenantId
from tenantry.runs import hub, log
from tenantry.runs.events import EventType, Payload, RunFinished
from tests.support.api import Api
from tests.support.sse import SseEvent, read_sse


async def _run(api: Api) -> tuple[str, dict[str, str], str]:
    tenant, h = await api.tenant()
    agent = await api.agent(h)
    r = await api.client.post("/v1/runs", json={"agent_id": agent, "input": "x"}, headers=h)
    return tenant, h, r.json()["run_id"]


@dataclass(frozen=True, slots=True)
class Note(Payload):
    """Stands in for a model reply: the stream carries event data without reading it."""

    TYPE = EventType.MODEL_REPLIED
    n: int | None = None
    text: str | None = None


async def _append(db: Database, tenant: str, run_id: str, payload: Payload) -> int:
    async with db.tenant_tx(TenantId(tenant)) as conn:
        return await log.append(conn, TenantId(tenant), RunId.parse(run_id), payload,
                                epoch=None)


async def test_stream_sends_backlog_then_live_events_then_ends(api: Api, db: Database) -> None:
    tenant, h, run_id = await _run(api)
    received: list[SseEvent] = []
    async with api.client.stream("GET", f"/v1/runs/{run_id}/events", headers=h) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = read_sse(r)
        received.append(await anext(events))
        # Written by someone else while we listen: it must arrive without polling.
        await _append(db, tenant, run_id, Note(text="thinking"))
        received.append(await asyncio.wait_for(anext(events), 5))
        await _append(db, tenant, run_id, RunFinished("42"))
        received.append(await asyncio.wait_for(anext(events), 5))
        # The stream ends after the terminal event.
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(anext(events), 5)
    assert [(e.id, e.event) for e in received] == [
        (1, "RunCreated"), (2, "ModelReplied"), (3, "RunFinished")]
    assert received[2].data["data"] == {"answer": "42"}


async def test_resume_with_after_or_last_event_id_has_no_gap_and_no_repeat(
    api: Api, db: Database, admin_conn: asyncpg.Connection
) -> None:
    tenant, h, run_id = await _run(api)
    for i in range(4):
        await _append(db, tenant, run_id, Note(n=i))
    await _append(db, tenant, run_id, RunFinished("ok"))
    await admin_conn.execute("UPDATE runs SET status = 'finished'")  # as the engine would

    async def ids(**kwargs: object) -> list[int]:
        async with api.client.stream("GET", f"/v1/runs/{run_id}/events", **kwargs) as r:
            return [e.id async for e in read_sse(r)]

    assert await ids(headers=h) == [1, 2, 3, 4, 5, 6]
    assert await ids(headers=h, params={"after": 3}) == [4, 5, 6]
    assert await ids(headers={**h, "Last-Event-ID": "4"}) == [5, 6]
    # Resuming past the end of an ended run ends at once instead of hanging.
    assert await ids(headers=h, params={"after": 6}) == []


async def test_events_as_json_pages(api: Api, db: Database) -> None:
    tenant, h, run_id = await _run(api)
    for i in range(3):
        await _append(db, tenant, run_id, Note(n=i))
    json_h = {**h, "Accept": "application/json"}
    page = (await api.client.get(f"/v1/runs/{run_id}/events", params={"limit": 2},
                                 headers=json_h)).json()
    assert [e["seq"] for e in page["events"]] == [1, 2]
    assert page["next_after"] == 2 and page["run_ended"] is False
    page = (await api.client.get(f"/v1/runs/{run_id}/events",
                                 params={"after": page["next_after"]}, headers=json_h)).json()
    assert [e["seq"] for e in page["events"]] == [3, 4]
    assert page["events"][1]["data"] == {"n": 2}


async def test_stream_reconnects_listener_and_catches_up(
    api: Api, db: Database, admin_conn: asyncpg.Connection
) -> None:
    """If the LISTEN connection drops, events committed meanwhile still reach the stream."""
    tenant, h, run_id = await _run(api)
    async with api.client.stream("GET", f"/v1/runs/{run_id}/events", headers=h) as r:
        events = read_sse(r)
        assert (await anext(events)).id == 1
        killed = await admin_conn.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = $1",
            hub.APPLICATION_NAME)
        assert killed == 1
        await _append(db, tenant, run_id, Note(text="while disconnected"))
        got = await asyncio.wait_for(anext(events), 10)
        assert (got.id, got.event) == (2, "ModelReplied")


async def test_unknown_run_stream_is_404_before_streaming(api: Api) -> None:
    _, h, _ = await _run(api)
    r = await api.client.get(f"/v1/runs/run_{uuid.uuid4().hex}/events", headers=h)
    assert r.status_code == 404 and r.json()["type"] == "not_found"
