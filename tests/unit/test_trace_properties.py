"""The trace over generated logs: whatever a run went through — cancels
(before the claim, during a call, during a wait), approvals, parks, activity waits,
retries, fallbacks, signals and a worker dying mid-call — its spans never overlap, lie end
to end over the run's wall time, and each call or wait span is exactly what its events
recorded (a reply's gateway wait and provider latency, a tool's duration, request →
decision); the first queue wait is created → claimed.

Seeded (its own generator, not Hypothesis): a failing seed is printed and replays alone."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest

from tenantry.ids import RunId
from tenantry.runs.events import (
    CancelRequested,
    Event,
    ModelReplied,
    RunCancelled,
    RunCreated,
)
from tenantry.runs.trace import SPAN_KINDS, trace_of
from tests.support.trace_logs import T0, GeneratedRun, generated_run, when

CASES = 600
#: What the generator must have walked through across the cases (or the test proves less).
MUST_SEE = {"cancel_mid_call", "signal_mid_call", "cancel_queued", "cancel_before_claim",
            "cancel_during_approval", "cancel_during_park", "approval", "park", "activity",
            "restart", "retry", "fallback", "reroute", "tool", "activity_attempt",
            "open_wait", "connect"}


def _us(ms: float) -> int:
    return round(ms * 1000)


def _check(run: GeneratedRun) -> None:
    trace = trace_of(RunId.new(), run.row, run.events)
    spans: list[dict[str, Any]] = trace["spans"]
    assert _us(trace["wall_ms"]) == run.wall_us
    # End to end from 0: never overlapping, never a hole, never negative.
    assert spans and spans[0]["start_ms"] == 0
    for before, after in itertools.pairwise(spans):
        assert _us(after["start_ms"]) == _us(before["start_ms"]) + _us(before["duration_ms"])
    assert all(s["duration_ms"] >= 0 and s["kind"] in SPAN_KINDS for s in spans)
    assert sum(_us(s["duration_ms"]) for s in spans) == run.wall_us
    for kind in SPAN_KINDS:
        assert _us(trace["totals"][f"{kind}_ms"]) == sum(
            _us(s["duration_ms"]) for s in spans if s["kind"] == kind)
    # Each call and wait exactly as its events recorded it.
    found = {(s["kind"], _us(s["start_ms"]), _us(s["duration_ms"])): s for s in spans}
    for kind, start, duration, seq in run.truth:
        if kind == "queue":
            if duration:
                assert spans[0]["kind"] == "queue" and spans[0]["label"] == "queued"
                assert _us(spans[0]["duration_ms"]) == duration
            continue
        span = found.get((kind, start, duration))
        assert span is not None, (kind, start, duration, seq)
        assert span["seq"] == seq
    replies = [e.payload for e in run.events if e.type == "ModelReplied"]
    assert [_us(s["duration_ms"]) for s in spans if s["kind"] == "model"] == [
        _us(r.latency_ms) - _us(r.connect_ms or 0) for r in replies
        if isinstance(r, ModelReplied)]


def test_spans_of_generated_logs_are_what_their_events_recorded() -> None:
    seen: set[str] = set()
    for seed in range(CASES):
        run = generated_run(seed)
        seen |= run.kinds
        try:
            _check(run)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}: {exc}") from exc
    assert seen >= MUST_SEE, MUST_SEE - seen


def test_a_cancel_during_the_only_call_does_not_split_it() -> None:
    """The issue's run: claimed at once, one 10 s model call, a cancel 1 s into it."""
    def at(ms: float) -> Any:
        return T0 + timedelta(milliseconds=ms)

    events = [
        Event.of(1, RunCreated("agt_1", 1, "normal", input="hi"), T0),
        Event.of(2, CancelRequested(), at(1_000)),
        Event.of(3, ModelReplied("", [], {"input_tokens": 1, "output_tokens": 1}, "openai",
                                 "acct", "m", 1, "p1", 5.9, waited_ms=10_000), at(10_010)),
        Event.of(4, RunCancelled("cancel_requested"), at(10_020)),
    ]
    row = {"status": "cancelled", "agent_id": RunId.new().uuid, "agent_version": 1,
           "created_at": T0, "started_at": at(4), "finished_at": at(10_020),
           "now": when(0)}
    trace = trace_of(RunId.new(), row, events)
    assert [(s["kind"], s["duration_ms"]) for s in trace["spans"]] == [
        ("queue", 4), ("platform", 6), ("gateway", pytest.approx(9_994.1)), ("model", 5.9),
        ("platform", 10)]
    assert trace["totals"]["gateway_ms"] == pytest.approx(9_994.1)
    assert trace["spans"][3]["detail"]["waited_ms"] == 10_000
