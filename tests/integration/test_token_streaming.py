"""Live token streaming (ADR 0030) end to end: a real worker loop calls the fake model server
in its streaming mode (OpenAI's chunks, Anthropic's events), the reply's text crosses to the
API process through Postgres notifications, and an SSE client sees it as ``model_delta``
events before the step's durable ``ModelReplied`` — whose text their concatenation is.
Nothing of it is in the log: a client that connects after the step sees the durable
events only, and a stream cut mid-way leaves no partial reply.

A call streams when a listener is known as it starts; a run's first model call is made
within milliseconds of its creation, before a client that opens the stream after creating
the run is heard of. So the runs here begin with a short tool call (`slow`, SLOW_S), during
which the client's stream is open and announced, and answer in their second model call."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest

from tenantry.runs.worker import Worker
from tenantry.testing.fake_model import FakeModelServer, Provider
from tests.support.api import Api, serving_api
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

#: Between two pieces of a streamed reply: slow enough that a client reads it mid-reply.
PIECE_MS = 25
#: The first step's tool call: the client's stream is open and announced by its end.
SLOW_S = 0.3
TEXT = ("The quick brown fox jumps over the lazy dog; then, having nothing better to do, "
        "it jumps back over the dog again, and the dog — unbothered — sleeps on.")


@dataclass
class Rig:
    fake: FakeModelServer
    worker: Worker
    fakes: Fakes

    async def caller(self, api: Api) -> tuple[dict[str, str], str]:
        """A tenant's headers and an agent that may call the `slow` tool."""
        tenant, h = await api.tenant()
        await api.tool_server(tenant, self.fakes.mcp.url)
        return h, await api.agent(h, tools=["slow"])


def after_a_tool(text: str) -> dict[str, object]:
    """A run's input: a short tool call first, then ``text`` as the answer."""
    return scripted(call("slow", seconds=SLOW_S), answer(text))


@pytest.fixture(params=["openai", "anthropic"])
async def rig(request: pytest.FixtureRequest, api: Api, database_dsn: str,
              fakes: Fakes) -> AsyncIterator[Rig]:
    """A worker whose model speaks the format asked for, streaming a piece every
    PIECE_MS."""
    provider: Provider = request.param
    async with FakeModelServer(provider=provider, chunk_delay_ms=PIECE_MS) as fake:
        if provider == "openai":  # the worker's configured account
            async with running_worker(database_dsn, fake.base_url) as worker:
                yield Rig(fake, worker, fakes)
        else:
            await api.model_account("claude", fake.base_url, provider="anthropic")
            async with running_worker(database_dsn, None) as worker:
                yield Rig(fake, worker, fakes)


async def pieces_out(fake: FakeModelServer, pieces: int) -> None:
    """Until the fake has written that many pieces of its streamed replies."""

    async def written() -> bool:
        return fake.pieces_written >= pieces

    await until(written, f"{pieces} pieces written", 20)


def deltas_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "model_delta"]


def check_deltas_precede_their_replies(events: list[dict[str, Any]]) -> None:
    """Each step's deltas come after the durable event they follow (``after_seq``) and
    before its ModelReplied, and join into that reply's text exactly."""
    last_seq, texts = 0, []
    for event in events:
        if event["type"] == "model_delta":
            assert event["after_seq"] == last_seq, event
            assert set(event) == {"type", "after_seq", "text"}
            texts.append(event["text"])
            continue
        if event["type"] == "ModelReplied":
            assert "".join(texts) == (event["data"]["text"] or "")
        texts = []
        last_seq = event["seq"]


async def test_a_listener_reads_the_reply_as_it_streams(api: Api, rig: Rig) -> None:
    h, agent = await rig.caller(api)
    run_id = await api.start(h, agent, after_a_tool(TEXT))
    events = await api.events_until_end(h, run_id, deltas=True)
    durable = [e["type"] for e in events if e["type"] != "model_delta"]
    assert durable == ["RunCreated", "ModelReplied", "ToolCompleted", "ModelReplied",
                       "RunFinished"]
    deltas = deltas_of(events)
    assert len(deltas) > 1  # it came in pieces, as it was written
    assert {d["after_seq"] for d in deltas} == {3}  # after the ToolCompleted
    assert "".join(d["text"] for d in deltas) == TEXT
    check_deltas_precede_their_replies(events)
    replied = [e for e in events if e["type"] == "ModelReplied"][-1]
    assert replied["data"]["text"] == TEXT
    assert replied["data"]["usage"]["input_tokens"] == rig.fake.usage_log[1].prompt_tokens
    assert rig.fake.requests[1].json()["stream"] is True
    # Nothing of it is in the log, and a client that comes after the step sees only that.
    after = await api.events_until_end(h, run_id, deltas=True)
    assert after == [e for e in events if e["type"] != "model_delta"]
    page = (await api.client.get(f"/v1/runs/{run_id}/events",
                                 headers={**h, "Accept": "application/json"})).json()
    assert [e["type"] for e in page["events"]] == durable


async def test_a_client_connecting_after_a_step_sees_it_durable_then_the_next_live(
    api: Api, rig: Rig
) -> None:
    """A client connecting during the tool call (its ModelReplied in the log, nothing
    streaming) sees the durable events so far, then the next call's text as it streams."""
    h, agent = await rig.caller(api)
    run_id = await api.start(h, agent, scripted(call("slow", seconds=1.0), answer(TEXT)))

    async def tool_called() -> bool:
        return int((await api.run(h, run_id))["last_seq"]) >= 2

    await until(tool_called, "the tool call's ModelReplied", 20)
    events = await api.events_until_end(h, run_id, deltas=True)
    assert [e["type"] for e in events if e["type"] != "model_delta"] == [
        "RunCreated", "ModelReplied", "ToolCompleted", "ModelReplied", "RunFinished"]
    deltas = deltas_of(events)
    assert deltas and {d["after_seq"] for d in deltas} == {3}
    check_deltas_precede_their_replies(events)
    assert events.index(deltas[0]) > 2  # after the tool step's events


async def test_a_client_joining_mid_reply_gets_what_it_missed(
    api: Api, database_dsn: str, rig: Rig
) -> None:
    """The first client watches from the start on one API process; a second joins on
    another API process once the reply is half written: each reads the whole text (the
    worker sends a newly watching process the call's text so far)."""
    h, agent = await rig.caller(api)
    long_text = " ".join(f"word{i}" for i in range(60))  # ~1.5 s at PIECE_MS a word
    run_id = await api.start(h, agent, after_a_tool(long_text))
    first = asyncio.create_task(api.events_until_end(h, run_id, deltas=True))
    await pieces_out(rig.fake, 25)
    async with serving_api(database_dsn) as other:
        late = await other.events_until_end(h, run_id, deltas=True)
    early = await first
    for events in (early, late):
        assert "".join(d["text"] for d in deltas_of(events)) == long_text
        check_deltas_precede_their_replies(events)
    # The late one came mid-reply: its first delta held the text written before it came.
    assert len(deltas_of(late)[0]["text"]) > len(deltas_of(early)[0]["text"])


async def test_a_stream_cut_mid_way_leaves_no_partial_reply(
    api: Api, rig: Rig, admin_conn: asyncpg.Connection
) -> None:
    """The provider closes the connection after a few pieces: the call failed, nothing of
    it is saved, and the retried call streams again; its reply is saved once, billed
    once."""
    h, agent = await rig.caller(api)
    run_id = await api.start(h, agent, after_a_tool(TEXT))
    watching = asyncio.create_task(api.events_until_end(h, run_id, deltas=True))

    async def tool_called() -> bool:
        return int((await api.run(h, run_id))["last_seq"]) >= 2

    await until(tool_called, "the tool call's ModelReplied", 20)
    rig.fake.cut_next(1, after_pieces=4)  # the next streamed reply: the answer's
    events = await watching
    durable = [e for e in events if e["type"] != "model_delta"]
    assert [e["type"] for e in durable] == ["RunCreated", "ModelReplied", "ToolCompleted",
                                            "ModelReplied", "RunFinished"]
    assert durable[3]["data"]["text"] == TEXT
    # The retried attempt streamed again from its start, after what the cut one had said:
    # the preview ends with the whole reply.
    joined = "".join(d["text"] for d in deltas_of(events))
    assert joined.endswith(TEXT) and len(joined) > len(TEXT)
    assert [r.json().get("stream") for r in rig.fake.requests[1:]] == [True, True]
    assert len(rig.fake.usage_log) == 2  # the tool call's reply and the answer, once
    assert await admin_conn.fetchval("SELECT count(*) FROM usage_facts") == 2
    replies = await admin_conn.fetchval(
        "SELECT count(*) FROM run_events WHERE type = 'ModelReplied'")
    assert replies == 2


async def test_a_worker_stopping_mid_stream_leaves_the_call_to_the_next(
    api: Api, database_dsn: str, admin_conn: asyncpg.Connection, fakes: Fakes
) -> None:
    """The worker goes away while the provider is still streaming (its call cancelled
    mid-reply, the run handed back): no partial reply in the log; the next worker's call
    streams the reply again and saves it once."""
    long_text = " ".join(f"w{i}" for i in range(80))  # ~2 s at PIECE_MS a word
    async with FakeModelServer(chunk_delay_ms=PIECE_MS) as fake:
        tenant, h = await api.tenant()
        await api.tool_server(tenant, fakes.mcp.url)
        agent = await api.agent(h, tools=["slow"])
        async with running_worker(database_dsn, fake.base_url):
            run_id = await api.start(h, agent, after_a_tool(long_text))
            watching = asyncio.create_task(api.events_until_end(h, run_id, deltas=True))
            await pieces_out(fake, 10)
        # The first worker drained for a second, then cancelled the call and handed the
        # run back; the reply was not finished.
        assert len(fake.usage_log) == 1  # the tool call's reply only
        assert await admin_conn.fetchval(
            "SELECT count(*) FROM run_events WHERE type = 'ModelReplied'") == 1
        async with running_worker(database_dsn, fake.base_url):
            events = await watching
    durable = [e for e in events if e["type"] != "model_delta"]
    assert [e["type"] for e in durable] == ["RunCreated", "ModelReplied", "ToolCompleted",
                                            "ModelReplied", "RunFinished"]
    assert durable[3]["data"]["text"] == long_text
    assert "".join(d["text"] for d in deltas_of(events)).endswith(long_text)
    assert [r.json().get("stream") for r in fake.requests[1:]] == [True, True]
    assert len(fake.usage_log) == 2


async def test_nobody_watching_costs_nothing(api: Api, rig: Rig) -> None:
    """A run without a listener is not streamed at all — the provider is asked for the
    whole answer — and publishes nothing."""
    _, h = await api.tenant()
    agent = await api.agent(h)
    run_id = await api.start(h, agent, scripted(answer(TEXT)))

    async def finished() -> bool:
        return (await api.run(h, run_id))["status"] == "finished"

    await until(finished, "the run finished", 20)
    assert rig.worker.engine.deltas.sent_deltas == 0
    assert api.platform.hub.deltas_received == 0
    assert rig.fake.requests and not any("stream" in r.json() for r in rig.fake.requests)
    assert (await api.run(h, run_id))["answer"] == TEXT


async def test_a_run_asked_to_stream_streams_its_first_call_to_a_client_that_opens_after(
        api: Api, rig: Rig) -> None:
    """`stream: true`: the run's first call (made within milliseconds of its creation,
    before the client's stream is heard of) streams anyway, and the client that opens
    its stream after POST /v1/runs gets the text so far when it joins, then the rest."""
    h, agent = await rig.caller(api)
    run_id = await api.start(h, agent, scripted(answer(TEXT)), stream=True)
    events = await api.events_until_end(h, run_id, deltas=True)
    assert [e["type"] for e in events if e["type"] != "model_delta"] == [
        "RunCreated", "ModelReplied", "RunFinished"]
    assert events[0]["data"]["stream"] is True
    deltas = deltas_of(events)
    assert deltas and {d["after_seq"] for d in deltas} == {1}
    assert "".join(d["text"] for d in deltas) == TEXT
    check_deltas_precede_their_replies(events)
    assert rig.fake.requests[0].json()["stream"] is True
