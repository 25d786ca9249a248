"""Leases fence stale writers; expired leases are claimed again; webhooks are signed,
retried and recorded."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
from collections.abc import AsyncIterator

import asyncpg
import orjson
import pytest

from tenantry.db import Database
from tenantry.errors import LeaseLost
from tenantry.ids import RunId, TenantId
from tenantry.runs import lease as leases
from tenantry.runs import log
from tenantry.runs.events import ModelReplied
from tenantry.runs.webhooks import Refused, destination
from tests.support.api import Api
from tests.support.receiver import Receiver
from tests.support.scripts import answer, call, scripted
from tests.support.tools import DiesAfterTheCall
from tests.support.worker import TEST_ENGINE, Fakes, running_worker


async def _queued_run(api: Api, fakes: Fakes, script: object) -> tuple[str, dict[str, str], str]:
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["effect", "echo", "slow"])
    return tenant, h, await api.start(h, agent, script)


async def test_a_stale_lease_holder_writes_nothing(
    api: Api, db: Database, fakes: Fakes, admin_conn: asyncpg.Connection
) -> None:
    tenant, _h, run_id = await _queued_run(api, fakes, scripted(answer("x")))
    [first] = await leases.claim(db, "worker-a", 10, 30.0)
    # worker-a stalls; its lease runs out and worker-b claims the run (epoch moves on).
    await admin_conn.execute("UPDATE runs SET lease_expires_at = now() - interval '1 s'")
    [second] = await leases.claim(db, "worker-b", 10, 30.0)
    assert second.run == first.run and second.epoch == first.epoch + 1
    before = await admin_conn.fetchval("SELECT count(*) FROM run_events")
    stale = ModelReplied("stale", [], {}, "openai", "a", "m", 0, "p", 0.0)
    async with db.tenant_tx(TenantId(tenant)) as conn:
        with pytest.raises(LeaseLost):
            await log.append(conn, TenantId(tenant), RunId.parse(run_id), stale,
                             epoch=first.epoch)
    assert await leases.renew(db, "worker-a", [first], 30.0) == {first}
    assert await leases.release(db, first) is False
    assert await admin_conn.fetchval("SELECT count(*) FROM run_events") == before
    row = await admin_conn.fetchrow("SELECT status, lease_owner, lease_epoch FROM runs")
    assert tuple(row) == ("running", "worker-b", second.epoch)


async def test_claims_never_hand_one_run_to_two_workers(
    api: Api, db: Database, fakes: Fakes
) -> None:
    _, h = await api.tenant()
    agent = await api.agent(h)
    for i in range(60):
        await api.start(h, agent, f"run {i}")
    results = await asyncio.gather(*(leases.claim(db, f"w{i}", 7, 30.0) for i in range(12)))
    claimed = [x.run for batch in results for x in batch]
    assert len(claimed) == len(set(claimed)) == 60


async def test_an_expired_lease_is_claimed_again_and_the_run_resumes(
    api: Api, db: Database, fakes: Fakes, database_dsn: str
) -> None:
    _tenant, h, run_id = await _queued_run(
        api, fakes, scripted(call("effect", note="once"), answer("resumed")))
    # A worker claims the run and dies at once: nobody renews its short lease.
    await leases.claim(db, "dead-worker", 10, 0.5)
    async with running_worker(database_dsn, fakes.model.base_url):
        events = await api.events_until_end(h, run_id)
    assert [e["type"] for e in events] == [
        "RunCreated", "ModelReplied", "ToolCompleted", "ModelReplied", "RunFinished"]
    assert (await api.run(h, run_id))["answer"] == "resumed"


async def test_a_run_resumes_from_its_log_with_the_same_keys(
    api: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection
) -> None:
    """Worker A saved the model's reply and sent the tool call, then died before saving the
    result. Worker B repeats the call with the same key: the effect happens once."""
    _tenant, h, run_id = await _queued_run(
        api, fakes, scripted(call("effect", note="charge"), answer("{last_tool_result}")))
    key = f"{run_id}:2:0"
    short_lease = dataclasses.replace(TEST_ENGINE, lease_seconds=1.0)
    async with running_worker(database_dsn, fakes.model.base_url, name="a",
                              settings=short_lease, gateway=DiesAfterTheCall) as worker_a:
        async with asyncio.timeout(20):
            # The worker exposes no per-run completion event; poll its counters briefly.
            while worker_a.engine.stats.steps < 1 or worker_a.active:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    types = [r["type"] for r in await admin_conn.fetch("SELECT type FROM run_events ORDER BY seq")]
    assert types == ["RunCreated", "ModelReplied"]
    assert fakes.mcp.key_counts()[key].effects == 1
    async with running_worker(database_dsn, fakes.model.base_url, name="b"):
        events = await api.events_until_end(h, run_id)
    tool = next(e["data"] for e in events if e["type"] == "ToolCompleted")
    assert tool["key"] == key
    counts = fakes.mcp.key_counts()[key]
    assert counts.calls == 2 and counts.effects == 1
    assert (await api.run(h, run_id))["answer"] == "already applied charge"


# -- webhooks ---------------------------------------------------------------------------


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver(fail_first=1)
    await r.server.start()
    yield r
    await r.server.stop()


async def test_webhook_is_signed_retried_and_recorded(
    api: Api, fakes: Fakes, worker: object, receiver: Receiver
) -> None:
    created = await api.client.post("/admin/v1/tenants", json={"name": "Hooked"},
                                    headers=api.operator)
    tenant, secret = created.json()["tenant_id"], created.json()["webhook_secret"]
    key = (await api.client.post(f"/admin/v1/tenants/{tenant}/api-keys",
                                 headers=api.operator)).json()["api_key"]
    h = {"Authorization": f"Bearer {key}"}
    agent = await api.agent(h)
    run_id = await api.start(h, agent, "ping", webhook=receiver.url)
    await api.events_until_end(h, run_id)
    await asyncio.wait_for(receiver.arrived.wait(), 20)  # the first attempt got a 500
    headers, body = receiver.received[-1]
    stamp, signature = (part.split("=", 1)[1] for part in
                        headers["tenantry-signature"].split(","))
    expected = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256)
    assert hmac.compare_digest(signature, expected.hexdigest())
    assert headers["idempotency-key"] == run_id
    summary = orjson.loads(body)
    assert summary["run_id"] == run_id and summary["status"] == "finished"
    assert summary["answer"] == "You said: ping"
    # Recorded in the run's log (after its end), exactly once.
    page = await api.client.get(f"/v1/runs/{run_id}/events",
                                headers={**h, "Accept": "application/json"})
    delivered = [e for e in page.json()["events"] if e["type"] == "WebhookDelivered"]
    async with asyncio.timeout(10):  # recorded right after the receiver answered
        while not delivered:
            await asyncio.sleep(0.05)
            page = await api.client.get(f"/v1/runs/{run_id}/events",
                                        headers={**h, "Accept": "application/json"})
            delivered = [e for e in page.json()["events"] if e["type"] == "WebhookDelivered"]
    assert len(delivered) == 1
    assert delivered[0]["data"]["status_code"] == 204 and delivered[0]["data"]["attempts"] == 2
    assert len(receiver.received) == 2


async def test_webhooks_to_internal_addresses_are_refused_by_default() -> None:
    for url in ("http://127.0.0.1:9/x", "http://localhost/x", "http://169.254.169.254/x",
                "http://10.0.0.1/x", "http://[::1]/x"):
        with pytest.raises(Refused):
            await destination(url, allow_private=False)
    [target] = await destination("http://127.0.0.1/x", allow_private=True)
    assert target.url.host == "127.0.0.1"
