"""The run trace: where a run's wall time went, derived from its log.

One run shows a model fallback and an approval; its spans are contiguous and add up to the
run's wall time within TOLERANCE_MS (rounding each span to 0.001 ms); the approval span is
at least as long as the test demonstrably held the decision back; the model span at least
the fake model's configured delay. Another tenant gets 404, like for any missing run."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tenantry.api.run_bodies import TraceOut
from tenantry.telemetry.spans import OtelSpans
from tenantry.telemetry.worker import WorkerMetrics
from tenantry.testing.fake_model import FakeModelServer
from tests.support.api import Api
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

#: Spans are laid end to end in integer microseconds and each is rounded to 0.001 ms for
#: the JSON, so their sum may differ from wall_ms by at most 0.0005 ms per span.
TOLERANCE_MS = 1.0
MODEL_DELAY_MS = 300


@pytest.fixture
async def models() -> AsyncIterator[tuple[FakeModelServer, FakeModelServer]]:
    async with FakeModelServer() as primary, FakeModelServer() as alternative:
        yield primary, alternative


async def _trace(api: Api, h: dict[str, str], run_id: str) -> dict[str, Any]:
    r = await api.client.get(f"/v1/runs/{run_id}/trace", headers=h)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    # What /openapi.json promises for this route.
    assert TraceOut.model_validate(body).model_dump(mode="json", by_alias=True)["fallbacks"] \
        == body["fallbacks"]
    return body


def _check_partition(trace: dict[str, Any]) -> None:
    spans = trace["spans"]
    assert spans and spans[0]["start_ms"] == 0
    for before, after in itertools.pairwise(spans):
        assert after["start_ms"] == pytest.approx(before["start_ms"] + before["duration_ms"],
                                                  abs=TOLERANCE_MS)
    assert all(s["duration_ms"] >= 0 for s in spans)
    assert sum(s["duration_ms"] for s in spans) == pytest.approx(trace["wall_ms"],
                                                                 abs=TOLERANCE_MS)
    by_kind = {k: sum(s["duration_ms"] for s in spans if s["kind"] == k)
               for k in ("queue", "platform", "gateway", "model", "tool", "approval", "parked")}
    for kind, total in by_kind.items():
        assert trace["totals"][f"{kind}_ms"] == pytest.approx(total, abs=TOLERANCE_MS)


async def test_a_trace_shows_the_fallback_and_the_approval_and_adds_up(
    api: Api, fakes: Fakes, models: tuple[FakeModelServer, FakeModelServer], database_dsn: str,
) -> None:
    primary, alternative = models
    await api.model_account("primary", primary.base_url, models=["scripted"])
    await api.model_account("alt", alternative.base_url, models=["scripted/echo"])
    tenant, h = await api.tenant()
    _, other = await api.tenant("Other")
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["effect"], needs_approval=["effect"],
                            fallback_models=["scripted/echo"])
    primary.set_mode("down")  # the run's model is out: it falls back to scripted/echo
    async with running_worker(database_dsn, None):
        run_id = await api.start(h, agent, scripted(
            {**call("effect", note="refund order-7"), "delay_ms": MODEL_DELAY_MS},
            answer("done: {last_tool_result}")))

        async def pending() -> list[dict[str, Any]]:
            r = await api.client.get("/v1/approvals", params={"status": "pending"}, headers=h)
            data: list[dict[str, Any]] = r.json()["data"]
            return data

        async def has_pending() -> bool:
            return bool(await pending())

        await until(has_pending, "the run asks for an approval", 30)
        seen = time.time()
        # While it waits, the trace already ends in an open approval span.
        waiting = await _trace(api, h, run_id)
        assert waiting["status"] == "waiting" and waiting["ended_at"] is None
        assert waiting["spans"][-1]["kind"] == "approval"
        _check_partition(waiting)
        approval = (await pending())[0]
        decided = time.time()
        r = await api.client.post(f"/v1/approvals/{approval['approval_id']}",
                                  json={"decision": "approve"}, headers=h)
        assert r.status_code == 200
        events = await api.events_until_end(h, run_id)
    held_ms = (decided - seen) * 1000
    run = await api.run(h, run_id)
    assert run["status"] == "finished"

    trace = await _trace(api, h, run_id)
    assert trace["run_id"] == run_id and trace["status"] == "finished"
    assert trace["agent_id"] == agent and trace["agent_version"] == 1
    created = datetime.fromisoformat(str(run["created_at"]))
    finished = datetime.fromisoformat(str(run["finished_at"]))
    assert trace["wall_ms"] == pytest.approx((finished - created).total_seconds() * 1000,
                                             abs=TOLERANCE_MS)
    _check_partition(trace)

    # The fallback, as recorded.
    [fallback] = trace["fallbacks"]
    assert fallback["type"] == "ModelFallback"
    assert (fallback["from"], fallback["to"]) == ("scripted", "scripted/echo")
    assert fallback["reason"] == "the previous model did not answer"  # not why
    assert fallback["seq"] == next(e["seq"] for e in events if e["type"] == "ModelFallback")

    kinds = [s["kind"] for s in trace["spans"]]
    assert kinds[0] == "queue"
    assert kinds.count("model") == 2 and kinds.count("tool") == 1
    assert kinds.count("approval") == 1
    first_model = next(s for s in trace["spans"] if s["kind"] == "model")
    assert first_model["duration_ms"] >= MODEL_DELAY_MS
    assert first_model["detail"]["account"] == "alt"
    assert first_model["detail"]["model"] == "scripted/echo"
    assert first_model["detail"]["provider"] == "openai"
    assert first_model["detail"]["tokens"] > 0
    assert first_model["label"] == "scripted/echo via alt"

    [wait] = [s for s in trace["spans"] if s["kind"] == "approval"]
    assert wait["duration_ms"] >= held_ms
    assert wait["detail"]["decision"] == "approved"
    assert wait["detail"]["approval_id"] == approval["approval_id"]
    assert trace["totals"]["approval_ms"] == wait["duration_ms"]

    [tool] = [s for s in trace["spans"] if s["kind"] == "tool"]
    assert tool["detail"]["tool"] == "effect" and tool["detail"]["server"] == "effects"
    assert tool["detail"]["outcome"] == "ok"
    assert tool["detail"]["key"] == approval["key"]
    # A span after the decision, before the tool ran: the run waited for a worker again.
    after_decision = kinds[kinds.index("approval") + 1]
    assert after_decision in ("queue", "tool")

    usage = run["usage"]
    assert isinstance(usage, dict)
    assert trace["totals"]["input_tokens"] == usage["input_tokens"]
    assert trace["totals"]["output_tokens"] == usage["output_tokens"]
    assert trace["totals"]["cost_micros"] == run["cost_micros"]
    assert trace["sandbox"] is None  # no code ran
    assert trace["totals"]["sandbox_ms"] == 0

    # Another tenant's run answers exactly like a missing one.
    for headers, run in ((other, run_id), (h, "run_00000000000000000000000000"),
                         (h, "not-a-run")):
        r = await api.client.get(f"/v1/runs/{run}/trace", headers=headers)
        assert r.status_code == 404 and r.json()["type"] == "not_found"
    assert (await api.client.get(f"/v1/runs/{run_id}/trace")).status_code == 401
    doc = (await api.client.get("/openapi.json")).json()
    ok = doc["paths"]["/v1/runs/{run_id}/trace"]["get"]["responses"]["200"]
    assert ok["content"]["application/json"]["schema"]["$ref"].endswith("/TraceOut")


async def test_a_cancel_during_the_model_call_leaves_the_call_whole(
    api: Api, database_dsn: str,
) -> None:
    """A cancel request that lands while the run's only model call is in flight
    ends neither the queue wait nor the call; the call's span is what the worker measured,
    and it holds the moment of the cancel."""
    _, h = await api.tenant()
    agent = await api.agent(h)
    async with FakeModelServer() as model, running_worker(database_dsn, model.base_url):
        model.set_mode("hang")  # the call stays in flight until the cancel is in the log

        async def asked() -> bool:
            return any(r.path.endswith("/chat/completions") for r in model.requests)

        run_id = await api.start(h, agent, scripted(answer("too late")))
        await until(asked, "the model call is in flight", 30)
        # The trace places a call by its end (the transaction that saved the reply) less
        # what the worker measured, good to the few milliseconds between the answer and
        # that transaction's start (more on a loaded machine): the cancel lands well inside
        # the call so that slack cannot move it out.
        await asyncio.sleep(0.3)
        r = await api.client.post(f"/v1/runs/{run_id}/cancel", headers=h)
        assert r.status_code == 200 and r.json()["status"] == "running", r.text
        await asyncio.sleep(0.3)
        model.set_mode("ok")
        events = await api.events_until_end(h, run_id)
    assert [e["type"] for e in events] == [
        "RunCreated", "CancelRequested", "ModelReplied", "RunCancelled"]
    run = await api.run(h, run_id)
    trace = await _trace(api, h, run_id)
    _check_partition(trace)
    created = datetime.fromisoformat(str(run["created_at"]))

    def offset(event: dict[str, Any]) -> float:
        return (datetime.fromisoformat(str(event["created_at"])) - created).total_seconds() \
            * 1000

    cancel_at, replied_at = offset(events[1]), offset(events[2])
    reply = events[2]["data"]
    assert isinstance(reply, dict)
    spans = trace["spans"]
    kinds = [s["kind"] for s in spans]
    assert kinds.count("model") == 1 and kinds.count("queue") == 1
    assert [k for k in kinds if k != "gateway"] == ["queue", "platform", "model", "platform"]
    model_span = spans[kinds.index("model")]
    call = [s for s in spans if s["kind"] in ("gateway", "model")]
    call_start = call[0]["start_ms"]
    # The call as the worker measured it: the provider's latency (less opening the
    # connection, which is the gateway's), and the whole wait.
    assert model_span["duration_ms"] == pytest.approx(
        reply["latency_ms"] - reply.get("connect_ms", 0), abs=0.002)
    assert sum(s["duration_ms"] for s in call) == pytest.approx(reply["waited_ms"], abs=0.002)
    assert model_span["start_ms"] + model_span["duration_ms"] == pytest.approx(replied_at,
                                                                              abs=0.002)
    # The cancel fell inside the call, and the queue wait ended before the call began.
    assert call_start < cancel_at < replied_at
    assert spans[0]["start_ms"] + spans[0]["duration_ms"] <= call_start
    assert trace["totals"]["queue_ms"] == spans[0]["duration_ms"]


async def test_the_worker_emits_a_span_per_step_when_an_exporter_is_configured(
    api: Api, fakes: Fakes, database_dsn: str,
) -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    metrics = WorkerMetrics(spans=OtelSpans(provider))
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["echo"])
    async with running_worker(database_dsn, fakes.model.base_url, metrics=metrics):
        run_id = await api.start(h, agent, scripted(call("echo", text="hi"), answer("ok")))
        await api.events_until_end(h, run_id)
    spans = exported.get_finished_spans()
    assert [s.name for s in spans] == ["model scripted", "tool echo", "model scripted"]
    for span in spans:
        attributes = dict(span.attributes or {})
        assert attributes["tenantry.run_id"] == run_id
        assert attributes["tenantry.tenant_id"] == tenant
        assert attributes["tenantry.tenant_class"] == "standard"
        assert span.start_time is not None and span.end_time is not None
        assert span.end_time >= span.start_time
    tool = dict(spans[1].attributes or {})
    assert tool["tenantry.tool.key"] == f"{run_id}:2:0"
    assert tool["tenantry.tool.outcome"] == "ok"
    assert dict(spans[0].attributes or {})["gen_ai.usage.input_tokens"] > 0
