"""A run's state, folded from its event log. Pure: the same events give the same state on
any worker, which is what lets any worker resume any run (invariant 1) and what replay
relies on (invariant 11)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from tenantry.agents.spec import AgentSpec
from tenantry.runs.events import (
    ABSENT,
    TERMINAL_EVENTS,
    ActivityRequested,
    ActivityReturned,
    ApprovalDecided,
    ApprovalRequested,
    CancelRequested,
    ChildRunEnded,
    ChildRunStarted,
    Event,
    ModelReplied,
    RunCreated,
    RunParked,
    SandboxSaved,
    Summarized,
    ToolCompleted,
    ToolStarted,
)


@dataclass(slots=True)
class Reply:
    """One recorded ModelReplied: the slot it was saved in, and the calls it asked for."""

    seq: int
    text: str
    calls: list[dict[str, Any]]
    completed: dict[int, ToolCompleted] = field(default_factory=dict)  # by call index

    def next_call(self) -> int | None:
        for index in range(len(self.calls)):
            if index not in self.completed:
                return index
        return None


@dataclass(slots=True)
class Approval:
    approval_id: str
    status: str  # pending | approved | denied | expired
    comment: str | None = None


@dataclass(frozen=True, slots=True)
class Summary:
    """The last Summarized: its text stands for every step up to ``upto_seq``."""

    seq: int
    upto_seq: int
    text: str


@dataclass(slots=True)
class RunState:
    input: Any = None
    last_seq: int = 0
    replies: list[Reply] = field(default_factory=list)
    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0
    cancel_requested: bool = False
    ended: str | None = None  # the terminal event's type, once there is one
    approvals: dict[str, Approval] = field(default_factory=dict)  # by call key
    started: set[str] = field(default_factory=set)  # keys with a ToolStarted intent
    # Built-in calls whose interrupted attempt is repeated on a fresh sandbox (ToolStarted
    # with fresh_sandbox): their keys.
    restarted: set[str] = field(default_factory=set)
    # Activities called as tools (ADR 0015), by call key: the task enqueued, and how it ended.
    activity_tasks: dict[str, str] = field(default_factory=dict)
    activity_returns: dict[str, ActivityReturned] = field(default_factory=dict)
    # Child runs (runs/child_step.py), by call key: the child started, and how it ended.
    child_runs: dict[str, ChildRunStarted] = field(default_factory=dict)
    child_ends: dict[str, ChildRunEnded] = field(default_factory=dict)
    children_cost_micros: int = 0  # what ended children spent: part of this run's budget
    depth: int = 0  # 0: a run nobody started; a child's is its parent's + 1
    cost_cap_micros: int | None = None  # a child's share of its parent's budget
    stream: bool = False  # asked to stream every model call (ADR 0030)
    evaluation_id: str | None = None  # a run of an evaluation (ADR 0034)
    model_override: str | None = None  # its candidate's model, in place of the version's
    parked: int = 0  # RunParked since the last model reply: the next delay doubles
    sandbox_ref: str | None = None  # the last save of the run's sandbox files (a blob ref)
    # Where the last model reply came from: the run sticks to that account (its prompt
    # cache is there) and any change of model is recorded as a ModelFallback.
    account: str = ""
    model: str = ""
    summary: Summary | None = None  # the prompt's steps start after it (ADR 0031)

    def run_spec(self, spec: AgentSpec) -> AgentSpec:
        """The spec this run runs: its version's, with an evaluation candidate's model in
        place of the version's model (ADR 0034)."""
        if self.model_override is None or self.model_override == spec.model:
            return spec
        return replace(spec, model=self.model_override)

    @classmethod
    def fold(cls, events: list[Event], run_input: Any = None) -> RunState:
        state = cls(input=run_input)
        for event in events:
            state.apply(event)
        return state

    def apply(self, event: Event) -> None:
        if event.seq != self.last_seq + 1:
            raise ValueError(f"event log has a gap: seq {event.seq} after {self.last_seq}")
        self.last_seq = event.seq
        match event.payload:
            case RunCreated(input=run_input, depth=depth, cost_cap_micros=cap, stream=stream,
                            evaluation_id=evaluation_id, model=model):
                if run_input is not ABSENT:
                    self.input = run_input
                self.depth, self.cost_cap_micros = depth or 0, cap
                self.stream = stream
                self.evaluation_id, self.model_override = evaluation_id, model
            case ModelReplied() as reply:
                self.replies.append(Reply(event.seq, reply.text, list(reply.calls)))
                self.parked = 0
                self.steps += 1
                self.input_tokens += int(reply.usage.get("input_tokens", 0))
                self.output_tokens += int(reply.usage.get("output_tokens", 0))
                self.cost_micros += int(reply.cost_micros)
                self.account, self.model = reply.account, reply.model
            case ToolCompleted() as completed:
                self._reply_at(completed.reply_seq).completed[completed.call_index] = completed
                # Sandbox time is part of the run's cost (and of its max_cost_micros).
                self.cost_micros += int((completed.sandbox or {}).get("cost_micros", 0))
            case CancelRequested():
                self.cancel_requested = True
            case ApprovalRequested(key=key, approval_id=approval_id):
                self.approvals[key] = Approval(approval_id, "pending")
            case ApprovalDecided(key=key, decision=decision, comment=comment):
                approval = self.approvals.get(key)
                if approval is not None:
                    approval.status, approval.comment = decision, comment
            case ToolStarted(key=key, fresh_sandbox=False):
                self.started.add(key)
            case ToolStarted(key=key):
                self.restarted.add(key)
            case ActivityRequested(key=key, task_id=task_id):
                self.activity_tasks[key] = task_id
            case ActivityReturned(key=key) as returned:
                # The key names one task of this tenant, so its first ending is the one
                # (it may be read before the request: a park raced the task's end).
                self.activity_returns.setdefault(key, returned)
            case ChildRunStarted(key=key) as started:
                self.child_runs[key] = started
            case ChildRunEnded(key=key) as ended if key not in self.child_ends:
                self.child_ends[key] = ended
                self.children_cost_micros += ended.cost_micros
            case RunParked(key=str(key)):
                # A call that waited for its server's connection was not made: once the
                # run goes on it is made afresh, not taken for one cut short by a crash.
                self.started.discard(key)
            case RunParked():
                self.parked += 1
            case SandboxSaved(ref=ref):
                self.sandbox_ref = ref
            case Summarized() as summarized:
                # Not a step, but billed and budgeted like one (max_tokens, max_cost_micros).
                self.summary = Summary(event.seq, summarized.upto_seq, summarized.summary)
                self.input_tokens += int(summarized.usage.get("input_tokens", 0))
                self.output_tokens += int(summarized.usage.get("output_tokens", 0))
                self.cost_micros += int(summarized.cost_micros)
            case _ if event.type in TERMINAL_EVENTS:
                self.ended = event.type

    def _reply_at(self, seq: int) -> Reply:
        for reply in reversed(self.replies):
            if reply.seq == seq:
                return reply
        raise ValueError(f"ToolCompleted refers to seq {seq}, which is not a ModelReplied")

    @property
    def last_reply(self) -> Reply | None:
        return self.replies[-1] if self.replies else None

    @property
    def spent_micros(self) -> int:
        """What counts against max_cost_micros: this run's own spend and its children's."""
        return self.cost_micros + self.children_cost_micros

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens
