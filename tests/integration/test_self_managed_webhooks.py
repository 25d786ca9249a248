"""Webhooks a tenant manages itself (issue 41, ADR 0045): endpoints that hear every run's end,
the signing secret rotated with an overlap, and the delivery history — against real
receivers on loopback, a real worker and real Postgres. Times that matter (retries' backoff,
an overlap's end) are set in the database, never slept through."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tenantry.models.loopback import LoopbackServer
from tenantry.runs.webhooks import MAX_ATTEMPTS
from tests.support.api import Api, serving_api
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

PUBLIC_URL = "https://93.184.215.14/hook"  # a public literal: vetted without DNS, never sent to


class Receiver:
    """A real HTTP receiver on loopback: answers 503 to the first ``fail_first`` requests,
    then 204."""

    def __init__(self, fail_first: int = 0) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.fail_first = fail_first
        self.server = LoopbackServer(Starlette(routes=[
            Route("/hook", self.hook, methods=["POST"])]))

    async def hook(self, request: Request) -> Response:
        self.received.append((dict(request.headers), await request.body()))
        return Response(status_code=503 if len(self.received) <= self.fail_first else 204)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/hook"


@pytest.fixture
async def receivers() -> AsyncIterator[list[Receiver]]:
    made = [Receiver(), Receiver(), Receiver(fail_first=2)]
    for r in made:
        await r.server.start()
    yield made
    for r in made:
        await r.server.stop()


@pytest.fixture
async def hooked(database_dsn: str) -> AsyncIterator[Api]:
    """The API as a development install runs it: webhooks may go to this machine."""
    async with serving_api(database_dsn, webhook_allow_private=True) as served:
        yield served


async def _tenant(api: Api, name: str = "Hooked") -> tuple[str, dict[str, str], str]:
    """A tenant, its key's headers and its webhook secret."""
    created = await api.client.post("/admin/v1/tenants", json={"name": name},
                                    headers=api.operator)
    assert created.status_code == 201, created.text
    tenant, secret = created.json()["tenant_id"], created.json()["webhook_secret"]
    key = (await api.client.post(f"/admin/v1/tenants/{tenant}/api-keys",
                                 headers=api.operator)).json()["api_key"]
    return tenant, {"Authorization": f"Bearer {key}"}, secret


def _signatures(header: str) -> tuple[str, list[str]]:
    parts = [part.split("=", 1) for part in header.split(",")]
    assert parts[0][0] == "t" and all(k == "v1" for k, _ in parts[1:])
    return parts[0][1], [v for _, v in parts[1:]]


def verifies(secret: str, header: str, body: bytes) -> bool:
    """The receiver's check the API reference documents: any v1 made with the secret."""
    stamp, values = _signatures(header)
    expected = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256)
    return any(hmac.compare_digest(v, expected.hexdigest()) for v in values)


def verifies_as_before(secret: str, header: str, body: bytes) -> bool:
    """The check documented before rotations had an overlap (a dict of the header's fields:
    the last v1 counts) — what receivers written then still run."""
    fields = dict(part.split("=", 1) for part in header.split(","))
    expected = hmac.new(secret.encode(), f"{fields['t']}.".encode() + body, hashlib.sha256)
    return hmac.compare_digest(expected.hexdigest(), fields["v1"])


async def _endpoint(api: Api, h: dict[str, str], url: str, **fields: object) -> str:
    r = await api.client.post("/v1/webhook-endpoints", json={"url": url, **fields}, headers=h)
    assert r.status_code == 201, r.text
    endpoint_id: str = r.json()["endpoint_id"]
    return endpoint_id


async def _received(receiver: Receiver, n: int) -> None:
    async def arrived() -> bool:
        return len(receiver.received) >= n

    await until(arrived, f"{n} request(s) at the receiver", 30)


async def _history(api: Api, h: dict[str, str], **params: str) -> list[dict[str, object]]:
    r = await api.client.get("/v1/webhook-deliveries", params=params, headers=h)
    assert r.status_code == 200, r.text
    data: list[dict[str, object]] = r.json()["data"]
    return data


async def test_an_endpoint_hears_a_runs_end_as_the_runs_own_webhook_does(
    hooked: Api, fakes: Fakes, database_dsn: str, receivers: list[Receiver],
    admin_conn: asyncpg.Connection,
) -> None:
    api, (own, registered, _) = hooked, receivers
    _, h, secret = await _tenant(api)
    agent = await api.agent(h)
    endpoint = await _endpoint(api, h, registered.url, description="all ends")
    # Filters that do not take this run: no delivery is even queued for them.
    failed_only = await _endpoint(api, h, PUBLIC_URL, statuses=["failed", "cancelled"])
    other_agent = await api.agent(h, name="other")
    others_only = await _endpoint(api, h, PUBLIC_URL, agent_ids=[other_agent])
    async with running_worker(database_dsn, fakes.model.base_url):
        run_id = await api.start(h, agent, "ping", webhook=own.url)
        await api.events_until_end(h, run_id)
        await _received(own, 1)
        await _received(registered, 1)

        async def recorded() -> bool:  # after the answer: the worker must not stop before
            return len(await _history(api, h, run_id=run_id)) == 2

        await until(recorded, "both attempts in the history", 30)
        [(own_headers, own_body)] = own.received
        [(headers, body)] = registered.received
    assert body == own_body  # the same summary, byte for byte
    assert orjson.loads(body)["run_id"] == run_id
    assert orjson.loads(body)["status"] == "finished"
    assert headers["idempotency-key"] == own_headers["idempotency-key"] == run_id
    for header, sent in ((headers["tenantry-signature"], body),
                         (own_headers["tenantry-signature"], own_body)):
        assert len(_signatures(header)[1]) == 1  # no rotation: one secret signs
        assert verifies(secret, header, sent) and verifies_as_before(secret, header, sent)
    queued = await admin_conn.fetch("SELECT endpoint_id FROM endpoint_deliveries")
    assert [f"whe_{r['endpoint_id'].hex}" for r in queued] == [endpoint]

    # The history has both attempts: the run's own URL (no endpoint) and the endpoint's.
    attempts = await _history(api, h, run_id=run_id)
    assert sorted((a["endpoint_id"] or "", a["url"]) for a in attempts) == sorted(
        [("", own.url), (endpoint, registered.url)])
    for a in attempts:
        assert (a["outcome"], a["attempt"], a["status_code"], a["error"]) == (
            "delivered", 1, 204, None)
        assert a["run_id"] == run_id
    # Listed and read back as registered.
    listed = (await api.client.get("/v1/webhook-endpoints", headers=h)).json()["data"]
    assert [e["endpoint_id"] for e in listed] == [endpoint, failed_only, others_only]
    one = (await api.client.get(f"/v1/webhook-endpoints/{endpoint}", headers=h)).json()
    assert (one["url"], one["statuses"], one["agent_ids"], one["description"]) == (
        registered.url, None, None, "all ends")
    assert listed[2]["agent_ids"] == [other_agent]


async def test_a_rotation_signs_with_both_secrets_until_its_overlap_ends(
    hooked: Api, fakes: Fakes, database_dsn: str, receivers: list[Receiver],
    admin_conn: asyncpg.Connection,
) -> None:
    api, receiver = hooked, receivers[0]
    tenant, h, old = await _tenant(api)
    agent = await api.agent(h)
    await _endpoint(api, h, receiver.url)
    r = await api.client.post("/v1/webhook-secret/rotate", json={"overlap_seconds": 3600},
                              headers=h)
    assert r.status_code == 200, r.text
    new = r.json()["webhook_secret"]
    until_ = datetime.fromisoformat(r.json()["previous_valid_until"])
    assert new.startswith("whsec_") and new != old
    assert 3500 < (until_ - datetime.now(UTC)).total_seconds() <= 3600
    async with running_worker(database_dsn, fakes.model.base_url):
        during = await api.start(h, agent, "during the overlap")
        await api.events_until_end(h, during)
        await _received(receiver, 1)
        # The overlap's end, as the clock would bring it.
        await admin_conn.execute(
            "UPDATE tenants SET webhook_secret_previous_until = now() - interval '1 s'"
            " WHERE tenant_id = $1", tenant)
        after = await api.start(h, agent, "after the overlap")
        await api.events_until_end(h, after)
        await _received(receiver, 2)
    (h1, b1), (h2, b2) = receiver.received
    assert orjson.loads(b1)["run_id"] == during and orjson.loads(b2)["run_id"] == after
    during_header, after_header = h1["tenantry-signature"], h2["tenantry-signature"]
    assert len(_signatures(during_header)[1]) == 2
    assert verifies(new, during_header, b1) and verifies(old, during_header, b1)
    # A receiver still on the old secret with the check of before keeps verifying.
    assert verifies_as_before(old, during_header, b1)
    assert verifies(new, after_header, b2) and not verifies(old, after_header, b2)
    assert verifies_as_before(new, after_header, b2)

    # overlap 0: the old one stops at once. The default is a day.
    r = await api.client.post("/v1/webhook-secret/rotate", json={"overlap_seconds": 0},
                              headers=h)
    assert r.status_code == 200 and r.json()["previous_valid_until"] is None
    r = await api.client.post("/v1/webhook-secret/rotate", headers=h)
    assert r.status_code == 200, r.text
    left = datetime.fromisoformat(r.json()["previous_valid_until"]) - datetime.now(UTC)
    assert 86300 < left.total_seconds() <= 86400
    # Each rotation is in the tenant's audit trail, with the key that made it.
    trail = (await api.client.get("/v1/audit", params={"kind": "change"}, headers=h)).json()
    rotations = [e for e in trail["data"] if e["action"] == "POST /v1/webhook-secret/rotate"]
    assert len(rotations) == 3 and all(e["actor"].startswith("key:") for e in rotations)
    # The operator's rotation stops the old secret at once, the overlap's included.
    r = await api.client.post(f"/admin/v1/tenants/{tenant}/webhook-secret",
                              headers=api.operator)
    assert r.status_code == 200
    row = await admin_conn.fetchrow(
        "SELECT webhook_secret, webhook_secret_previous, webhook_secret_previous_until"
        " FROM tenants WHERE tenant_id = $1", tenant)
    assert tuple(row) == (r.json()["webhook_secret"], None, None)


async def test_the_history_shows_every_attempt_with_its_reason(
    hooked: Api, fakes: Fakes, database_dsn: str, receivers: list[Receiver],
    admin_conn: asyncpg.Connection,
) -> None:
    api, failing = hooked, receivers[2]  # 503, 503, then 204
    _, h, _ = await _tenant(api)
    agent = await api.agent(h)
    endpoint = await _endpoint(api, h, failing.url)
    async with running_worker(database_dsn, fakes.model.base_url):
        run_id = await api.start(h, agent, "ping")
        await api.events_until_end(h, run_id)
        for n in (1, 2, 3):
            await _received(failing, n)

            async def recorded(n: int = n) -> bool:
                return len(await _history(api, h)) == n

            await until(recorded, f"attempt {n} in the history", 30)
            # The backoff's wait, over at once: the next attempt is due now.
            await admin_conn.execute(
                "UPDATE endpoint_deliveries SET next_at = now() WHERE state = 'pending'")

        assert await admin_conn.fetchval("SELECT state FROM endpoint_deliveries") == "delivered"
    attempts = await _history(api, h, endpoint_id=endpoint)
    assert [(a["attempt"], a["outcome"], a["status_code"], a["error"]) for a in attempts] == [
        (3, "delivered", 204, None), (2, "retrying", 503, "HTTP 503"),
        (1, "retrying", 503, "HTTP 503")]
    assert {a["run_id"] for a in attempts} == {run_id}
    assert {a["url"] for a in attempts} == {failing.url}
    # Pages, newest first, with a cursor.
    r = await api.client.get("/v1/webhook-deliveries", params={"limit": "2"}, headers=h)
    first = r.json()
    assert [a["attempt"] for a in first["data"]] == [3, 2] and first["next_cursor"]
    r = await api.client.get("/v1/webhook-deliveries",
                             params={"limit": "2", "cursor": first["next_cursor"]}, headers=h)
    assert [a["attempt"] for a in r.json()["data"]] == [1] and r.json()["next_cursor"] is None
    # A malformed cursor or filter is a 400, not a 5xx.
    for params in ({"cursor": "nope"}, {"run_id": "run_x"}, {"endpoint_id": "whe_\x00"}):
        r = await api.client.get("/v1/webhook-deliveries", params=params, headers=h)
        assert r.status_code == 400, (params, r.text)


async def test_the_last_failed_attempt_ends_the_delivery_with_its_reason(
    hooked: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection,
) -> None:
    api = hooked
    _, h, _ = await _tenant(api)
    agent = await api.agent(h)
    # A port nothing listens on: the attempt cannot connect.
    closed = Receiver()
    await closed.server.start()
    url = closed.url
    await closed.server.stop()
    endpoint = await _endpoint(api, h, url)
    async with running_worker(database_dsn, fakes.model.base_url):
        run_id = await api.start(h, agent, "ping")
        await api.events_until_end(h, run_id)

        async def attempted() -> bool:
            return bool(await admin_conn.fetchval("SELECT count(*) FROM webhook_attempts"))

        await until(attempted, "the first attempt recorded", 30)
        await admin_conn.execute(
            "UPDATE endpoint_deliveries SET attempts = $1 - 1, next_at = now()", MAX_ATTEMPTS)

        async def failed() -> bool:
            state = await admin_conn.fetchval("SELECT state FROM endpoint_deliveries")
            return bool(state == "failed")

        await until(failed, "the last attempt recorded", 30)
    last, first = await _history(api, h, endpoint_id=endpoint)
    assert (last["attempt"], last["outcome"], last["error"]) == (
        MAX_ATTEMPTS, "failed", "connect failed")
    assert (first["attempt"], first["outcome"], first["error"]) == (
        1, "retrying", "connect failed")
    assert last["status_code"] is None and last["run_id"] == run_id


async def test_a_tenant_never_sees_anothers_endpoints_or_deliveries(
    hooked: Api, fakes: Fakes, database_dsn: str, receivers: list[Receiver],
) -> None:
    api, receiver = hooked, receivers[0]
    _, a, _ = await _tenant(api, "Alpha")
    _, b, _ = await _tenant(api, "Beta")
    agent = await api.agent(a)
    endpoint = await _endpoint(api, a, receiver.url)
    async with running_worker(database_dsn, fakes.model.base_url):
        run_id = await api.start(a, agent, "ping")
        await api.events_until_end(a, run_id)
        await _received(receiver, 1)

        async def recorded() -> bool:
            return len(await _history(api, a)) == 1

        await until(recorded, "the attempt in A's history", 30)
    missing = "whe_" + "0" * 32
    for path in (f"/v1/webhook-endpoints/{endpoint}", f"/v1/webhook-endpoints/{missing}",
                 "/v1/webhook-endpoints/not-an-id"):
        got = await api.client.get(path, headers=b)
        assert got.status_code == 404
        assert got.json()["detail"] == "No webhook endpoint with this id."
    r = await api.client.delete(f"/v1/webhook-endpoints/{endpoint}", headers=b)
    assert r.status_code == 404
    assert (await api.client.get("/v1/webhook-endpoints", headers=b)).json()["data"] == []
    assert await _history(api, b) == []
    assert await _history(api, b, run_id=run_id) == []
    assert await _history(api, b, endpoint_id=endpoint) == []
    # A's endpoint is still there, and A may remove it.
    assert (await api.client.get(f"/v1/webhook-endpoints/{endpoint}", headers=a)).status_code == 200
    r = await api.client.delete(f"/v1/webhook-endpoints/{endpoint}", headers=a)
    assert r.status_code == 204
    assert (await api.client.get(f"/v1/webhook-endpoints/{endpoint}", headers=a)).status_code == 404
    assert len(await _history(api, a, endpoint_id=endpoint)) == 1  # the history outlives it


async def test_deliveries_go_with_their_run_and_endpoint(
    hooked: Api, fakes: Fakes, database_dsn: str, receivers: list[Receiver],
    admin_conn: asyncpg.Connection,
) -> None:
    api, receiver = hooked, receivers[0]
    _, h, _ = await _tenant(api)
    agent = await api.agent(h)
    await _endpoint(api, h, receiver.url)
    gone = await _endpoint(api, h, receivers[2].url)  # 503 at first: stays pending
    async with running_worker(database_dsn, fakes.model.base_url):
        run_id = await api.start(h, agent, "ping")
        await api.events_until_end(h, run_id)
        await _received(receiver, 1)

        async def recorded() -> bool:
            return len(await _history(api, h, run_id=run_id)) == 2

        await until(recorded, "both first attempts in the history", 30)
    # Removing an endpoint drops its deliveries not yet made.
    assert (await api.client.delete(f"/v1/webhook-endpoints/{gone}", headers=h)).status_code == 204
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM endpoint_deliveries WHERE state = 'pending'") == 0
    # Deleting the run takes its deliveries and their history with it.
    r = await api.client.delete(f"/v1/runs/{run_id}", headers=h)
    assert r.status_code == 204, r.text
    assert await _history(api, h, run_id=run_id) == []
    assert await admin_conn.fetchval("SELECT count(*) FROM endpoint_deliveries") == 0
    assert await admin_conn.fetchval("SELECT count(*) FROM webhook_attempts") == 0


async def test_bad_input_is_a_4xx_and_stores_nothing(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    """``api`` runs with production settings: webhooks reach public addresses only."""
    tenant, h, secret = await _tenant(api)
    agent = await api.agent(h)
    refused = {
        "loopback": ({"url": "http://127.0.0.1:9/hook"}, 422),
        "localhost": ({"url": "http://localhost/hook"}, 422),
        "metadata": ({"url": "http://169.254.169.254/latest"}, 422),
        "private v6": ({"url": "http://[::ffff:10.0.0.1]/hook"}, 422),
        "private": ({"url": "https://10.1.2.3/hook"}, 422),
        "not http": ({"url": "ftp://example.com/hook"}, 400),
        "credentials": ({"url": "https://user:pw@example.com/hook"}, 400),
        "NUL in url": ({"url": "https://example.com/ho\x00ok"}, 400),
        "NUL in description": ({"url": PUBLIC_URL, "description": "a\x00b"}, 400),
        "long description": ({"url": PUBLIC_URL, "description": "x" * 201}, 400),
        "unknown status": ({"url": PUBLIC_URL, "statuses": ["running"]}, 400),
        "no statuses": ({"url": PUBLIC_URL, "statuses": []}, 400),
        "unknown field": ({"url": PUBLIC_URL, "secret": "x"}, 400),
        "ill-formed agent": ({"url": PUBLIC_URL, "agent_ids": ["agt_\x00"]}, 400),
        "missing agent": ({"url": PUBLIC_URL, "agent_ids": [agent, "agt_" + "0" * 32]}, 409),
        "url not a string": ({"url": 5}, 400),
    }
    for what, (body, status) in refused.items():
        r = await api.client.post("/v1/webhook-endpoints", json=body, headers=h)
        assert r.status_code == status, (what, r.text)
        assert r.headers["content-type"].startswith("application/problem+json"), what
    refusal = (await api.client.post("/v1/webhook-endpoints",
                                     json={"url": "http://127.0.0.1:9/hook"}, headers=h)).json()
    assert (refusal["type"], refusal["detail"], refusal["field"]) == (
        "webhook_url_refused", "destination refused: not a public address", "url")
    unknown = (await api.client.post("/v1/webhook-endpoints", json={
        "url": PUBLIC_URL, "agent_ids": ["agt_" + "0" * 32]}, headers=h)).json()
    assert (unknown["type"], unknown["field"]) == ("conflict", "agent_ids")
    assert await admin_conn.fetchval("SELECT count(*) FROM webhook_endpoints") == 0

    # Ten at most: the eleventh is a 409, and nothing more is stored.
    for n in range(10):
        await _endpoint(api, h, f"{PUBLIC_URL}/{n}", statuses=["failed"], agent_ids=[agent])
    r = await api.client.post("/v1/webhook-endpoints", json={"url": PUBLIC_URL}, headers=h)
    assert r.status_code == 409 and r.json()["type"] == "conflict", r.text
    assert await admin_conn.fetchval("SELECT count(*) FROM webhook_endpoints") == 10

    # An overlap out of range, or not an integer: 400, the secret unchanged.
    for body in ({"overlap_seconds": -1}, {"overlap_seconds": 7 * 24 * 3600 + 1},
                 {"overlap_seconds": "60"}, {"overlap_seconds": 1.5},
                 {"overlap_seconds": None}, {"overlap": 60}, [60]):
        r = await api.client.post("/v1/webhook-secret/rotate", json=body, headers=h)
        assert r.status_code == 400, (body, r.text)
    row = await admin_conn.fetchrow(
        "SELECT webhook_secret, webhook_secret_previous FROM tenants WHERE tenant_id = $1",
        tenant)
    assert tuple(row) == (secret, None)
    r = await api.client.post("/v1/webhook-secret/rotate", content=b"\x00",
                              headers={**h, "Content-Type": "application/json"})
    assert r.status_code == 400


async def test_each_route_takes_its_scope(api: Api) -> None:
    tenant, _, _ = await _tenant(api)
    r = await api.client.post(f"/admin/v1/tenants/{tenant}/api-keys", headers=api.operator,
                              json={"name": "reader", "scopes": ["runs:read"]})
    assert r.status_code == 201, r.text
    reader = {"Authorization": f"Bearer {r.json()['api_key']}"}
    for method, path in (("POST", "/v1/webhook-endpoints"), ("GET", "/v1/webhook-endpoints"),
                         ("GET", f"/v1/webhook-endpoints/whe_{'0' * 32}"),
                         ("DELETE", f"/v1/webhook-endpoints/whe_{'0' * 32}"),
                         ("POST", "/v1/webhook-secret/rotate")):
        r = await api.client.request(method, path, headers=reader,
                                     json={"url": PUBLIC_URL} if method == "POST" else None)
        assert r.status_code == 403, (method, path, r.text)
        assert "integrations:manage" in r.json()["detail"]
    assert (await api.client.get("/v1/webhook-deliveries", headers=reader)).status_code == 200


async def test_an_erase_takes_the_endpoints_and_announces_nothing(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    tenant, h, _ = await _tenant(api, "Leaving")
    _, keep, _ = await _tenant(api, "Staying")
    agent = await api.agent(h)
    await _endpoint(api, h, PUBLIC_URL)
    kept = await _endpoint(api, keep, PUBLIC_URL)
    await api.start(h, agent, "still queued")
    r = await api.client.post(f"/admin/v1/tenants/{tenant}/erase", headers=api.operator)
    assert r.status_code == 202, r.text
    assert r.json()["runs_cancelled"] == 1
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM webhook_endpoints WHERE tenant_id = $1", tenant) == 0
    # The run the erase cancelled is announced to no endpoint.
    assert await admin_conn.fetchval("SELECT count(*) FROM endpoint_deliveries") == 0
    assert (await api.client.get(f"/v1/webhook-endpoints/{kept}", headers=keep)).status_code == 200


async def test_a_cancelled_run_is_queued_for_the_endpoints_that_take_it(
    api: Api, admin_conn: asyncpg.Connection,
) -> None:
    """The cancel path ends a run outside a step (set_terminal_status): its endpoint
    deliveries are queued in that transaction too, by the same filters."""
    _, h, _ = await _tenant(api)
    agent = await api.agent(h)
    every = await _endpoint(api, h, f"{PUBLIC_URL}/every")
    await _endpoint(api, h, f"{PUBLIC_URL}/failed", statuses=["failed"])
    cancelled = await _endpoint(api, h, f"{PUBLIC_URL}/cancelled", statuses=["cancelled"],
                                agent_ids=[agent])
    run_id = await api.start(h, agent, "never claimed: no worker")
    r = await api.client.post(f"/v1/runs/{run_id}/cancel", headers=h)
    assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
    queued = await admin_conn.fetch(
        "SELECT endpoint_id, state, next_at <= now() AS due FROM endpoint_deliveries")
    assert sorted((f"whe_{q['endpoint_id'].hex}", q["state"], q["due"]) for q in queued) == \
        sorted([(every, "pending", True), (cancelled, "pending", True)])
