"""The pure parts of the trace and metrics: the trace's partition of a run's time (clamping
included), the metrics registry's text format and label bound, and run ids on log lines."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx2
import pytest

from tenantry import logs
from tenantry.config import Settings
from tenantry.errors import ConfigurationError
from tenantry.ids import AgentId, RunId
from tenantry.runs.events import (
    ActivityAttempted,
    ApprovalDecided,
    ApprovalRequested,
    EgressRefused,
    Event,
    ModelFallback,
    ModelReplied,
    RunCreated,
    RunFinished,
    RunParked,
    ToolCompleted,
    WebhookDelivered,
)
from tenantry.runs.trace import trace_of
from tenantry.telemetry.blob_store import watch_blob_store
from tenantry.telemetry.http import metrics_app
from tenantry.telemetry.registry import Registry, merge
from tenantry.telemetry.spans import NoSpans, OtelSpans, from_exporter
from tenantry.telemetry.worker import WorkerMetrics

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(ms: float) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def row(*, status: str = "finished", started: float | None = 10, finished: float | None = 1000,
        now: float = 5000) -> dict[str, Any]:
    return {"status": status, "agent_id": AgentId.new().uuid, "agent_version": 3,
            "created_at": T0, "started_at": at(started) if started is not None else None,
            "finished_at": at(finished) if finished is not None else None, "now": at(now)}


CREATED = Event.of(1, RunCreated("agt_1", 3, "normal", input="hi"), T0)


def reply(seq: int, ms: float, waited: float) -> Event:
    return Event.of(seq, ModelReplied("", [], {"input_tokens": 10, "output_tokens": 2},
                                      "openai", "a", "m", 7, "p1", waited, waited_ms=waited),
                    at(ms))


def test_spans_partition_the_run_and_clamp_what_does_not_fit() -> None:
    events = [
        CREATED,
        # The fallback shares the reply's transaction (same timestamp).
        Event.of(2, ModelFallback("m0", "m", "down"), at(300)),
        reply(3, 300, waited=200),
        # A tool that says it took longer than its gap: clamped, never overlapping.
        # The sandbox's refused egress is written with the call's result.
        Event.of(4, EgressRefused("k", "169.254.169.254", 80, "metadata_address"), at(400)),
        Event.of(5, ToolCompleted("k", "t", 3, 0, {}, server="s", duration_ms=900,
                                  sandbox={"backend": "bwrap", "exec_ms": 40}), at(400)),
        Event.of(6, ApprovalRequested("apr_1", "k2", "t", {}, at(1000).isoformat()), at(420)),
        Event.of(7, ApprovalDecided("apr_1", "k2", "approved"), at(700)),
        # Started before the decision committed: out of order, clamped to a zero gap.
        reply(8, 690, waited=5),
        Event.of(9, RunFinished("done"), at(1000)),
        # after the end: not run time
        Event.of(10, WebhookDelivered("https://example.com/hook", 1, 200), at(3000)),
    ]
    trace = trace_of(RunId.new(), row(), events)
    spans = trace["spans"]
    assert trace["wall_ms"] == 1000
    assert sum(s["duration_ms"] for s in spans) == pytest.approx(1000)
    cursor = 0.0
    for span in spans:
        assert span["start_ms"] == pytest.approx(cursor) and span["duration_ms"] >= 0
        cursor += span["duration_ms"]
    assert [(s["kind"], s["duration_ms"]) for s in spans] == [
        ("queue", 10), ("platform", 90), ("model", 200), ("tool", 100), ("platform", 20),
        ("approval", 280), ("model", 0), ("platform", 300)]
    totals = trace["totals"]
    assert (totals["queue_ms"], totals["model_ms"], totals["tool_ms"]) == (10, 200, 100)
    assert totals["approval_ms"] == 280 and totals["platform_ms"] == 410
    assert totals["sandbox_ms"] == 40 and trace["sandbox"] == {"backend": "bwrap"}
    assert (totals["input_tokens"], totals["cost_micros"]) == (20, 14)
    assert trace["fallbacks"] == [{"seq": 2, "type": "ModelFallback", "from": "m0",
                                   "to": "m", "reason": "down"}]
    assert spans[5]["detail"]["decision"] == "approved"
    assert trace["egress_refused"] == {"total": 1, "by_reason": {"metadata_address": 1}}


def test_an_activity_tasks_attempts_are_its_tool_time() -> None:
    events = [CREATED,
              Event.of(2, ActivityAttempted(1, "retryable", "crashed: SIGSEGV", 139, True, "",
                                            "", 100.0, "sb_1", egress_refused_count=3,
                                            egress_refused_by_reason={"not_allowed": 2,
                                                                      "metadata_address": 1}),
                       at(300)),
              Event.of(3, ActivityAttempted(2, "completed", None, 0, False, "ok", "", 50.0,
                                            "sb_2", egress_refused_count=1,
                                            egress_refused_by_reason={"not_allowed": 1}),
                       at(600)),
              Event.of(4, RunFinished({"ok": 1}), at(600))]
    trace = trace_of(RunId.new(), row(finished=600), events)
    tools = [s for s in trace["spans"] if s["kind"] == "tool"]
    assert [(s["label"], s["duration_ms"]) for s in tools] == [
        ("activity attempt 1", 100), ("activity attempt 2", 50)]
    assert tools[0]["detail"]["killed_sandbox"] is True
    assert trace["totals"]["tool_ms"] == 150
    # What its attempts' sandboxes had refused, as a run's EgressRefused events are summed.
    assert trace["egress_refused"] == {"total": 4, "by_reason": {"not_allowed": 3,
                                                                 "metadata_address": 1}}


def test_a_run_still_going_ends_in_its_current_wait() -> None:
    events = [CREATED, reply(2, 100, waited=50),
              Event.of(3, RunParked("model unavailable: x"), at(120))]
    trace = trace_of(RunId.new(), row(status="waiting", finished=None, now=2000), events)
    assert trace["ended_at"] is None and trace["wall_ms"] == 2000
    assert trace["spans"][-1]["kind"] == "parked"
    assert trace["totals"]["parked_ms"] == 1880
    queued = trace_of(RunId.new(), row(status="queued", started=None, finished=None, now=50),
                      [CREATED])
    assert [(s["kind"], s["duration_ms"]) for s in queued["spans"]] == [("queue", 50)]


def test_the_registry_renders_prometheus_text_and_bounds_its_labels() -> None:
    registry = Registry()
    calls = registry.counter("x_calls_total", "Calls.", ("tenant_class",))
    calls.max_series = 2
    waits = registry.histogram("x_wait_seconds", "Waits.", ("tenant_class",),
                               buckets=(0.1, 1.0))
    registry.gauge("x_ready", "Ready.")
    for cls in ("gold", "free", "gold", "a", "b"):
        calls.inc(cls)
    waits.observe(0.5, "gold")
    remove = registry.add_collector(lambda: [("x_ready", (("backend", "bwrap"),), 2.0)])
    registry.add_collector(lambda: [("x_ready", (("backend", "bwrap"),), 1.0)])
    text = registry.render()
    assert 'x_calls_total{tenant_class="gold"} 2' in text
    assert 'x_calls_total{tenant_class="other"} 2' in text  # past the bound
    assert 'x_wait_seconds_bucket{tenant_class="gold",le="0.1"} 0' in text
    assert 'x_wait_seconds_bucket{tenant_class="gold",le="1"} 1' in text
    assert 'x_wait_seconds_bucket{tenant_class="gold",le="+Inf"} 1' in text
    assert 'x_wait_seconds_count{tenant_class="gold"} 1' in text
    assert 'x_ready{backend="bwrap"} 3' in text  # two worker loops, summed
    remove()
    assert 'x_ready{backend="bwrap"} 1' in registry.render()
    merged = merge([text, text])
    assert 'x_calls_total{tenant_class="gold"} 4' in merged
    assert merged.count("# TYPE x_calls_total counter") == 1


def test_blob_store_failures_are_counted_by_operation_zero_included() -> None:
    registry = Registry()
    # Two worker loops of one process, each with its store: one series per operation.
    watch_blob_store(registry, lambda: {"write": 3})
    remove = watch_blob_store(registry, lambda: {"write": 1, "delete": 2})
    text = registry.render()
    assert text.count("# TYPE tenantry_blob_store_errors_total counter") == 1
    assert 'tenantry_blob_store_errors_total{operation="write"} 4' in text
    assert 'tenantry_blob_store_errors_total{operation="delete"} 2' in text
    assert 'tenantry_blob_store_errors_total{operation="read"} 0' in text  # a rate from 0
    remove()
    assert 'tenantry_blob_store_errors_total{operation="write"} 3' in registry.render()


@dataclass
class _Stats:
    claims: int = 3
    warm: int = 2
    cold: int = 1
    claim_ms_last: float = 12.0


@dataclass
class _Pool:
    ready: int = 1
    size: int = 2
    stats: _Stats = field(default_factory=_Stats)


@dataclass
class _Sandboxes:
    """SandboxManager's face to the metrics (a real pool is scraped in the sandbox tests:
    tests/integration/sandbox/test_code_tools.py)."""

    backend: str = "microvm"
    live: int = 4
    warm_pool: _Pool = field(default_factory=_Pool)

    def pool(self) -> _Pool:
        return self.warm_pool


class _Breakers:
    def breaker_states(self) -> dict[str, str]:
        return {"ten_secret/00000000-0000-0000-0000-000000000000": "open"}


def test_worker_gauges_name_backends_and_classes_never_tenants() -> None:
    metrics = WorkerMetrics()
    metrics.learn_class("ten_secret", "gold")
    metrics.watch(model=object(), tools=_Breakers(), sandboxes=_Sandboxes(),  # type: ignore[arg-type]
                  leases=lambda: ["ten_secret", "ten_other"])
    text = metrics.render()
    assert 'tenantry_sandbox_pool_ready{backend="microvm"} 1' in text
    assert 'tenantry_sandbox_pool_claims_total{backend="microvm",kind="warm"} 2' in text
    assert 'tenantry_sandbox_pool_last_claim_seconds{backend="microvm"} 0.012' in text
    assert 'tenantry_sandboxes_live{backend="microvm"} 4' in text
    assert 'tenantry_tool_server_breakers{tenant_class="gold",state="open"} 1' in text
    assert 'tenantry_worker_leases_held{tenant_class="unknown"} 1' in text
    assert "ten_" not in text


async def test_log_lines_of_a_run_task_carry_their_own_ids() -> None:
    formatter = logs.JsonFormatter()
    lines: list[str] = []

    async def task(run: str) -> None:
        logs.bind(run_id=run, tenant_id="ten_a")
        record = logging.LogRecord("tenantry.x", logging.INFO, __file__, 1, "hi", (), None)
        lines.append(formatter.format(record))

    await asyncio.gather(asyncio.create_task(task("run_1")), asyncio.create_task(task("run_2")))
    assert any('"run_id":"run_1"' in line and '"tenant_id":"ten_a"' in line for line in lines)
    assert any('"run_id":"run_2"' in line for line in lines)
    assert "run_id" not in logs.context()  # bound inside the tasks only


async def test_a_standalone_workers_metrics_need_the_operator_token() -> None:
    metrics = WorkerMetrics()
    metrics.budget_refusals.inc("gold", "max_steps")
    app = metrics_app(metrics, "op_secret")
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app),
                                  base_url="http://worker") as client:
        assert (await client.get("/metrics")).status_code == 401
        wrong = await client.get("/metrics", headers={"Authorization": "Bearer op_other"})
        assert wrong.status_code == 401
        r = await client.get("/metrics", headers={"Authorization": "Bearer op_secret"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert 'tenantry_budget_refusals_total{tenant_class="gold",limit="max_steps"} 1' in r.text


def test_spans_are_off_unless_an_exporter_is_named() -> None:
    assert isinstance(from_exporter(None), NoSpans)
    console = from_exporter("console")
    assert isinstance(console, OtelSpans)
    console.shutdown()
    with pytest.raises(ConfigurationError):
        from_exporter("zipkin")
    with pytest.raises(ConfigurationError):
        Settings.from_env({"TENANTRY_OTEL_EXPORTER": "zipkin"})
    assert Settings.from_env({"TENANTRY_WORKER_METRICS_PORT": "9100"}).worker_metrics_port == 9100
