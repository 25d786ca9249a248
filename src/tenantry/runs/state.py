"""A run's state, folded from its event log. Pure: the same events give the same state on
any worker, which is what lets any worker resume any run (invariant 1) and what replay
relies on (invariant 11)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tenantry.runs.events import TERMINAL_EVENTS, Event, EventType


@dataclass(slots=True)
class Reply:
    """One recorded ModelReplied: the slot it was saved in, and the calls it asked for."""

    seq: int
    text: str
    calls: list[dict[str, Any]]
    completed: dict[int, dict[str, Any]] = field(default_factory=dict)  # call index → data

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
    parked: int = 0  # RunParked since the last model reply: the next delay doubles
    sandbox_ref: str | None = None  # the last save of the run's sandbox files (a blob ref)
    # Where the last model reply came from: the run sticks to that account (its prompt
    # cache is there) and any change of model is recorded as a ModelFallback.
    account: str = ""
    model: str = ""

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
        data = event.data
        if event.type == EventType.RUN_CREATED:
            if "input" in data:
                self.input = data["input"]
        elif event.type == EventType.MODEL_REPLIED:
            self.replies.append(Reply(event.seq, data.get("text", ""), list(data.get("calls", []))))
            self.parked = 0
            self.steps += 1
            usage = data.get("usage", {})
            self.input_tokens += int(usage.get("input_tokens", 0))
            self.output_tokens += int(usage.get("output_tokens", 0))
            self.cost_micros += int(data.get("cost_micros", 0))
            self.account = str(data.get("account", ""))
            self.model = str(data.get("model", ""))
        elif event.type == EventType.TOOL_COMPLETED:
            reply = self._reply_at(int(data["reply_seq"]))
            reply.completed[int(data["call_index"])] = data
            # Sandbox time is part of the run's cost (and of its max_cost_micros).
            self.cost_micros += int((data.get("sandbox") or {}).get("cost_micros", 0))
        elif event.type == EventType.CANCEL_REQUESTED:
            self.cancel_requested = True
        elif event.type == EventType.APPROVAL_REQUESTED:
            self.approvals[data["key"]] = Approval(data["approval_id"], "pending")
        elif event.type == EventType.APPROVAL_DECIDED:
            approval = self.approvals.get(data["key"])
            if approval is not None:
                approval.status = data["decision"]
                approval.comment = data.get("comment")
        elif event.type == EventType.TOOL_STARTED:
            self.started.add(data["key"])
        elif event.type == EventType.RUN_PARKED:
            self.parked += 1
        elif event.type == EventType.SANDBOX_SAVED:
            self.sandbox_ref = str(data["ref"])
        elif event.type in TERMINAL_EVENTS:
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
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens
