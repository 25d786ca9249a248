"""Generated run logs for the trace's property test: a seeded walk through what a run can
do — model calls (retries and gateway waits, fallbacks, reroutes, old replies without
``waited_ms``), tool calls, activity tasks, approvals, parks, cancels (before the claim,
during a call, during a wait), signals during a call, and a worker dying mid-call — laid on
a clock in whole microseconds, with the spans that *really* happened beside the log.

The log is what the database would hold: each event's ``created_at`` is the start of the
transaction that saved it; a call's start is nowhere in the log but in its reply's
measured durations. ``truth`` holds the spans the trace must find — the first queue wait,
each call (gateway then provider), each approval, park and activity wait — as
(kind, start µs, duration µs, seq)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tenantry.ids import AgentId
from tenantry.runs.events import (
    ActivityAttempted,
    ActivityRequested,
    ActivityReturned,
    ApprovalDecided,
    ApprovalRequested,
    CancelRequested,
    Event,
    ModelFallback,
    ModelReplied,
    ModelRerouted,
    Payload,
    RunCancelled,
    RunCreated,
    RunFailed,
    RunFinished,
    RunParked,
    RunResumed,
    Signalled,
    ToolCompleted,
    ToolStarted,
    WebhookDelivered,
)

T0 = datetime(2026, 3, 1, tzinfo=UTC)
STEPS = ("model", "model", "model", "tool", "tool", "activity", "approval", "park",
         "restart", "attempt")


def when(us: int) -> datetime:
    return T0 + timedelta(microseconds=us)


@dataclass(slots=True)
class GeneratedRun:
    """A run row (as ``trace_of`` reads it), its log, and the spans that really were."""

    row: dict[str, Any]
    events: list[Event]
    truth: list[tuple[str, int, int, int]]
    wall_us: int
    kinds: set[str] = field(default_factory=set)  # what this log exercised


@dataclass(slots=True)
class _Walk:
    rng: random.Random
    events: list[Event] = field(default_factory=list)
    truth: list[tuple[str, int, int, int]] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)
    now: int = 0  # µs since the run's creation: the last transaction's start

    def write(self, at: int, *payloads: Payload) -> int:
        """One transaction starting at ``at``; the seq of its last event."""
        assert at > self.now or not self.events, "transactions start one after another"
        self.now = at
        for payload in payloads:
            self.events.append(Event.of(len(self.events) + 1, payload, when(at)))
        return len(self.events)

    def gap(self, low: int = 1, high: int = 3_000) -> int:
        return self.rng.randint(low, high)

    def duration(self) -> int:
        # Mostly milliseconds, sometimes seconds, sometimes a few microseconds.
        return self.rng.choice((self.rng.randint(3, 50), self.rng.randint(1_000, 900_000),
                                self.rng.randint(1_000_000, 12_000_000)))

    def during(self, start: int, end: int) -> int | None:
        """A moment strictly inside (start, end), if there is one."""
        return self.rng.randint(start + 1, end - 1) if end - start >= 3 else None

    def foreign_during(self, start: int, end: int) -> bool:
        """Maybe someone else appends during [start, end]: a signal or a cancel request.
        True when it was a cancel (the run stops after the step)."""
        moment = self.during(start, end)
        if moment is None or moment <= self.now or self.rng.random() < 0.6:
            return False
        if self.rng.random() < 0.5:
            self.write(moment, Signalled("poke", {"n": 1}))
            self.kinds.add("signal_mid_call")
            return False
        self.write(moment, CancelRequested())
        self.kinds.add("cancel_mid_call")
        return True

    def model(self, *, lost_before: int = 0) -> bool:
        start = self.now + self.gap() + lost_before
        provider = self.duration()
        old = self.rng.random() < 0.1  # written before waited_ms existed
        gateway = 0 if old else self.rng.choice((0, self.gap(1, 50),
                                                 self.rng.randint(100_000, 2_000_000)))
        # Opening the connection is inside the provider's measured latency, but the
        # gateway's set-up: the trace moves it to the gateway span.
        connect = 0 if old or self.rng.random() < 0.7 else self.rng.randint(1, 300_000)
        end = start + gateway + connect + provider
        cancelled = self.foreign_during(start, end)
        switches: list[Payload] = []
        if self.rng.random() < 0.15:
            switches.append(ModelFallback("m0", "m1", "the previous model did not answer"))
            self.kinds.add("fallback")
        if self.rng.random() < 0.1:
            switches.append(ModelRerouted("a0", "a1", "m1", "another account"))
            self.kinds.add("reroute")
        if gateway > 100_000:
            self.kinds.add("retry")
        reply = ModelReplied("", [], {"input_tokens": 5, "output_tokens": 1}, "openai", "a1",
                             "m1", 3, "p1", (connect + provider) / 1000,
                             waited_ms=None if old else (gateway + connect + provider) / 1000,
                             connect_ms=connect / 1000 or None)
        if connect:
            self.kinds.add("connect")
        gateway += connect
        seq = self.write(end, *switches, reply)  # saved as the call returned
        if gateway:
            self.truth.append(("gateway", start, gateway, seq))
        self.truth.append(("model", start + gateway, provider, seq))
        return cancelled

    def tool(self) -> bool:
        started_event = self.rng.random() < 0.5
        if started_event:
            self.write(self.now + self.gap(), ToolStarted("k", "t"))
        start = self.now + self.gap()
        took = self.duration()
        end = start + took
        cancelled = self.foreign_during(start, end)
        seq = self.write(end, ToolCompleted("k", "t", 1, 0, {}, server="s",
                                            duration_ms=took / 1000))
        self.truth.append(("tool", start, took, seq))
        return cancelled

    def attempt(self) -> None:
        start = self.now + self.gap()
        took = self.duration()
        seq = self.write(start + took, ActivityAttempted(1, "completed", None, 0, False, "",
                                                         "", took / 1000, "sb_1"))
        self.truth.append(("tool", start, took, seq))
        self.kinds.add("activity_attempt")

    def wait(self, kind: str, *, until: int | None = None) -> bool:
        """An approval, park or activity wait; True when a cancel ended it (and the run).
        With ``until`` it has not ended yet: the trace is read at that moment."""
        asked = self.now + self.gap()
        payload: Payload = {
            "approval": ApprovalRequested("apr_1", "k", "t", {}, when(10**11).isoformat()),
            "park": RunParked("model unavailable: every account is down"),
            "activity": ActivityRequested("k", "activity:a", "tsk_1", "a", 1),
        }[kind]
        seq = self.write(asked, payload)
        ended = asked + self.duration() if until is None else max(until, asked)
        truth_kind = {"approval": "approval", "park": "parked", "activity": "tool"}[kind]
        self.truth.append((truth_kind, asked, ended - asked, seq))
        if until is not None:
            return False
        if self.rng.random() < 0.1:  # cancelled while it waited: the API ends it at once
            self.write(ended, CancelRequested(), RunCancelled("cancel_requested"))
            self.kinds.add(f"cancel_during_{kind}")
            return True
        if kind == "approval":
            self.write(ended, ApprovalDecided("apr_1", "k", "approved"))
        elif kind == "activity":
            self.write(ended, ActivityReturned("k", "tsk_1", "finished", result=1))
        else:  # the worker that claims it again says so
            self.write(ended, RunResumed("RunParked"))
        return False


def generated_run(seed: int) -> GeneratedRun:
    rng = random.Random(seed)
    w = _Walk(rng)
    w.write(0, RunCreated("agt_1", 1, "normal", input="hi"))
    claim: int | None = rng.choice((rng.randint(0, 500), rng.randint(1_000, 3_000_000)))
    assert claim is not None
    if rng.random() < 0.08:  # cancelled before any worker took it
        at = rng.randint(1, 2_000_000)
        w.write(at, CancelRequested(), RunCancelled("cancel_requested"))
        w.truth.append(("queue", 0, at, 2))
        w.kinds.add("cancel_queued")
        return _done(w, None, at, "cancelled")
    if rng.random() < 0.08:  # a cancel request raced the claim: the worker ends the run
        w.write(rng.randint(1, claim + 1), CancelRequested())
        claim = max(claim, w.now)
        w.write(claim + w.gap(), RunCancelled("cancel_requested"))
        w.truth.append(("queue", 0, claim, 3))
        w.kinds.add("cancel_before_claim")
        return _done(w, claim, w.now, "cancelled")
    w.now = max(claim, 1)
    w.truth.append(("queue", 0, claim, 2))
    for _ in range(rng.randint(0, 8)):
        step = rng.choice(STEPS)
        w.kinds.add(step)
        if step == "model":
            if w.model():
                break
        elif step == "restart":
            # A worker died during its call: nothing of it is in the log; the lease ran out
            # and another worker made the call again.
            if w.model(lost_before=rng.randint(1_000_000, 30_000_000)):
                break
        elif step == "tool":
            if w.tool():
                break
        elif step == "attempt":
            w.attempt()
        elif w.wait(step):
            return _done(w, claim, w.now, "cancelled")
    else:
        if rng.random() < 0.2:  # still going: the trace runs to "now"
            if rng.random() < 0.5:
                now = w.now + w.gap(10, 5_000_000)
                w.wait(rng.choice(("approval", "park")), until=now)
                w.kinds.add("open_wait")
                return _done(w, claim, None, "waiting", now=now)
            return _done(w, claim, None, "running", now=w.now + w.gap())
        final = rng.choice((RunFinished("done"), RunFailed("boom", ours=False)))
        status = "finished" if isinstance(final, RunFinished) else "failed"
        w.write(w.now + w.gap(), final)
        return _done(w, claim, w.now, status)
    w.write(w.now + w.gap(), RunCancelled("cancel_requested"))
    return _done(w, claim, w.now, "cancelled")


def _done(w: _Walk, claim: int | None, ended: int | None, status: str, *,
          now: int | None = None) -> GeneratedRun:
    if ended is not None:
        # Webhook bookkeeping after the end is not run time.
        w.write(ended + 5_000, WebhookDelivered("https://example.com/hook", 1, 200))
    wall = ended if ended is not None else now
    assert wall is not None
    row = {"status": status, "agent_id": AgentId.new().uuid, "agent_version": 1,
           "created_at": T0, "started_at": when(claim) if claim is not None else None,
           "finished_at": when(ended) if ended is not None else None,
           "now": when(now if now is not None else ended + 10_000 if ended else 0)}
    return GeneratedRun(row, w.events, w.truth, wall, w.kinds)
