"""Webhook URLs and receivers as a hostile tenant tries them: a webhook URL that rebinds to
our loopback or spells an internal address, and receivers that answer slowly or without
end to stall the worker that delivers to them."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
from collections.abc import AsyncIterator, Sequence

import asyncpg
import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tenantry.ids import RunId
from tenantry.models.loopback import LoopbackServer
from tenantry.runs.webhooks import (
    INTERRUPTED,
    MAX_ATTEMPTS,
    REFUSED_NOT_PUBLIC,
    Refused,
    WebhookLimits,
    WebhookSender,
    destination,
)
from tenantry.sandbox.egress.policy import IPAddress
from tests.support.api import Api
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

PUBLIC = ipaddress.ip_address("93.184.215.14")  # never connected to: see StandIn
INTERNAL_FORMS = ("::ffff:127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::", "::127.0.0.1",
                  "fec0::1", "100.64.0.1", "169.254.169.254")


class Receiver:
    """A real HTTP receiver on loopback, answering 204."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.server = LoopbackServer(Starlette(routes=[
            Route("/hook", self.hook, methods=["POST"])]))

    async def hook(self, request: Request) -> Response:
        self.received.append((dict(request.headers), await request.body()))
        return Response(status_code=204)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/hook"


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.server.start()
    yield r
    await r.server.stop()


class Rebinding:
    """A tenant's DNS: a public address for the first question, loopback after it."""

    def __init__(self) -> None:
        self.questions: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[IPAddress]:
        self.questions.append(host)
        if len(self.questions) == 1:
            return [PUBLIC]
        return [ipaddress.ip_address("127.0.0.1")]


class StandIn(httpx2.AsyncBaseTransport):
    """The network as the sender sees it: requests to the public address are answered here
    (this machine must not send traffic to it); every other one goes out for real."""

    def __init__(self) -> None:
        self.public: list[httpx2.Request] = []
        self._real = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.host == str(PUBLIC):
            self.public.append(request)
            return httpx2.Response(204, stream=httpx2.ByteStream(b""))
        return await self._real.handle_async_request(request)

    async def aclose(self) -> None:
        await self._real.aclose()


class Trickle:
    """A receiver that reads the request, then answers one byte at a time, slowly, never
    finishing (``endless=False``); or answers 200 at once with a body that never ends."""

    def __init__(self, *, endless: bool = False) -> None:
        self.endless = endless
        self.open = 0
        self.most_open = 0
        self.connections = 0
        self.closed = 0
        self.sent = 0
        self.connected = asyncio.Event()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await self._server.wait_closed()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/hook"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        self.connected.set()
        try:
            await reader.readuntil(b"\r\n\r\n")
            if self.endless:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                             b"Content-Length: 10000000000\r\n\r\n")
                while True:
                    writer.write(b"x" * 65536)
                    await writer.drain()
                    self.sent += 65536
            else:
                for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n":
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(0.5)  # the attack: a byte now and then, never done
                await asyncio.sleep(3600)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open -= 1
            self.closed += 1
            writer.close()


@pytest.fixture
async def trickle() -> AsyncIterator[Trickle]:
    t = Trickle()
    await t.start()
    yield t
    await t.stop()


@pytest.fixture(params=["trickle", "endless"])
async def slow(request: pytest.FixtureRequest) -> AsyncIterator[Trickle]:
    t = Trickle(endless=request.param == "endless")
    await t.start()
    yield t
    await t.stop()


async def _events(api: Api, h: dict[str, str], run_id: str) -> list[dict[str, object]]:
    page = await api.client.get(f"/v1/runs/{run_id}/events",
                                headers={**h, "Accept": "application/json"})
    events: list[dict[str, object]] = page.json()["events"]
    return events


async def _webhook_event(api: Api, h: dict[str, str], run_id: str,
                         kind: str) -> dict[str, object]:
    found: list[dict[str, object]] = []

    async def recorded() -> bool:
        found[:] = [e for e in await _events(api, h, run_id) if e["type"] == kind]
        return bool(found)

    await until(recorded, f"{kind} recorded for {run_id}", 30)
    return found[0]


# -- item 1: SSRF ---------------------------------------------------------------------------


async def test_a_rebinding_name_does_not_reach_loopback(
    api: Api, fakes: Fakes, database_dsn: str, receiver: Receiver
) -> None:
    dns, network = Rebinding(), StandIn()
    _, h = await api.tenant()
    agent = await api.agent(h)
    url = f"http://hooks.rebind.test:{receiver.port}/hook"
    async with running_worker(
        database_dsn, fakes.model.base_url,
        webhooks=lambda db: WebhookSender(db, resolver=dns, transport=network),
    ):
        run_id = await api.start(h, agent, "ping", webhook=url)
        delivered = await _webhook_event(api, h, run_id, "WebhookDelivered")
    # The one answer that was vetted is the one connected to; loopback got nothing.
    assert receiver.received == []
    assert dns.questions == ["hooks.rebind.test"]
    [sent] = network.public
    assert sent.url.host == str(PUBLIC)
    assert sent.headers["host"] == f"hooks.rebind.test:{receiver.port}"
    assert sent.extensions["sni_hostname"] == "hooks.rebind.test"
    assert delivered["data"]["url"] == url  # type: ignore[index]


@pytest.mark.parametrize("form", INTERNAL_FORMS)
async def test_every_internal_address_form_is_refused(form: str) -> None:
    async def answers(host: str, port: int) -> Sequence[IPAddress]:
        return [PUBLIC, ipaddress.ip_address(form)]  # one bad answer is enough

    for url, resolver in ((f"http://[{form}]:8080/hook" if ":" in form
                           else f"http://{form}:8080/hook", None),
                          ("https://hooks.tenant.test/hook", answers)):
        with pytest.raises(Refused) as refused:
            await destination(url, allow_private=False, resolver=resolver)
        # The tenant's text names no address; our log's detail does.
        assert refused.value.reason == REFUSED_NOT_PUBLIC
        assert str(ipaddress.ip_address(form)) in refused.value.detail


async def test_internal_literals_reach_no_receiver_and_the_tenant_sees_no_address(
    api: Api, fakes: Fakes, database_dsn: str, receiver: Receiver,
    admin_conn: asyncpg.Connection,
) -> None:
    _, h = await api.tenant()
    agent = await api.agent(h)
    # Spellings of our loopback receiver that is_global alone lets through.
    urls = [f"http://[{form}]:{receiver.port}/hook"
            for form in ("::ffff:127.0.0.1", "64:ff9b::7f00:1", "::127.0.0.1")]
    async with running_worker(database_dsn, fakes.model.base_url,
                              webhooks=lambda db: WebhookSender(db)):
        runs = [await api.start(h, agent, "ping", webhook=url) for url in urls]
        for run_id in runs:
            await api.events_until_end(h, run_id)

        async def attempted() -> bool:
            n = await admin_conn.fetchval(
                "SELECT count(*) FROM runs WHERE webhook_attempts >= 1")
            return bool(n == len(runs))

        await until(attempted, "every webhook attempted once", 30)
        # Straight to the last attempt: its outcome is what the tenant is shown.
        await admin_conn.execute(
            "UPDATE runs SET webhook_attempts = $1 - 1, webhook_next_at = now()",
            MAX_ATTEMPTS)
        failed = [await _webhook_event(api, h, run_id, "WebhookFailed") for run_id in runs]
    assert receiver.received == []
    for event in failed:
        data = dict(event["data"])  # type: ignore[call-overload]
        assert data.pop("url") in urls  # the tenant's own URL; nothing else of it
        assert data.pop("status_code", None) is None
        assert data == {"attempts": MAX_ATTEMPTS, "error": REFUSED_NOT_PUBLIC}


# -- item 2: stalls ---------------------------------------------------------------------------


async def _waiting_approval(api: Api, fakes: Fakes) -> tuple[dict[str, str], str]:
    tenant, h = await api.tenant("Approver")
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["effect"], needs_approval=["effect"])
    await api.start(h, agent, scripted(call("effect", note="refund"), answer("done")))
    found: list[str] = []

    async def pending() -> bool:
        page = (await api.client.get("/v1/approvals", params={"status": "pending"},
                                     headers=h)).json()
        found[:] = [a["approval_id"] for a in page["data"]]
        return bool(found)

    await until(pending, "the run asks for an approval", 30)
    return h, found[0]


FAST = WebhookLimits(deadline_seconds=3.0, per_tenant=2, total=3)


async def test_a_slow_receiver_does_not_stop_approvals_expiring(
    api: Api, fakes: Fakes, database_dsn: str, admin_conn: asyncpg.Connection, slow: Trickle,
) -> None:
    async with running_worker(
        database_dsn, fakes.model.base_url,
        webhooks=lambda db: WebhookSender(db, allow_private=True, limits=FAST),
    ):
        approver, approval = await _waiting_approval(api, fakes)
        _, h = await api.tenant("Hostile")
        agent = await api.agent(h)
        run_id = await api.start(h, agent, "ping", webhook=slow.url)
        await asyncio.wait_for(slow.connected.wait(), 30)
        # While the delivery is in flight, the approval's time runs out.
        await admin_conn.execute("UPDATE approvals SET expires_at = now() - interval '1 s'")

        async def expired() -> bool:
            got = await api.client.get(f"/v1/approvals/{approval}", headers=approver)
            return bool(got.json()["status"] == "expired")

        await until(expired, "the approval expired on the same worker", 20)
        if not slow.endless:
            # The attempt ends at its deadline, the connection is closed, a retry is due.
            async def given_up() -> bool:
                row = await admin_conn.fetchrow(
                    "SELECT webhook_state, webhook_attempts, webhook_next_at > now() AS later"
                    " FROM runs WHERE webhook_url = $1", slow.url)
                return bool(slow.closed >= 1 and row["webhook_state"] == "pending"
                            and row["webhook_attempts"] == 1 and row["later"])

            await until(given_up, "the slow attempt ended and a retry was scheduled", 30)
        else:
            # Only the status counts: the body is cut off and the delivery recorded.
            delivered = await _webhook_event(api, h, run_id, "WebhookDelivered")
            assert delivered["data"]["status_code"] == 200  # type: ignore[index]
            await until(lambda: _true(slow.closed >= 1), "the endless body was cut off", 30)


async def _true(value: bool) -> bool:
    return value


async def test_a_delivery_past_its_attempts_is_never_claimed_again(
    api: Api, fakes: Fakes, database_dsn: str, receiver: Receiver,
    admin_conn: asyncpg.Connection,
) -> None:
    _, h = await api.tenant()
    agent = await api.agent(h)
    async with running_worker(database_dsn, fakes.model.base_url):
        spent = await api.start(h, agent, "ping", webhook=receiver.url)
        await _webhook_event(api, h, spent, "WebhookDelivered")
        # As if the worker of the last attempt had died: still pending, no attempts left.
        await admin_conn.execute(
            "UPDATE runs SET webhook_state = 'pending', webhook_attempts = $1,"
            " webhook_next_at = now() - interval '1 s'", MAX_ATTEMPTS)
        before = len(receiver.received)
        other = await api.start(h, agent, "pong", webhook=receiver.url)
        await _webhook_event(api, h, other, "WebhookDelivered")  # claims went on meanwhile
        # Not sent again: recorded as failed, once.
        failed = await _webhook_event(api, h, spent, "WebhookFailed")
    assert [json.loads(body)["run_id"] for _, body in receiver.received[before:]] == [other]
    assert failed["data"]["attempts"] == MAX_ATTEMPTS  # type: ignore[index]
    assert failed["data"]["error"] == INTERRUPTED  # type: ignore[index]
    row = await admin_conn.fetchrow(
        "SELECT webhook_attempts, webhook_state FROM runs WHERE run_id = $1",
        RunId.parse(spent).uuid)
    assert tuple(row) == (MAX_ATTEMPTS, "failed")


async def test_one_tenants_slow_webhooks_do_not_take_every_slot(
    api: Api, fakes: Fakes, database_dsn: str, receiver: Receiver, trickle: Trickle,
    admin_conn: asyncpg.Connection,
) -> None:
    _, hostile = await api.tenant("Hostile")
    slow_agent = await api.agent(hostile)
    _, h = await api.tenant("Neighbour")
    agent = await api.agent(h)
    async with running_worker(
        database_dsn, fakes.model.base_url,
        webhooks=lambda db: WebhookSender(db, allow_private=True, limits=FAST),
    ):
        slow_runs = [await api.start(hostile, slow_agent, f"slow {i}", webhook=trickle.url)
                     for i in range(6)]
        for run_id in slow_runs:
            await api.events_until_end(hostile, run_id)
        await until(lambda: _true(trickle.open >= FAST.per_tenant),
                    "the hostile tenant's deliveries in flight", 30)
        neighbour = await api.start(h, agent, "ping", webhook=receiver.url)
        await _webhook_event(api, h, neighbour, "WebhookDelivered")
    assert trickle.most_open <= FAST.per_tenant
    assert [json.loads(body)["run_id"] for _, body in receiver.received] == [neighbour]
