"""The agent loop's decisions, as a pure function of the run's state and its agent version.

The driver executes decisions; replay compares them with what a recorded log did. Keeping
every choice here (and no I/O) is what makes replay exact (invariant 11)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import orjson

from tenantry.agents import activity_tools, child_tools
from tenantry.agents.spec import AgentSpec, ChildAgent
from tenantry.runs import repeats, summaries
from tenantry.runs.events import ActivityReturned, ChildRunEnded
from tenantry.runs.state import Reply, RunState


@dataclass(frozen=True, slots=True)
class CallModel:
    pass


@dataclass(frozen=True, slots=True)
class CallTool:
    key: str
    reply_seq: int
    call_index: int
    tool: str
    arguments: dict[str, Any] | None
    # Set when the call cannot be made as written: the model gets this error as the result.
    invalid: str | None = None
    # An earlier attempt of this built-in call was interrupted: make it again on a sandbox
    # restored from the run's last save (ToolStarted.fresh_sandbox).
    fresh_sandbox: bool = False


@dataclass(frozen=True, slots=True)
class OneCall:
    """One tool call of one model reply, by its idempotency key and place in the reply."""

    key: str
    reply_seq: int
    call_index: int
    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RequestApproval(OneCall):
    """Park the run until a person approves or denies this exact call."""


@dataclass(frozen=True, slots=True)
class AwaitApproval:
    """An approval is pending: nothing to do until it is decided (the run waits)."""

    approval_id: str


@dataclass(frozen=True, slots=True)
class RecordUnknown(OneCall):
    """A call to a tool that cannot honour keys was started and never completed: it may
    or may not have happened, so it is not repeated; the model is told to check."""


@dataclass(frozen=True, slots=True)
class RequestActivity(OneCall):
    """Enqueue the activity task of this call (its key is the task's key) and wait for it
    with the slot given back (ADR 0015). ``version`` None: the latest at this moment."""

    activity: str
    version: int | None


@dataclass(frozen=True, slots=True)
class AwaitActivity:
    """The call's task was enqueued and has not ended: wait again, enqueue nothing."""

    key: str
    task_id: str


@dataclass(frozen=True, slots=True)
class CompleteActivity(OneCall):
    """The call's task ended: its result (or error) becomes the call's result."""

    returned: ActivityReturned


@dataclass(frozen=True, slots=True)
class RequestChild(OneCall):
    """Start the child run of this start_agent call (its key is the child's key) and wait
    for it with the slot given back."""

    child: ChildAgent
    input: str


@dataclass(frozen=True, slots=True)
class AwaitChild:
    """The call's child run was started and its ending is not in the log: read whether
    it has ended, and wait again if not."""

    key: str
    run_id: str


@dataclass(frozen=True, slots=True)
class CompleteChild(OneCall):
    """The call's child run ended: its answer (or why it failed) is the call's result."""

    ended: ChildRunEnded


@dataclass(frozen=True, slots=True)
class Finish:
    answer: str


@dataclass(frozen=True, slots=True)
class Fail:
    reason: str


@dataclass(frozen=True, slots=True)
class Cancel:
    pass


@dataclass(frozen=True, slots=True)
class StopForBudget:
    limit: str
    used: int
    maximum: int
    reason: str | None = None  # "repeating" for a repeat_limit stop (ADR 0031)


@dataclass(frozen=True, slots=True)
class RefusedRepeat(CallTool):
    """A call the model repeated up to the agent's repeat limit: not made, the model gets
    ``invalid`` (naming the repeat) as its tool error (ADR 0031)."""


@dataclass(frozen=True, slots=True)
class Summarize:
    """Before the next model call, summarize the steps up to ``upto_seq`` (ADR 0031)."""

    upto_seq: int


Decision = (CallModel | CallTool | RequestApproval | AwaitApproval | RecordUnknown
            | RequestActivity | AwaitActivity | CompleteActivity | RequestChild | AwaitChild
            | CompleteChild | Finish | Fail | Cancel | StopForBudget | Summarize)


def idempotency_key(run_id: str, reply_seq: int, call_index: int) -> str:
    """Derived from the call's place in the log, so every retry sends the same key."""
    return f"{run_id}:{reply_seq}:{call_index}"


def decide(state: RunState, spec: AgentSpec, run_id: str) -> Decision | None:
    """What the run does next; ``None`` once it has ended."""
    if state.ended is not None:
        return None
    if state.cancel_requested:
        return Cancel()
    reply = state.last_reply
    if reply is not None:
        index = reply.next_call()
        if index is not None:
            call = _named(_tool_call(run_id, reply.seq, index, reply.calls[index]), spec)
            decision = _repeat(call, state, spec) or _gate(call, state, spec)
            if isinstance(decision, AwaitChild):
                # Its siblings of the same reply start before the run waits: side by side.
                return _sibling_to_start(run_id, reply, index, state, spec) or decision
            return decision
        if not reply.calls:
            if not reply.text.strip():
                return Fail("the model returned an empty reply")
            return Finish(reply.text)
    limits = spec.limits
    if state.steps >= limits.max_steps:
        return StopForBudget("max_steps", state.steps, limits.max_steps)
    if state.total_tokens >= limits.max_tokens:
        return StopForBudget("max_tokens", state.total_tokens, limits.max_tokens)
    max_cost = limits.max_cost_micros
    if state.cost_cap_micros is not None:  # a child: what its parent had left for it
        max_cost = min(max_cost, state.cost_cap_micros)
    if state.spent_micros >= max_cost:
        return StopForBudget("max_cost_micros", state.spent_micros, max_cost)
    return _summarize(state, spec) or CallModel()


def _repeat(call: CallTool, state: RunState, spec: AgentSpec) -> Decision | None:
    """A call the model keeps repeating: refused the limit-th time, the run stopped the
    next (ADR 0031); None for any other call."""
    limit = spec.limits.repeat_limit
    found = repeats.check(state.replies, call.call_index, limit)
    if found is None:
        return None
    if found.times > limit:
        return StopForBudget(repeats.LIMIT, found.times, limit, repeats.REPEATING)
    return RefusedRepeat(call.key, call.reply_seq, call.call_index, call.tool, call.arguments,
                         found.message(limit))


def _summarize(state: RunState, spec: AgentSpec) -> Summarize | None:
    """The next prompt passes the agent's summarize threshold: summarize first."""
    upto_seq = summaries.due(state, spec)
    return None if upto_seq is None else Summarize(upto_seq)


def _gate(call: CallTool, state: RunState, spec: AgentSpec) -> Decision:
    """What stands between a well-formed call and the tool: an interrupted attempt at a
    tool that cannot dedupe, and approval for the tools that need one."""
    if call.invalid is not None or call.arguments is None:
        return call
    if call.key in state.started:
        return RecordUnknown(call.key, call.reply_seq, call.call_index, call.tool,
                             call.arguments)
    if call.tool in spec.needs_approval and call.tool in spec.tools:
        approval = state.approvals.get(call.key)
        if approval is None:
            return RequestApproval(call.key, call.reply_seq, call.call_index, call.tool,
                                   call.arguments)
        if approval.status == "pending":
            return AwaitApproval(approval.approval_id)
        if approval.status == "denied":
            reason = f": {approval.comment}" if approval.comment else ""
            return replace(call, invalid=f"the approver denied this call{reason}")
        if approval.status == "expired":
            return replace(call, invalid="the approval request expired before anyone decided; "
                                         "ask again only if it is still needed")
    activity = activity_tools.parse(call.tool)
    if activity is not None:
        return _activity_step(call, call.arguments, activity, state)
    if call.tool == child_tools.TOOL and spec.children:
        return _child_step(call, call.arguments, spec, state)
    if call.key in state.restarted:  # a built-in call cut short: made again, afresh
        return replace(call, fresh_sandbox=True)
    return call


def _named(call: CallTool, spec: AgentSpec) -> CallTool:
    """The model calls an activity by its function name: the call is the tools entry's."""
    if call.invalid is not None and not call.tool:
        return call
    activity = activity_tools.resolve(spec.tools, call.tool)
    if activity is None or activity.entry == call.tool:
        return call
    return replace(call, tool=activity.entry)


def _activity_step(call: CallTool, arguments: dict[str, Any],
                   activity: activity_tools.ActivityTool, state: RunState) -> Decision:
    """Enqueue once, wait while the task runs, then take its ending as the result."""
    returned = state.activity_returns.get(call.key)
    if returned is not None:
        return CompleteActivity(call.key, call.reply_seq, call.call_index, call.tool,
                                arguments, returned)
    task_id = state.activity_tasks.get(call.key)
    if task_id is not None:
        return AwaitActivity(call.key, task_id)
    return RequestActivity(call.key, call.reply_seq, call.call_index, call.tool, arguments,
                           activity.name, activity.version)


def _child_step(call: CallTool, arguments: dict[str, Any], spec: AgentSpec,
                state: RunState) -> Decision:
    """Start once, wait while the child runs, then take its ending as the result."""
    ended = state.child_ends.get(call.key)
    if ended is not None:
        return CompleteChild(call.key, call.reply_seq, call.call_index, call.tool, arguments,
                             ended)
    started = state.child_runs.get(call.key)
    if started is not None:
        return AwaitChild(call.key, started.run_id)
    child = child_tools.find(spec.children, arguments.get("agent"))
    if child is None:
        names = ", ".join(c.name or c.agent_id for c in spec.children)
        return replace(call, invalid=f"`agent` must name one of the agents you may start: "
                                     f"{names}")
    task = arguments.get("input")
    if not isinstance(task, str) or not task.strip():
        return replace(call, invalid="`input` must be the child's task, as text")
    return RequestChild(call.key, call.reply_seq, call.call_index, call.tool, arguments,
                        child, task)


def _sibling_to_start(run_id: str, reply: Reply, index: int, state: RunState,
                      spec: AgentSpec) -> RequestChild | None:
    """A later start_agent call of the reply whose child has not been started yet. A call
    repeat detection will refuse is not started (that verdict depends only on the model's
    requests, so it is the same when the call's turn comes)."""
    for later in range(index + 1, len(reply.calls)):
        if later in reply.completed:
            continue
        call = _named(_tool_call(run_id, reply.seq, later, reply.calls[later]), spec)
        if call.tool != child_tools.TOOL or call.arguments is None or call.invalid:
            continue
        if _repeat(call, state, spec) is not None:
            continue
        decision = _child_step(call, call.arguments, spec, state)
        if isinstance(decision, RequestChild):
            return decision
    return None


def _tool_call(run_id: str, reply_seq: int, index: int, call: dict[str, Any]) -> CallTool:
    key = idempotency_key(run_id, reply_seq, index)
    name = str(call.get("name") or "")
    if not name:
        return CallTool(key, reply_seq, index, "", None, "the tool call has no tool name")
    raw = call.get("arguments") or "{}"
    try:
        arguments = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return CallTool(key, reply_seq, index, name, None,
                        f"the arguments are not valid JSON ({exc}); send a JSON object")
    if not isinstance(arguments, dict):
        return CallTool(key, reply_seq, index, name, None,
                        "the arguments must be a JSON object")
    return CallTool(key, reply_seq, index, name, arguments)
