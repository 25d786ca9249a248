"""Folding a run's log of typed events into its state (runs/state.py): pure, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tenantry.runs.events import (
    ApprovalDecided,
    ApprovalRequested,
    BudgetStopped,
    CancelRequested,
    EgressRefused,
    Event,
    ModelReplied,
    Payload,
    RunCreated,
    RunParked,
    RunResumed,
    SandboxSaved,
    ToolCompleted,
    ToolStarted,
    WebhookDelivered,
)
from tenantry.runs.state import RunState

AT = datetime(2026, 1, 1, tzinfo=UTC)


def log(*payloads: Payload) -> list[Event]:
    return [Event.of(seq, p, AT) for seq, p in enumerate(payloads, start=1)]


def reply(cost: int = 3, account: str = "acct") -> ModelReplied:
    return ModelReplied("", [{"id": "c", "name": "t", "arguments": "{}"}],
                        {"input_tokens": 7, "output_tokens": 2}, "openai", account, "m",
                        cost, "p1", 1.0)


def test_input_comes_from_run_created_unless_it_was_stored_beside_it() -> None:
    assert RunState.fold(log(RunCreated("a", 1, "normal", input=None))).input is None
    big = RunCreated("a", 1, "normal", input_ref="run.input", input_bytes=99_999)
    assert RunState.fold(log(big), run_input="from the row").input == "from the row"


def test_replies_count_steps_tokens_cost_and_where_they_came_from() -> None:
    state = RunState.fold(log(RunCreated("a", 1, "normal", input="x"), reply(3, "a1"),
                              reply(4, "a2")))
    assert (state.steps, state.input_tokens, state.output_tokens) == (2, 14, 4)
    assert (state.cost_micros, state.total_tokens, state.account) == (7, 18, "a2")
    assert state.last_reply is not None and state.last_reply.seq == 3


def test_a_completed_call_belongs_to_its_reply_and_adds_its_sandbox_cost() -> None:
    done = ToolCompleted("k", "t", 2, 0, {}, result="ok", sandbox={"cost_micros": 11})
    state = RunState.fold(log(RunCreated("a", 1, "normal"), reply(), done))
    assert state.replies[0].completed == {0: done} and state.replies[0].next_call() is None
    assert state.cost_micros == 3 + 11


def test_a_result_for_a_seq_that_is_not_a_reply_is_refused() -> None:
    with pytest.raises(ValueError, match="not a ModelReplied"):
        RunState.fold(log(RunCreated("a", 1, "normal"), ToolCompleted("k", "t", 1, 0)))


def test_a_gap_in_the_log_is_refused() -> None:
    events = log(RunCreated("a", 1, "normal"), CancelRequested())
    with pytest.raises(ValueError, match="gap"):
        RunState.fold([events[0], Event.of(3, CancelRequested(), AT)])


def test_approvals_cancel_starts_parks_saves_and_the_end() -> None:
    state = RunState.fold(log(
        RunCreated("a", 1, "normal"), reply(), ToolStarted("k0", "t"),
        ApprovalRequested("apr_1", "k1", "t", {}, AT.isoformat()),
        ApprovalDecided("apr_1", "k1", "denied", "no"),
        ApprovalDecided("apr_2", "unknown-key", "approved"),
        RunParked("model unavailable"), RunParked("again"), SandboxSaved("blob_1", 10, 1.0),
        RunResumed("RunParked"), CancelRequested(), BudgetStopped("max_steps", 1, 1),
        WebhookDelivered("https://example.com", 1, 200),
        EgressRefused("k0", "evil.example", 443, "not_allowed"),  # no decision follows
    ))
    assert state.started == {"k0"} and state.cancel_requested
    approval = state.approvals["k1"]
    assert (approval.approval_id, approval.status, approval.comment) == ("apr_1", "denied", "no")
    assert set(state.approvals) == {"k1"}
    assert (state.parked, state.sandbox_ref, state.ended) == (2, "blob_1", "BudgetStopped")
    assert state.last_seq == 14


def test_a_new_reply_resets_the_park_count() -> None:
    state = RunState.fold(log(RunCreated("a", 1, "normal"), RunParked("x"), reply()))
    assert state.parked == 0
