"""Typed event payloads (runs/events/): each writes the JSON the log has always held and
reads it back; every event of the replay corpus parses and writes back equal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tenantry.runs.events import (
    ABSENT,
    PAYLOADS,
    ActivityAttempted,
    ActivityRequested,
    ActivityReturned,
    ActivityStarted,
    ApprovalDecided,
    ApprovalRequested,
    BudgetStopped,
    CancelRequested,
    ChildRunEnded,
    ChildRunStarted,
    EgressRefused,
    EventType,
    ModelFallback,
    ModelReplied,
    ModelRerouted,
    NewerEvent,
    Payload,
    RunCancelled,
    RunCreated,
    RunFailed,
    RunFinished,
    RunParked,
    RunResumed,
    SandboxSaved,
    SignalConsumed,
    Signalled,
    Summarized,
    ToolCompleted,
    ToolStarted,
    WebhookDelivered,
    WebhookFailed,
    parse,
)

CORPUS = Path(__file__).parents[1] / "replay_corpus"

#: One of each payload type, with the data it is stored as.
EXAMPLES: list[tuple[Payload, dict[str, Any]]] = [
    (RunCreated("agt_1", 2, "normal", input=None),
     {"agent_id": "agt_1", "version": 2, "priority": "normal", "input": None}),
    (RunCreated("agt_1", 2, "high", input_ref="run.input", input_bytes=9000,
                webhook_url="https://h", kind="task"),
     {"agent_id": "agt_1", "version": 2, "priority": "high", "input_ref": "run.input",
      "input_bytes": 9000, "webhook_url": "https://h", "kind": "task"}),
    (ModelReplied("hi", [], {"input_tokens": 1}, "openai", "a", "m", 3, "p1", 1.5,
                  waited_ms=2.0, prompt_sha256="ab", basis_seq=4),
     {"text": "hi", "calls": [], "usage": {"input_tokens": 1}, "provider": "openai",
      "account": "a", "model": "m", "cost_micros": 3, "price_version": "p1",
      "latency_ms": 1.5, "waited_ms": 2.0, "prompt_sha256": "ab", "basis_seq": 4}),
    # The snapshot the provider reported: written only when it reported one.
    (ModelReplied("hi", [], {}, "openai", "a", "gpt-4o", 3, "p1", 1.5,
                  provider_model="gpt-4o-2024-08-06"),
     {"text": "hi", "calls": [], "usage": {}, "provider": "openai", "account": "a",
      "model": "gpt-4o", "cost_micros": 3, "price_version": "p1", "latency_ms": 1.5,
      "provider_model": "gpt-4o-2024-08-06"}),
    (ToolStarted("k", "t", basis_seq=1), {"key": "k", "tool": "t", "basis_seq": 1}),
    (ToolCompleted("k", "t", 2, 0, error="bad"),
     {"key": "k", "tool": "t", "reply_seq": 2, "call_index": 0, "error": "bad"}),
    (ToolCompleted("k", "t", 2, 0, {"a": 1}, server=None, duration_ms=1.0, result=None,
                   sandbox={"backend": "bwrap"}, truncated=True, output_bytes=9,
                   output_ref="r"),
     {"key": "k", "tool": "t", "reply_seq": 2, "call_index": 0, "arguments": {"a": 1},
      "server": None, "duration_ms": 1.0, "result": None, "sandbox": {"backend": "bwrap"},
      "truncated": True, "output_bytes": 9, "output_ref": "r"}),
    (ApprovalRequested("apr_1", "k", "t", {}, "2026-01-01T00:00:00+00:00"),
     {"approval_id": "apr_1", "key": "k", "tool": "t", "arguments": {},
      "expires_at": "2026-01-01T00:00:00+00:00"}),
    (ApprovalDecided("apr_1", "k", "approved", "ok", "operator"),
     {"approval_id": "apr_1", "key": "k", "decision": "approved", "comment": "ok",
      "decided_by": "operator"}),
    (ModelFallback("m0", "m1", "down"), {"from": "m0", "to": "m1", "reason": "down"}),
    (ModelRerouted("a0", "a1", "m", "down"),
     {"from": "a0", "to": "a1", "model": "m", "reason": "down"}),
    (RunParked("waiting_for_signal"), {"reason": "waiting_for_signal"}),
    (RunParked("x", "2026-01-01T00:00:00+00:00", ["m"]),
     {"reason": "x", "until": "2026-01-01T00:00:00+00:00", "models": ["m"]}),
    (RunResumed("RunParked"), {"after": "RunParked"}),
    (SandboxSaved("blob", 10, 1.5), {"ref": "blob", "bytes": 10, "duration_ms": 1.5}),
    (BudgetStopped("max_steps", 3, 3), {"limit": "max_steps", "used": 3, "max": 3}),
    (BudgetStopped("repeat_limit", 4, 3, reason="repeating"),
     {"limit": "repeat_limit", "used": 4, "max": 3, "reason": "repeating"}),
    (Summarized(9, "did a, b", {"input_tokens": 90, "output_tokens": 5}, "openai", "acct",
                "m", 12, "p1", 3.5, waited_ms=4.0, prompt_sha256="ab", basis_seq=9),
     {"upto_seq": 9, "summary": "did a, b", "usage": {"input_tokens": 90, "output_tokens": 5},
      "provider": "openai", "account": "acct", "model": "m", "cost_micros": 12,
      "price_version": "p1", "latency_ms": 3.5, "waited_ms": 4.0, "prompt_sha256": "ab",
      "basis_seq": 9}),
    (CancelRequested(), {}),
    (RunFinished(None), {"answer": None}),
    (RunFailed("boom", ours=True), {"error": "boom", "ours": True}),
    (RunFailed("no", ours=False, cause="model_provider", details={"x": 1}),
     {"error": "no", "ours": False, "cause": "model_provider", "details": {"x": 1}}),
    (RunCancelled("cancel_requested"), {"reason": "cancel_requested"}),
    (WebhookDelivered("https://h", 1, 200), {"url": "https://h", "attempts": 1,
                                             "status_code": 200}),
    (WebhookFailed("https://h", 8, error="timeout"),
     {"url": "https://h", "attempts": 8, "error": "timeout"}),
    (Signalled("go", None), {"name": "go", "data": None}),
    (SignalConsumed(3, "go"), {"signal_seq": 3, "name": "go"}),
    (EgressRefused("run_x:2:0", "169.254.169.254", 80, "metadata_address"),
     {"key": "run_x:2:0", "host": "169.254.169.254", "port": 80,
      "reason_code": "metadata_address"}),
    (EgressRefused("run_x:2:0", "evil.example", 443, "not_allowed", 7),
     {"key": "run_x:2:0", "host": "evil.example", "port": 443, "reason_code": "not_allowed",
      "count": 7}),
    (ActivityAttempted(2, "retryable", "crashed: SIGSEGV", 139, True, "", "", 12.5, "sb_1"),
     {"attempt": 2, "status": "retryable", "error": "crashed: SIGSEGV", "exit_code": 139,
      "killed_sandbox": True, "stdout": "", "stderr": "", "duration_ms": 12.5,
      "sandbox_id": "sb_1"}),
    (ActivityAttempted(1, "failed", "exit_code: 1", 1, False, "", "", 9.0, "sb_2",
                       egress_refused=[{"host": "169.254.169.254", "port": 80,
                                        "reason_code": "metadata_address"}],
                       egress_refused_count=40,
                       egress_refused_by_reason={"metadata_address": 40}),
     {"attempt": 1, "status": "failed", "error": "exit_code: 1", "exit_code": 1,
      "killed_sandbox": False, "stdout": "", "stderr": "", "duration_ms": 9.0,
      "sandbox_id": "sb_2",
      "egress_refused": [{"host": "169.254.169.254", "port": 80,
                          "reason_code": "metadata_address"}],
      "egress_refused_count": 40, "egress_refused_by_reason": {"metadata_address": 40}}),
    (ActivityStarted(1, "sb_1"), {"attempt": 1, "sandbox_id": "sb_1"}),
    (ActivityRequested("run_x:2:0", "activity:send_invoice", "run_y", "send_invoice", 1),
     {"key": "run_x:2:0", "tool": "activity:send_invoice", "task_id": "run_y",
      "activity": "send_invoice", "version": 1}),
    (ActivityReturned("run_x:2:0", "run_y", "finished", result={"ok": True}),
     {"key": "run_x:2:0", "task_id": "run_y", "status": "finished", "result": {"ok": True}}),
    (ActivityReturned("run_x:2:0", "run_y", "failed", error="the activity failed: x"),
     {"key": "run_x:2:0", "task_id": "run_y", "status": "failed",
      "error": "the activity failed: x"}),
    (RunCreated("agt_1", 1, "batch", input="find x", parent_run_id="run_x",
                parent_key="run_x:2:0", depth=1, cost_cap_micros=5000),
     {"agent_id": "agt_1", "version": 1, "priority": "batch", "input": "find x",
      "parent_run_id": "run_x", "parent_key": "run_x:2:0", "depth": 1,
      "cost_cap_micros": 5000}),
    (ChildRunStarted("run_x:2:0", "start_agent", "run_y", "agt_1", 3, 5000),
     {"key": "run_x:2:0", "tool": "start_agent", "run_id": "run_y", "agent_id": "agt_1",
      "version": 3, "cost_cap_micros": 5000}),
    (ChildRunEnded("run_x:2:0", "run_y", "finished", 120, answer="north"),
     {"key": "run_x:2:0", "run_id": "run_y", "status": "finished", "cost_micros": 120,
      "answer": "north"}),
    (ChildRunEnded("run_x:2:0", "run_y", "failed", 0, error="the child run failed"),
     {"key": "run_x:2:0", "run_id": "run_y", "status": "failed", "cost_micros": 0,
      "error": "the child run failed"}),
]


def test_every_payload_type_has_an_example() -> None:
    assert {type(p) for p, _ in EXAMPLES} == set(PAYLOADS.values())


@pytest.mark.parametrize(("payload", "data"), EXAMPLES,
                         ids=[f"{p.TYPE}-{i}" for i, (p, _) in enumerate(EXAMPLES)])
def test_a_payload_writes_its_data_and_reads_it_back(payload: Payload,
                                                     data: dict[str, Any]) -> None:
    assert payload.to_data() == data
    assert parse(payload.TYPE, data) == payload and payload.FORMAT == 1


def test_absent_and_null_are_different() -> None:
    assert RunCreated.from_data({"agent_id": "a", "version": 1, "priority": "n"}).input \
        is ABSENT
    assert "server" not in ToolCompleted("k", "t", 1, 0).to_data()


def test_unknown_types_and_newer_formats_are_refused() -> None:
    with pytest.raises(NewerEvent):
        parse("NoSuchEvent", {})
    with pytest.raises(NewerEvent) as raised:
        parse(EventType.RUN_FINISHED, {"answer": 1}, format=99)
    assert (raised.value.type, raised.value.format) == ("RunFinished", 99)


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.json")), ids=lambda p: p.stem)
def test_the_replay_corpus_parses_and_writes_back_equal(path: Path) -> None:
    for event in orjson.loads(path.read_bytes())["events"]:
        assert parse(event["type"], event["data"]).to_data() == event["data"], event["seq"]
