"""The Python client SDK (``tenantry.client``) against a real platform: the API on a
loopback port, a real worker, the fake model and the MCP test server.

The blocking client runs in a thread (``asyncio.to_thread``): the API under test serves on
this test's event loop. Retries and stream cuts go through real loopback proxies
(tests/support/proxies.py) that refuse, lose answers, and cut connections mid-event."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import orjson
import pytest

from tenantry.client import (
    Agent,
    Approval,
    AsyncClient,
    BudgetExhausted,
    Client,
    ClientError,
    Conflict,
    Event,
    EventPage,
    ModelDelta,
    NotFound,
    Overloaded,
    Page,
    QuotaExceeded,
    Run,
    StartedRun,
    Unauthorized,
    Unavailable,
    ValidationError,
)
from tenantry.errors import TenantryError
from tenantry.testing.fake_model import FakeModelServer
from tests.support.api import Api
from tests.support.proxies import Seen, http_proxy, refuse, tcp_proxy
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

T = TypeVar("T")


async def in_thread(fn: Callable[[], T]) -> T:
    return await asyncio.to_thread(fn)


def port_of(api: Api) -> int:
    port = urlsplit(api.base_url).port
    assert port is not None
    return port


async def tenant_key(api: Api, fakes: Fakes | None = None,
                     name: str = "Acme") -> tuple[str, str]:
    """A new tenant (with the MCP test server registered when ``fakes``) and its API key."""
    tenant, h = await api.tenant(name)
    if fakes is not None:
        await api.tool_server(tenant, fakes.mcp.url)
    return tenant, h["Authorization"].removeprefix("Bearer ")


@pytest.fixture
async def tenant_and_key(api: Api, fakes: Fakes) -> tuple[str, str]:
    return await tenant_key(api, fakes)


@pytest.fixture
def key(tenant_and_key: tuple[str, str]) -> str:
    return tenant_and_key[1]


@pytest.fixture
async def aclient(api: Api, key: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(api.base_url, key) as client:
        yield client


def durable(items: list[Any]) -> list[Event]:
    return [item for item in items if isinstance(item, Event)]


async def whole_log(client: AsyncClient, run_id: str) -> list[Event]:
    """The run's log read as JSON pages (no stream): what a stream must equal."""
    events: list[Event] = []
    after = 0
    while True:
        page = await client.runs.events_page(run_id, after=after, limit=3)
        assert isinstance(page, EventPage)
        events += page.events
        after = page.next_after
        if page.run_ended and len(page.events) < 3:
            return events


def exact_log(events: list[Event], log: list[Event]) -> None:
    """No gap, no repeat, nothing changed: the stream is the log."""
    assert [e.seq for e in events] == list(range(1, len(log) + 1))
    assert events == log  # seq, type, data and the time (SSE and JSON spell it apart)
    assert events[-1].terminal


# -- a run from start to end -----------------------------------------------------------------


def test_the_sync_client_reads_its_settings_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENANTRY_URL", "http://127.0.0.1:1/")
    monkeypatch.setenv("TENANTRY_API_KEY", "tnt_from_env")
    with Client() as client:
        assert client.base_url == "http://127.0.0.1:1"
    monkeypatch.delenv("TENANTRY_API_KEY")
    with pytest.raises(ClientError, match="API key"):
        Client("http://127.0.0.1:1")


async def test_the_sync_client_publishes_an_agent_runs_it_and_streams_it_to_its_end(
        api: Api, fakes: Fakes, worker: object, key: str) -> None:
    def tour() -> tuple[Any, ...]:
        with Client(api.base_url, key) as client:
            agent = client.agents.create(
                "helper", model="scripted", system_prompt="Be brief.", tools=["echo"],
                limits={"max_steps": 5})
            v2 = client.agents.create_version(agent.agent_id, model="scripted",
                                              system_prompt="Be briefer.", tools=["echo"])
            promoted = client.agents.promote(agent.agent_id, 2)  # publishing is not going live
            assert (promoted.version, promoted.previous_version) == (2, 1)
            started = client.runs.create(agent.agent_id, scripted(
                call("echo", text="hi"), answer("done: {last_tool_result}")))
            with client.runs.events(started.run_id) as stream:
                items = list(stream)
                last = stream.last_seq
            run = client.runs.wait(started.run_id, timeout=30)
            return (agent, v2, client.agents.get(agent.agent_id),
                    client.agents.get_version(agent.agent_id, 1), client.agents.list(),
                    started, items, last, run, client.runs.get(started.run_id),
                    client.runs.list(status="finished"),
                    client.runs.events_page(started.run_id))

    (agent, v2, latest, v1, agents, started, items, last, run, again, runs,
     page) = await in_thread(tour)
    assert isinstance(agent, Agent) and agent.version == 1 and agent.name == "helper"
    assert agent.tools == ("echo",) and agent.limits.max_steps == 5
    assert agent.tool_pins["echo"]["server"] == "effects"
    assert (v2.version, latest.version, latest.system_prompt) == (2, 2, "Be briefer.")
    assert v1 == agent
    assert isinstance(agents, Page) and [a.agent_id for a in agents] == [agent.agent_id]
    assert (agents.data[0].latest_version, agents.data[0].live_version) == (2, 2)
    assert (v2.live_version, latest.live_version) == (1, 2)
    assert isinstance(started, StartedRun) and started.status == "queued"
    assert len(started.idempotency_key) == 36  # a uuid4 of its own
    events = durable(items)
    # The answer's text may also have come as it was written (the stream was watched when
    # its call began): each call's deltas come before its reply and join into its text.
    for delta in (i for i in items if isinstance(i, ModelDelta)):
        reply = next(e for e in events if e.seq == delta.after_seq + 1)
        assert reply.type == "ModelReplied" and items.index(delta) < items.index(reply)
        assert "".join(d.text for d in items if isinstance(d, ModelDelta)
                       and d.after_seq == delta.after_seq) == reply.data["text"]
    assert events[0].type == "RunCreated" and events[-1].type == "RunFinished"
    assert last == events[-1].seq == run.last_seq
    assert isinstance(run, Run) and run.ended and run.status == "finished"
    assert run.answer == "done: hi" and run.version == 2 and run.usage.output_tokens > 0
    assert again == run
    assert [r.run_id for r in runs] == [started.run_id] and runs.next_cursor is None
    assert list(page.events) == events and page.run_ended


async def test_the_async_client_waits_streams_and_pages_a_run(
        api: Api, fakes: Fakes, worker: object, aclient: AsyncClient) -> None:
    agent = await aclient.agents.create("helper", model="scripted", system_prompt="Hi.",
                                        tools=["echo"])
    started = await aclient.runs.create(agent.agent_id, scripted(
        {**call("echo", text="x"), "delay_ms": 200}, answer("ok")), priority="batch",
        idempotency_key="my-key-1")
    assert started.idempotency_key == "my-key-1"
    running = await aclient.runs.wait(started.run_id, status="running", timeout=30)
    assert running.status in {"running", "finished"}
    run = await aclient.runs.wait(started.run_id, timeout=30)
    assert run.status == "finished" and run.answer == "ok" and run.priority == "batch"
    # A stream of an ended run replays it from `after` and ends.
    async with aclient.runs.events(started.run_id, after=2) as stream:
        tail = [item async for item in stream]
    log = await whole_log(aclient, started.run_id)
    assert tail == log[2:] and tail[0].seq == 3  # type: ignore[union-attr]
    # Resumed after the run's last event: nothing more, and it ends.
    async with aclient.runs.events(started.run_id, after=run.last_seq) as stream:
        assert [item async for item in stream] == []
    # Stopping early closes the stream (the tenant's stream slots are capped).
    stream = aclient.runs.events(started.run_id)
    first = await anext(stream)
    await stream.aclose()
    assert isinstance(first, Event) and first.seq == 1 and first.type == "RunCreated"

    async def released() -> bool:
        return api.platform.streams.open == 0

    await until(released, "the closed stream's slot is released", 10)


async def test_a_parents_children_are_listed_and_typed(
        api: Api, fakes: Fakes, worker: object, aclient: AsyncClient) -> None:
    kid = await aclient.agents.create("researcher", model="scripted", system_prompt="Look.")
    lead = await aclient.agents.create(
        "lead", model="scripted", system_prompt="Delegate.",
        children=[{"agent_id": kid.agent_id}], limits={"repeat_limit": 4},
        summarize={"after_tokens": 10_000})
    assert [(c.agent_id, c.version, c.name) for c in lead.children] == [
        (kid.agent_id, None, "researcher")]
    assert lead.limits.repeat_limit == 4
    assert lead.summarize == {"after_tokens": 10_000, "keep_last_steps": 2, "model": None}
    child_script = orjson.dumps(scripted(answer("found it"))).decode()
    started = await aclient.runs.create(lead.agent_id, scripted(
        call("start_agent", agent="researcher", input=child_script),
        answer("{last_tool_result}")))
    run = await aclient.runs.wait(started.run_id, timeout=30)
    assert run.answer == "found it" and run.parent_run_id is None
    children = await aclient.runs.children(started.run_id)
    assert [(c.parent_run_id, c.agent_id, c.answer) for c in children] == [
        (started.run_id, kid.agent_id, "found it")]
    assert children.next_cursor is None
    with pytest.raises(NotFound):
        await aclient.runs.children("run_" + "0" * 32)


async def test_a_run_created_to_stream_yields_its_answer_as_it_is_written(
        api: Api, database_dsn: str, aclient: AsyncClient) -> None:
    """`runs.create(stream=True)`: the run's only model call streams although it starts
    before the client's event stream opens; the iterator yields ModelDelta pieces, which
    join into the ModelReplied that follows them."""
    text = "Streaming answers arrive piece by piece, then whole, in the log."
    async with FakeModelServer(chunk_delay_ms=25) as slow, running_worker(
            database_dsn, slow.base_url):
        agent = await aclient.agents.create("talker", model="scripted", system_prompt="Hi.")
        started = await aclient.runs.create(agent.agent_id, scripted(answer(text)),
                                            stream=True)
        async with aclient.runs.events(started.run_id) as stream:
            items = [item async for item in stream]
    deltas = [item for item in items if isinstance(item, ModelDelta)]
    replied = next(item for item in items
                   if isinstance(item, Event) and item.type == "ModelReplied")
    assert len(deltas) > 1 and {d.after_seq for d in deltas} == {1}
    assert "".join(d.text for d in deltas) == text == replied.data["text"]
    assert items.index(deltas[-1]) < items.index(replied)


# -- approvals and cancel -------------------------------------------------------------------


async def test_approvals_are_listed_read_and_decided(
        api: Api, fakes: Fakes, worker: object, aclient: AsyncClient) -> None:
    agent = await aclient.agents.create(
        "refunds", model="scripted", system_prompt="Refund.", tools=["effect"],
        needs_approval=["effect"])
    approved = await aclient.runs.create(agent.agent_id, scripted(
        call("effect", note="refund 1"), answer("{last_tool_result}")))
    denied = await aclient.runs.create(agent.agent_id, scripted(
        call("effect", note="refund 2"), answer("{last_tool_result}")))
    for run_id in (approved.run_id, denied.run_id):
        assert (await aclient.runs.wait(run_id, status="waiting", timeout=30)).status \
            == "waiting"
    pending = await aclient.approvals.list(status="pending")
    assert len(pending) == 2 and all(isinstance(a, Approval) for a in pending)
    by_run = {a.run_id: a for a in pending}
    first = await aclient.approvals.get(by_run[approved.run_id].approval_id)
    assert first == by_run[approved.run_id]
    assert first.tool == "effect" and first.arguments == {"note": "refund 1"}
    assert first.status == "pending" and first.decided_at is None
    assert first.key.startswith(approved.run_id)

    decided = await aclient.approvals.approve(first.approval_id)
    assert decided.status == "approved" and decided.decided_at is not None
    refused = await aclient.approvals.decide(by_run[denied.run_id].approval_id, "deny",
                                             comment="too much")
    assert refused.status == "denied" and refused.comment == "too much"
    with pytest.raises(Conflict) as twice:
        await aclient.approvals.decide(first.approval_id, "deny")
    assert twice.value.status == 409 and twice.value.type == "conflict"

    done = await aclient.runs.wait(approved.run_id, timeout=30)
    assert done.status == "finished" and "applied refund 1" in str(done.answer)
    no = await aclient.runs.wait(denied.run_id, timeout=30)
    assert no.status == "finished" and "too much" in str(no.answer)
    assert [a.status for a in await aclient.approvals.list(status="pending")] == []
    assert len(await aclient.approvals.list(status="approved")) == 1
    assert fakes.mcp.stats()["duplicate_effects"] == 0


async def test_cancel_stops_a_running_run_and_a_finished_run_cannot_be_cancelled(
        api: Api, fakes: Fakes, worker: object, aclient: AsyncClient) -> None:
    agent = await aclient.agents.create("slow", model="scripted", system_prompt="Wait.")
    started = await aclient.runs.create(agent.agent_id, scripted(
        {"text": "late", "delay_ms": 1500}))
    await aclient.runs.wait(started.run_id, status="running", timeout=30)
    asked = await aclient.runs.cancel(started.run_id)
    assert asked.cancel_requested and asked.status == "running"
    assert (await aclient.runs.cancel(started.run_id)).cancel_requested  # twice: no change
    async with aclient.runs.events(started.run_id) as stream:
        types = [e.type async for e in stream if isinstance(e, Event)]
    assert types == ["RunCreated", "CancelRequested", "ModelReplied", "RunCancelled"]
    run = await aclient.runs.wait(started.run_id, timeout=5)
    assert run.status == "cancelled"
    assert (await aclient.runs.cancel(started.run_id)) == run  # cancelled already: the same
    quick = await aclient.runs.create(agent.agent_id, scripted(answer("done")))
    assert (await aclient.runs.wait(quick.run_id, timeout=30)).status == "finished"
    with pytest.raises(Conflict) as ended:
        await aclient.runs.cancel(quick.run_id)
    assert ended.value.extra["run_status"] == "finished"


# -- typed errors -----------------------------------------------------------------------------


async def test_error_answers_are_typed_exceptions(
        api: Api, fakes: Fakes, aclient: AsyncClient) -> None:
    agent = await aclient.agents.create("helper", model="scripted", system_prompt="Hi.")
    started = await aclient.runs.create(agent.agent_id, "hello", idempotency_key="k-1")

    # Another tenant's run, agent and approval look exactly like missing ones.
    _, other_key = await tenant_key(api, name="Other")
    async with AsyncClient(api.base_url, other_key) as other:
        with pytest.raises(NotFound) as missing:
            await other.runs.get(started.run_id)
        for attempt in (other.runs.cancel(started.run_id),
                        other.runs.events_page(started.run_id),
                        other.agents.get(agent.agent_id),
                        other.runs.create(agent.agent_id, "x"),
                        other.approvals.get("apr_" + "0" * 32)):
            with pytest.raises(NotFound):
                await attempt
        with pytest.raises(NotFound):
            async for _ in other.runs.events(started.run_id):
                pass
    error = missing.value
    assert (error.status, error.type, error.problem["status"]) == (404, "not_found", 404)
    assert isinstance(error, ClientError) and isinstance(error, TenantryError)
    assert error.retry_after is None and error.detail

    # Validation: the platform's 400 with the field named.
    with pytest.raises(ValidationError) as invalid:
        await aclient.runs.create(agent.agent_id, None)
    assert invalid.value.status == 400 and invalid.value.type == "validation_error"
    assert any("input" in e["loc"] for e in invalid.value.errors)
    with pytest.raises(ValidationError):
        await aclient.agents.create("bad", model="scripted", system_prompt="x",
                                    limits={"max_steps": 0})
    with pytest.raises(ValidationError):
        await aclient.runs.list(cursor="not-a-cursor")

    # The same key: the same body is the same run; another body is a conflict.
    again = await aclient.runs.create(agent.agent_id, "hello", idempotency_key="k-1")
    assert again.run_id == started.run_id
    with pytest.raises(Conflict) as reused:
        await aclient.runs.create(agent.agent_id, "another body", idempotency_key="k-1")
    assert reused.value.status == 409 and reused.value.extra["run_id"] == started.run_id

    # Ids are quoted into paths: no id reaches another route.
    with pytest.raises(NotFound):
        await aclient.runs.get("../agents")

    async with AsyncClient(api.base_url, "tnt_not_a_key") as stranger:
        with pytest.raises(Unauthorized) as refused:
            await stranger.runs.list()
    assert refused.value.status == 401


# -- retries ----------------------------------------------------------------------------------


def _keys(seen: list[Seen]) -> set[str]:
    return {s.headers["idempotency-key"] for s in seen}


async def test_a_refused_start_is_retried_after_retry_after_with_the_same_key(
        api: Api, fakes: Fakes, key: str) -> None:
    # The first two starts are refused as an overloaded cell refuses them; the third goes on.
    def rule(method: str, path: str, before: int) -> Any:
        if (method, path) == ("POST", "/v1/runs") and before < 2:
            return refuse(503, "overloaded", retry_after=1)
        return None

    async with http_proxy(port_of(api), rule) as proxy, AsyncClient(api.base_url, key) as direct:
        agent = await direct.agents.create("helper", model="scripted", system_prompt="Hi.")

        def start() -> StartedRun:
            with Client(proxy.url, key, max_retries=3) as client:
                return client.runs.create(agent.agent_id, "once")

        started = await in_thread(start)
        runs = await direct.runs.list()
    attempts = proxy.requests("POST", "/v1/runs")
    assert [a.outcome for a in attempts] == ["refused", "refused", "forwarded"]
    assert _keys(attempts) == {started.idempotency_key}
    # Each retry waited at least the Retry-After the refusal asked for.
    assert all(b.at - a.at >= 1.0 for a, b in itertools.pairwise(attempts))
    assert [r.run_id for r in runs] == [started.run_id]


async def test_a_lost_answer_is_retried_with_the_same_key_and_makes_one_run(
        api: Api, fakes: Fakes, key: str) -> None:
    # The platform gets the first start and makes the run; its answer never arrives.
    def rule(method: str, path: str, before: int) -> Any:
        return "lose" if (method, path) == ("POST", "/v1/runs") and before == 0 else None

    async with http_proxy(port_of(api), rule) as proxy, AsyncClient(api.base_url, key) as direct:
        agent = await direct.agents.create("helper", model="scripted", system_prompt="Hi.")
        async with AsyncClient(proxy.url, key) as client:
            started = await client.runs.create(agent.agent_id, {"n": 1})
        runs = await direct.runs.list()
    attempts = proxy.requests("POST", "/v1/runs")
    assert [a.outcome for a in attempts] == ["answer lost", "forwarded"]
    assert [a.upstream_status for a in attempts] == [202, 202]
    assert _keys(attempts) == {started.idempotency_key}
    assert [r.run_id for r in runs] == [started.run_id]


async def test_what_is_not_safe_to_repeat_or_not_transient_is_raised_at_once(
        api: Api, fakes: Fakes, tenant_and_key: tuple[str, str]) -> None:
    tenant, key = tenant_and_key
    async with AsyncClient(api.base_url, key) as direct:
        agent = await direct.agents.create("helper", model="scripted", system_prompt="Hi.")
        await direct.runs.create(agent.agent_id, "queued, no worker")
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/policy", headers=api.operator,
                             json={"max_queued": 1})
    assert r.status_code == 200, r.text

    def rule(method: str, path: str, before: int) -> Any:
        if path == "/v1/agents":
            return refuse(503, None, retry_after=1)  # a proxy's plain 503
        return None

    async with http_proxy(port_of(api), rule) as proxy, \
            AsyncClient(proxy.url, key, max_retries=3) as client:
        # The tenant's own limit: not transient, so not retried.
        with pytest.raises(QuotaExceeded) as quota:
            await client.runs.create(agent.agent_id, "one too many")
        # A new agent is not safe to send twice: refused once, raised once.
        with pytest.raises(Unavailable) as unavailable:
            await client.agents.create("again", model="scripted", system_prompt="Hi.")
    assert len(proxy.requests("POST", "/v1/runs")) == 1
    assert quota.value.status == 429 and quota.value.extra["limit"] == "max_queued"
    assert quota.value.retryable  # the platform's meaning: it may work later
    assert len(proxy.requests("POST", "/v1/agents")) == 1
    assert unavailable.value.status == 503 and unavailable.value.type == "http_error"
    assert unavailable.value.retry_after == 1.0
    assert not issubclass(BudgetExhausted, Unavailable)


async def test_retries_stop_at_max_retries(api: Api, fakes: Fakes, key: str) -> None:
    def rule(method: str, path: str, before: int) -> Any:
        return refuse(503, "overloaded", retry_after=0) if path == "/v1/runs" else None

    async with http_proxy(port_of(api), rule) as proxy, \
            AsyncClient(proxy.url, key, max_retries=2) as client:
        with pytest.raises(Overloaded) as refused:
            await client.runs.list()
    assert len(proxy.requests("GET", "/v1/runs")) == 3
    assert refused.value.retry_after == 0.0


# -- streams cut mid-run ----------------------------------------------------------------------

STEPS = 8


def _long_run() -> dict[str, object]:
    """A run of about 2 s with some twenty events, one slow step in the middle."""
    steps: list[dict[str, object]] = [
        {**call("echo", text=f"step {i}"), "delay_ms": 600 if i == 3 else 60}
        for i in range(STEPS)]
    return scripted(*steps, answer("done"))


async def _kill_repeatedly(proxy: Any, every: float, done: asyncio.Event) -> int:
    kills = 0
    while not done.is_set():
        await asyncio.sleep(every)
        kills += proxy.kill()
    return kills


@pytest.mark.parametrize("cut_after_events", [1, 2])
async def test_the_sync_stream_survives_its_connection_cut_mid_run(
        api: Api, fakes: Fakes, worker: object, key: str, aclient: AsyncClient,
        cut_after_events: int) -> None:
    agent = await aclient.agents.create("long", model="scripted", system_prompt="Go.",
                                        tools=["echo"], limits={"max_steps": 20})
    async with tcp_proxy(port_of(api), cut_after_events=cut_after_events) as proxy:
        started = await aclient.runs.create(agent.agent_id, _long_run())
        done = asyncio.Event()
        killer = asyncio.ensure_future(_kill_repeatedly(proxy, 0.25, done))

        def follow() -> list[Any]:
            with Client(proxy.url, key) as client:
                return list(client.runs.events(started.run_id))

        try:
            items = await in_thread(follow)
        finally:
            done.set()
            await killer
    events = durable(items)
    exact_log(events, await whole_log(aclient, started.run_id))
    assert len(events) >= 2 * STEPS + 2
    # It was cut many times, half-way into events and at any moment, and resumed each time.
    assert proxy.connections >= len(events) // (cut_after_events + 1)
    assert proxy.mid_event_cuts >= 3 and proxy.kills >= 1


async def test_the_async_stream_survives_its_connection_cut_mid_run(
        api: Api, fakes: Fakes, worker: object, key: str, aclient: AsyncClient) -> None:
    agent = await aclient.agents.create("long", model="scripted", system_prompt="Go.",
                                        tools=["echo"], limits={"max_steps": 20})
    async with tcp_proxy(port_of(api), cut_after_events=2) as proxy, \
            AsyncClient(proxy.url, key) as client:
        started = await client.runs.create(agent.agent_id, _long_run())
        done = asyncio.Event()
        killer = asyncio.ensure_future(_kill_repeatedly(proxy, 0.3, done))
        try:
            items = [item async for item in client.runs.events(started.run_id)]
        finally:
            done.set()
            await killer
    events = durable(items)
    exact_log(events, await whole_log(aclient, started.run_id))
    assert proxy.connections >= len(events) // 3
    assert proxy.mid_event_cuts >= 3 and proxy.kills >= 1
