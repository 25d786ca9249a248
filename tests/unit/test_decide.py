"""Every branch of the agent loop's decision (runs/decide.py), from a log of typed events
folded into a RunState: no database, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from tenantry.agents.spec import AgentSpec, ChildAgent, Limits
from tenantry.runs.decide import (
    AwaitActivity,
    AwaitApproval,
    AwaitChild,
    CallModel,
    CallTool,
    Cancel,
    CompleteActivity,
    CompleteChild,
    Fail,
    Finish,
    RecordUnknown,
    RequestActivity,
    RequestApproval,
    RequestChild,
    StopForBudget,
    decide,
    idempotency_key,
)
from tenantry.runs.events import (
    AUTHORIZATION_REQUIRED,
    ActivityRequested,
    ActivityReturned,
    ApprovalDecided,
    ApprovalRequested,
    CancelRequested,
    ChildRunEnded,
    ChildRunStarted,
    Event,
    ModelReplied,
    Payload,
    RunCreated,
    RunFinished,
    RunParked,
    ToolCompleted,
    ToolStarted,
)
from tenantry.runs.state import RunState

RUN = "run_1"
AT = datetime(2026, 1, 1, tzinfo=UTC)
SPEC = AgentSpec(model="m", system_prompt="be brief", tools=("lookup", "refund"),
                 needs_approval=("refund",))


def folded(*payloads: Payload) -> RunState:
    events = [Event.of(seq, p, AT)
              for seq, p in enumerate((RunCreated("agt_1", 1, "normal", input="hi"),
                                       *payloads), start=1)]
    return RunState.fold(events)


def replied(text: str = "", *calls: dict[str, Any], tokens: int = 10,
            cost: int = 5) -> ModelReplied:
    return ModelReplied(text, list(calls), {"input_tokens": tokens, "output_tokens": 0},
                        "openai", "acct", "m", cost, "p1", 1.0)


def call(name: str | None = "lookup", arguments: str | None = '{"q": 1}') -> dict[str, Any]:
    return {"id": "c1", "name": name, "arguments": arguments}


def key(reply_seq: int = 2, index: int = 0) -> str:
    return idempotency_key(RUN, reply_seq, index)


def test_a_new_run_calls_the_model() -> None:
    assert decide(folded(), SPEC, RUN) == CallModel()


def test_an_ended_run_decides_nothing() -> None:
    assert decide(folded(RunFinished("done")), SPEC, RUN) is None


def test_a_cancel_request_comes_first() -> None:
    assert decide(folded(replied("", call()), CancelRequested()), SPEC, RUN) == Cancel()


def test_a_reply_without_calls_is_the_answer() -> None:
    assert decide(folded(replied("the answer")), SPEC, RUN) == Finish("the answer")


def test_an_empty_reply_fails_the_run() -> None:
    assert decide(folded(replied("  ")), SPEC, RUN) == Fail("the model returned an empty reply")


def test_a_call_is_made_with_its_key() -> None:
    assert decide(folded(replied("", call())), SPEC, RUN) == CallTool(
        key(), 2, 0, "lookup", {"q": 1})


def test_the_next_call_follows_the_completed_ones() -> None:
    two = replied("", call(), {"id": "c2", "name": "lookup", "arguments": "{}"})
    state = folded(two, ToolCompleted(key(), "lookup", 2, 0, {"q": 1}, result="x"))
    assert decide(state, SPEC, RUN) == CallTool(key(2, 1), 2, 1, "lookup", {})


def test_after_every_call_completed_the_model_is_asked_again() -> None:
    state = folded(replied("", call()), ToolCompleted(key(), "lookup", 2, 0, {"q": 1},
                                                      result="x"))
    assert decide(state, SPEC, RUN) == CallModel()


@pytest.mark.parametrize(("raw", "tool", "error"), [
    (call(name=None), "", "the tool call has no tool name"),
    (call(arguments="[1]"), "lookup", "the arguments must be a JSON object"),
])
def test_a_malformed_call_gets_an_error_result(raw: dict[str, Any], tool: str,
                                               error: str) -> None:
    assert decide(folded(replied("", raw)), SPEC, RUN) == CallTool(key(), 2, 0, tool, None,
                                                                   error)


def test_arguments_that_are_not_json_get_an_error_result() -> None:
    decision = decide(folded(replied("", call(arguments="{nope"))), SPEC, RUN)
    assert isinstance(decision, CallTool) and decision.arguments is None
    assert decision.invalid is not None and "not valid JSON" in decision.invalid


def test_an_interrupted_keyless_call_is_recorded_as_unknown() -> None:
    state = folded(replied("", call()), ToolStarted(key(), "lookup"))
    assert decide(state, SPEC, RUN) == RecordUnknown(key(), 2, 0, "lookup", {"q": 1})


def test_a_keyless_call_that_waited_for_its_servers_connection_is_made_afresh() -> None:
    """Its ToolStarted came before the gateway refused it for want of a connection; the
    park names the key, so once the run goes on the call is made, not taken as cut short."""
    state = folded(replied("", call()), ToolStarted(key(), "lookup"),
                   RunParked(AUTHORIZATION_REQUIRED, key=key(), tool_server="lookups"))
    assert decide(state, SPEC, RUN) == CallTool(key(), 2, 0, "lookup", {"q": 1})
    # Another call's park (a model wait names no key) leaves an interrupted call unknown.
    state = folded(replied("", call()), ToolStarted(key(), "lookup"),
                   RunParked("model unavailable"))
    assert decide(state, SPEC, RUN) == RecordUnknown(key(), 2, 0, "lookup", {"q": 1})


def test_an_interrupted_built_in_call_whose_effects_stayed_in_the_sandbox_is_made_afresh(
) -> None:
    """ToolStarted with fresh_sandbox: made again, with the same key, on a sandbox
    restored from the last save; the same call otherwise."""
    spec = AgentSpec(model="m", system_prompt="", tools=("run_python",))
    code = call("run_python", '{"code": "1"}')
    state = folded(replied("", code), ToolStarted(key(), "run_python", fresh_sandbox=True))
    assert decide(state, spec, RUN) == CallTool(key(), 2, 0, "run_python", {"code": "1"},
                                                fresh_sandbox=True)
    # Approved calls too: the approval is for the call, whichever attempt makes it.
    spec = AgentSpec(model="m", system_prompt="", tools=("run_python",),
                     needs_approval=("run_python",))
    state = folded(replied("", code),
                   ApprovalRequested("apr_1", key(), "run_python", {"code": "1"},
                                     AT.isoformat()),
                   ApprovalDecided("apr_1", key(), "approved"),
                   ToolStarted(key(), "run_python", fresh_sandbox=True))
    assert decide(state, spec, RUN) == CallTool(key(), 2, 0, "run_python", {"code": "1"},
                                                fresh_sandbox=True)


def test_a_tool_that_needs_approval_asks_for_one() -> None:
    state = folded(replied("", call("refund")))
    assert decide(state, SPEC, RUN) == RequestApproval(key(), 2, 0, "refund", {"q": 1})


def test_a_pending_approval_waits() -> None:
    state = folded(replied("", call("refund")),
                   ApprovalRequested("apr_1", key(), "refund", {"q": 1}, AT.isoformat()))
    assert decide(state, SPEC, RUN) == AwaitApproval("apr_1")


def decided(decision: str, comment: str | None = None) -> RunState:
    return folded(replied("", call("refund")),
                  ApprovalRequested("apr_1", key(), "refund", {"q": 1}, AT.isoformat()),
                  ApprovalDecided("apr_1", key(), decision, comment))


def test_an_approved_call_is_made() -> None:
    assert decide(decided("approved"), SPEC, RUN) == CallTool(key(), 2, 0, "refund",
                                                              {"q": 1})


@pytest.mark.parametrize(("decision", "comment", "error"), [
    ("denied", "too much", "the approver denied this call: too much"),
    ("denied", None, "the approver denied this call"),
    ("expired", None, "the approval request expired before anyone decided; ask again only "
                      "if it is still needed"),
])
def test_a_denied_or_expired_call_gets_an_error_result(decision: str, comment: str | None,
                                                      error: str) -> None:
    assert decide(decided(decision, comment), SPEC, RUN) == CallTool(
        key(), 2, 0, "refund", {"q": 1}, error)


def test_a_tool_outside_the_agent_needs_no_approval() -> None:
    spec = AgentSpec(model="m", system_prompt="", tools=("lookup",), needs_approval=("refund",))
    assert decide(folded(replied("", call("refund"))), spec, RUN) == CallTool(
        key(), 2, 0, "refund", {"q": 1})


@pytest.mark.parametrize(("limits", "stop"), [
    (Limits(max_steps=1), StopForBudget("max_steps", 1, 1)),
    (Limits(max_tokens=10), StopForBudget("max_tokens", 10, 10)),
    (Limits(max_cost_micros=5), StopForBudget("max_cost_micros", 5, 5)),
])
def test_the_agent_limits_stop_the_run(limits: Limits, stop: StopForBudget) -> None:
    spec = AgentSpec(model="m", system_prompt="", tools=("lookup",), limits=limits)
    state = folded(replied("", call()), ToolCompleted(key(), "lookup", 2, 0, {"q": 1},
                                                      result="x"))
    assert decide(state, spec, RUN) == stop


# -- activities as tools (ADR 0015) -------------------------------------------------------

ACTIVITY_SPEC = AgentSpec(model="m", system_prompt="be brief",
                          tools=("lookup", "activity:send_invoice", "activity:books.close@2"),
                          needs_approval=("activity:books.close@2",))


def _activity_reply(name: str) -> ModelReplied:
    return ModelReplied("", [{"id": "c1", "name": name, "arguments": '{"order": 7}'}], {},
                        "openai", "a", "m", 0, "p", 1.0)


def test_the_model_calls_an_activity_by_its_function_name_and_the_run_enqueues_it() -> None:
    state = folded(_activity_reply("send_invoice"))
    key = idempotency_key(RUN, 2, 0)
    assert decide(state, ACTIVITY_SPEC, RUN) == RequestActivity(
        key, 2, 0, "activity:send_invoice", {"order": 7}, "send_invoice", None)
    # Enqueued: it waits, and never enqueues again while the task has not ended.
    waiting = folded(_activity_reply("send_invoice"),
                     ActivityRequested(key, "activity:send_invoice", "run_t", "send_invoice", 1))
    assert decide(waiting, ACTIVITY_SPEC, RUN) == AwaitActivity(key, "run_t")
    returned = ActivityReturned(key, "run_t", "finished", result={"ok": 1})
    ended = folded(_activity_reply("send_invoice"),
                   ActivityRequested(key, "activity:send_invoice", "run_t", "send_invoice", 1),
                   returned)
    assert decide(ended, ACTIVITY_SPEC, RUN) == CompleteActivity(
        key, 2, 0, "activity:send_invoice", {"order": 7}, returned)
    # An ending read before the request (a park raced the task's end) still completes it.
    raced = folded(_activity_reply("send_invoice"), returned)
    assert isinstance(decide(raced, ACTIVITY_SPEC, RUN), CompleteActivity)


def test_a_pinned_activity_keeps_its_version_and_its_approval() -> None:
    state = folded(_activity_reply("books_close"))
    assert decide(state, ACTIVITY_SPEC, RUN) == RequestApproval(
        idempotency_key(RUN, 2, 0), 2, 0, "activity:books.close@2", {"order": 7})
    asked = folded(_activity_reply("books_close"),
                   ApprovalRequested("apr_1", idempotency_key(RUN, 2, 0),
                                     "activity:books.close@2", {"order": 7}, "later"),
                   ApprovalDecided("apr_1", idempotency_key(RUN, 2, 0), "approved"))
    assert decide(asked, ACTIVITY_SPEC, RUN) == RequestActivity(
        idempotency_key(RUN, 2, 0), 2, 0, "activity:books.close@2", {"order": 7},
        "books.close", 2)


def test_an_activity_the_version_does_not_list_is_refused_by_the_gateway_as_any_tool() -> None:
    state = folded(_activity_reply("other_activity"))
    decision = decide(state, ACTIVITY_SPEC, RUN)
    assert isinstance(decision, CallTool) and decision.tool == "other_activity"


# -- child runs (runs/child_step.py) ----------------------------------------------------

KIDS = AgentSpec(model="m", system_prompt="delegate",
                 children=(ChildAgent("agt_kid", None, "researcher"),),
                 limits=Limits(max_cost_micros=1000))


def start_call(index: int, agent: str = "researcher", task: str = "look") -> dict[str, Any]:
    return {"id": f"c{index}", "name": "start_agent",
            "arguments": orjson.dumps({"agent": agent, "input": task}).decode()}


def test_every_start_agent_call_of_a_reply_starts_before_the_run_waits() -> None:
    reply = replied("", start_call(0), start_call(1, task="other"))
    first = decide(folded(reply), KIDS, RUN)
    assert isinstance(first, RequestChild) and first.key == idempotency_key(RUN, 2, 0)
    assert first.child.agent_id == "agt_kid" and first.input == "look"
    started = ChildRunStarted(first.key, "start_agent", "run_a", "agt_kid", 1, 400)
    second = decide(folded(reply, started), KIDS, RUN)
    assert isinstance(second, RequestChild) and second.key == idempotency_key(RUN, 2, 1)
    both = folded(reply, started,
                  ChildRunStarted(second.key, "start_agent", "run_b", "agt_kid", 1, 400))
    assert decide(both, KIDS, RUN) == AwaitChild(first.key, "run_a")


def test_a_childs_ending_is_the_calls_result_and_its_spend_the_parents() -> None:
    reply = replied("", start_call(0), cost=100)
    key = idempotency_key(RUN, 2, 0)
    ended = ChildRunEnded(key, "run_a", "finished", 950, answer="north")
    state = folded(reply, ChildRunStarted(key, "start_agent", "run_a", "agt_kid", 1, 900),
                   ended)
    decision = decide(state, KIDS, RUN)
    assert isinstance(decision, CompleteChild) and decision.ended == ended
    done = ToolCompleted(key, "start_agent", 2, 0, {"agent": "researcher", "input": "look"},
                         server=None, result="north")
    # 100 of its own and 950 of its child's: past its 1000.
    assert decide(folded(reply, ChildRunStarted(key, "start_agent", "run_a", "agt_kid", 1,
                                                900), ended, done), KIDS, RUN) == (
        StopForBudget("max_cost_micros", 1050, 1000))


def test_a_child_stops_at_the_cap_its_parent_gave_it() -> None:
    events = [Event.of(1, RunCreated("agt_kid", 1, "normal", input="look", depth=1,
                                     cost_cap_micros=50), AT),
              Event.of(2, replied("", {"id": "c0", "name": "lookup", "arguments": "{}"},
                                  cost=60), AT)]
    state = RunState.fold(events)
    state.replies[-1].completed[0] = ToolCompleted(
        f"{RUN}:2:0", "lookup", 2, 0, {}, server=None, result="x")
    assert decide(state, SPEC, RUN) == StopForBudget("max_cost_micros", 60, 50)


@pytest.mark.parametrize(("arguments", "error"), [
    ({"agent": "stranger", "input": "x"}, "`agent` must name one of the agents"),
    ({"agent": "researcher", "input": ""}, "`input` must be the child's task"),
    ({"agent": "researcher"}, "`input` must be the child's task"),
])
def test_a_start_agent_call_off_the_list_is_a_tool_error(arguments: dict[str, Any],
                                                         error: str) -> None:
    reply = replied("", {"id": "c0", "name": "start_agent",
                         "arguments": orjson.dumps(arguments).decode()})
    decision = decide(folded(reply), KIDS, RUN)
    assert isinstance(decision, CallTool) and decision.invalid is not None
    assert decision.invalid.startswith(error)


def test_without_children_start_agent_is_an_ordinary_tool_name() -> None:
    reply = replied("", start_call(0))
    decision = decide(folded(reply), SPEC, RUN)
    assert isinstance(decision, CallTool) and decision.invalid is None
    assert decision.tool == "start_agent"  # the gateway refuses it: not on the list
