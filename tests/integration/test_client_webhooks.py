"""Webhooks a tenant manages itself, through the SDK and the CLI (issue 41, ADR 0045):
endpoints registered, listed, read and removed; the signing secret rotated with an overlap
(shown once, never in a repr); the delivery history of a real run's end at a real
receiver; and a key without ``integrations:manage`` refused naming the scope."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tenantry.client import (
    AsyncClient,
    Client,
    Forbidden,
    NotFound,
    RotatedWebhookSecret,
    ValidationError,
    WebhookEndpoint,
)
from tenantry.models.loopback import LoopbackServer
from tests.support.api import Api, serving_api
from tests.support.cli import cli
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

PUBLIC_URL = "https://93.184.215.14/hook"  # a public literal: vetted without DNS, never sent to


class Receiver:
    """A real HTTP receiver on loopback that takes every delivery (204)."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.server = LoopbackServer(Starlette(routes=[Route("/hook", self.hook,
                                                             methods=["POST"])]))

    async def hook(self, request: Request) -> Response:
        self.received.append(await request.body())
        return Response(status_code=204)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/hook"


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    made = Receiver()
    await made.server.start()
    yield made
    await made.server.stop()


@pytest.fixture
async def hooked(database_dsn: str) -> AsyncIterator[Api]:
    """The API as a development install runs it: webhooks may go to this machine."""
    async with serving_api(database_dsn, webhook_allow_private=True) as served:
        yield served


async def _delivered_run(api: Api, h: dict[str, str], agent: str, database_dsn: str,
                         fakes: Fakes) -> str:
    """A run that ended, its end delivered to the endpoints and recorded in the history."""
    async with running_worker(database_dsn, fakes.model.base_url):
        run_id = await api.start(h, agent, "ping")
        await api.events_until_end(h, run_id)

        async def recorded() -> bool:
            r = await api.client.get("/v1/webhook-deliveries", headers=h,
                                     params={"run_id": run_id})
            return bool(r.json()["data"])

        await until(recorded, "the delivery in the history", 30)
    return run_id


async def _key(api: Api, tenant: str, *scopes: str) -> str:
    r = await api.client.post(f"/admin/v1/tenants/{tenant}/api-keys", headers=api.operator,
                              json={"scopes": list(scopes)})
    assert r.status_code == 201, r.text
    key: str = r.json()["api_key"]
    return key


async def test_endpoints_the_secret_and_the_history_through_both_clients(
    hooked: Api, receiver: Receiver, fakes: Fakes, database_dsn: str,
) -> None:
    api = hooked
    tenant, h = await api.tenant()
    agent = await api.agent(h)
    key = h["Authorization"].removeprefix("Bearer ")
    async with AsyncClient(api.base_url, key) as client:
        hears = await client.webhook_endpoints.create(receiver.url, description="all ends")
        assert isinstance(hears, WebhookEndpoint)
        assert (hears.url, hears.statuses, hears.agent_ids, hears.description) == (
            receiver.url, None, None, "all ends")
        failures = await client.webhook_endpoints.create(PUBLIC_URL, statuses=["failed"],
                                                         agent_ids=[agent])
        assert (failures.statuses, failures.agent_ids) == (("failed",), (agent,))
        listed = await client.webhook_endpoints.list()
        assert [e.endpoint_id for e in listed] == [hears.endpoint_id, failures.endpoint_id]
        assert await client.webhook_endpoints.get(hears.endpoint_id) == hears
        with pytest.raises(ValidationError) as refused:
            await client.webhook_endpoints.create("ftp://example.com/hook")
        assert refused.value.status == 400

        rotated = await client.webhook_secret.rotate(overlap_seconds=3600)
        assert isinstance(rotated, RotatedWebhookSecret)
        assert rotated.webhook_secret.startswith("whsec_")
        assert rotated.webhook_secret not in repr(rotated)
        assert rotated.previous_valid_until is not None
        assert rotated.previous_valid_until - datetime.now(UTC) <= timedelta(hours=1)
        at_once = await client.webhook_secret.rotate(overlap_seconds=0)
        assert at_once.previous_valid_until is None
        assert at_once.webhook_secret != rotated.webhook_secret

        run_id = await _delivered_run(api, h, agent, database_dsn, fakes)
        [delivery] = await client.webhook_deliveries.list(run_id=run_id)
        assert (delivery.endpoint_id, delivery.url, delivery.attempt, delivery.outcome,
                delivery.status_code, delivery.error) == (
            hears.endpoint_id, receiver.url, 1, "delivered", 204, None)
        assert len(receiver.received) == 1
        to_the_other = await client.webhook_deliveries.list(endpoint_id=failures.endpoint_id)
        assert list(to_the_other) == []  # it hears failed runs only

        await client.webhook_endpoints.delete(failures.endpoint_id)
        with pytest.raises(NotFound):
            await client.webhook_endpoints.get(failures.endpoint_id)
        async with AsyncClient(api.base_url, await _key(api, tenant, "runs:read")) as reader:
            assert [d.delivery_id for d in await reader.webhook_deliveries.list()] == [
                delivery.delivery_id]
            with pytest.raises(Forbidden) as forbidden:
                await reader.webhook_endpoints.list()
            assert forbidden.value.extra["scope"] == "integrations:manage"
            with pytest.raises(Forbidden):
                await reader.webhook_secret.rotate()

    def blocking() -> None:
        with Client(api.base_url, key) as client:
            assert [e.endpoint_id for e in client.webhook_endpoints.list()] == [
                hears.endpoint_id]
            assert client.webhook_endpoints.get(hears.endpoint_id).url == receiver.url
            page = client.webhook_deliveries.list(limit=1)
            assert [d.run_id for d in page] == [run_id] and page.next_cursor is not None
            assert list(client.webhook_deliveries.list(cursor=page.next_cursor)) == []
            # Without an overlap: the platform's default, a day.
            rotated = client.webhook_secret.rotate()
            assert rotated.previous_valid_until is not None
            assert rotated.previous_valid_until - datetime.now(UTC) > timedelta(hours=23)
            client.webhook_endpoints.delete(hears.endpoint_id)
            assert list(client.webhook_endpoints.list()) == []

    await asyncio.to_thread(blocking)


async def test_the_cli_manages_endpoints_rotates_the_secret_and_shows_deliveries(
    hooked: Api, receiver: Receiver, fakes: Fakes, database_dsn: str,
) -> None:
    api = hooked
    tenant, h = await api.tenant()
    agent = await api.agent(h)
    env = {"TENANTRY_URL": api.base_url,
           "TENANTRY_API_KEY": h["Authorization"].removeprefix("Bearer ")}
    code, out, err = await cli("webhooks", "endpoints", "create", receiver.url,
                               "--description", "ops", env=env)
    assert code == 0, err
    fields = dict(line.split("\t", 1) for line in out.splitlines()[1:])
    hears = fields["endpoint_id"]
    assert (fields["url"], fields["statuses"], fields["agents"], fields["description"]) == (
        receiver.url, "every", "every", "ops")
    code, out, err = await cli("webhooks", "endpoints", "create", PUBLIC_URL, "--status",
                               "failed", "--status", "cancelled", "--agent", agent, "--json",
                               env=env)
    assert code == 0, err
    failures = json.loads(out)  # the API's JSON
    assert (failures["statuses"], failures["agent_ids"]) == (["failed", "cancelled"], [agent])
    code, out, _ = await cli("webhooks", "endpoints", "list", env=env)
    [header, *rows] = [line.split("\t") for line in out.splitlines()]
    assert code == 0 and header[:4] == ["endpoint_id", "url", "statuses", "agents"]
    assert [r[:4] for r in rows] == [[hears, receiver.url, "every", "every"],
                                     [failures["endpoint_id"], PUBLIC_URL, "failed cancelled",
                                      agent]]
    code, out, _ = await cli("webhooks", "endpoints", "show", hears, env=env)
    assert code == 0 and f"url\t{receiver.url}" in out.splitlines()
    code, out, _ = await cli("webhooks", "endpoints", "remove", failures["endpoint_id"],
                             env=env)
    assert (code, out.strip()) == (0, f"removed endpoint {failures['endpoint_id']}")

    code, out, err = await cli("webhooks", "rotate-secret", "--overlap", "60", env=env)
    assert code == 0, err
    assert out.strip().startswith("whsec_") and len(out.splitlines()) == 1  # alone: `> file`
    assert "shown this once" in err and "signs too until" in err
    code, out, err = await cli("webhooks", "rotate-secret", "--overlap", "0", env=env)
    assert code == 0 and "stopped signing now" in err

    run_id = await _delivered_run(api, h, agent, database_dsn, fakes)
    code, out, _ = await cli("webhooks", "deliveries", "--run-id", run_id, env=env)
    [header, *rows] = [line.split("\t") for line in out.splitlines()]
    assert code == 0 and header == ["at (UTC)", "run", "endpoint", "url", "attempt", "outcome",
                                    "status", "error"]
    assert [r[1:] for r in rows] == [[run_id, hears, receiver.url, "1", "delivered", "204",
                                      "—"]]

    # Refusals: one line, exit status 2, nothing made.
    code, out, err = await cli("webhooks", "endpoints", "create", "ftp://example.com/h",
                               env=env)
    assert (code, out) == (2, "") and "400" in err and len(err.strip().splitlines()) == 1
    reader = {**env, "TENANTRY_API_KEY": await _key(api, tenant, "runs:read")}
    for args in (("webhooks", "endpoints", "list"), ("webhooks", "rotate-secret"),
                 ("webhooks", "endpoints", "remove", hears)):
        code, out, err = await cli(*args, env=reader)
        assert (code, out) == (2, ""), args
        assert "403" in err and "integrations:manage" in err
        assert len(err.strip().splitlines()) == 1
    code, out, _ = await cli("webhooks", "deliveries", env=reader)  # runs:read is enough
    assert code == 0 and run_id in out
    code, out, _ = await cli("webhooks", "endpoints", "list", env=env)
    assert [line.split("\t")[0] for line in out.splitlines()[1:]] == [hears]
