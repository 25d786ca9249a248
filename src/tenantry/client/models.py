"""The typed answers: frozen dataclasses read from the API's JSON (docs/reference/api.md).

Each keeps the JSON it was read from in ``raw`` (left out of ``==`` and ``repr``): a field
the platform adds later is there before this client knows its name. Times are aware
``datetime`` values in UTC.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

__all__ = [
    "TERMINAL_EVENTS",
    "TERMINAL_STATUSES",
    "Agent",
    "AgentLimits",
    "AgentSummary",
    "Approval",
    "Event",
    "EventPage",
    "ModelDelta",
    "Page",
    "ReviewFlag",
    "Run",
    "StartedRun",
    "Usage",
]

T = TypeVar("T")

#: The events after which a run's stream ends.
TERMINAL_EVENTS = frozenset({"RunFinished", "RunFailed", "RunCancelled", "BudgetStopped"})
#: The statuses of a run that has ended.
TERMINAL_STATUSES = frozenset({"finished", "failed", "cancelled"})

Json = Mapping[str, Any]


def _time(value: Any) -> datetime:
    return datetime.fromisoformat(str(value))


def _maybe_time(value: Any) -> datetime | None:
    return None if value is None else _time(value)


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a list: iterate it for its items; pass ``next_cursor`` as ``cursor``
    for the next page (None: this was the last)."""

    data: tuple[T, ...]
    next_cursor: str | None

    def __iter__(self) -> Iterator[T]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    @classmethod
    def from_json(cls, body: Json, item: Callable[[Json], T]) -> Page[T]:
        return cls(tuple(item(x) for x in body["data"]), body.get("next_cursor"))


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class StartedRun:
    """The answer to ``runs.create``: the run (new, or the one this idempotency key
    already started) and the key it was sent with."""

    run_id: str
    status: str
    events_url: str
    idempotency_key: str

    @classmethod
    def from_json(cls, body: Json, idempotency_key: str) -> StartedRun:
        return cls(str(body["run_id"]), str(body["status"]), str(body["events_url"]),
                   idempotency_key)


@dataclass(frozen=True, slots=True)
class RunBlob:
    """One of a run's blobs (``GET /v1/runs/{id}/blobs``): ``kind`` ``tool_output`` (a
    tool's whole output over the event cap), ``sandbox_files`` (a tar of its work
    directory, saved while it waits) or ``screenshot`` (a PNG); read with
    ``runs.read_blob(run_id, ref)``."""

    ref: str
    kind: str
    bytes: int
    created_at: datetime
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Json) -> RunBlob:
        return cls(str(body["ref"]), str(body["kind"]), int(body["bytes"]),
                   _time(body["created_at"]), raw=body)


@dataclass(frozen=True, slots=True)
class Run:
    run_id: str
    agent_id: str
    version: int
    status: str
    priority: str
    input: Any
    answer: Any
    error: Any
    usage: Usage
    cost_micros: int
    steps: int
    last_seq: int
    cancel_requested: bool
    webhook: str | None
    events_url: str
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    parent_run_id: str | None = None  # a child run's parent (its start_agent call)
    # "monthly_spend_cap" while the run waits for the tenant's monthly spend cap.
    waiting_reason: str | None = None
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @classmethod
    def from_json(cls, body: Json) -> Run:
        usage = body.get("usage") or {}
        return cls(
            run_id=str(body["run_id"]), agent_id=str(body["agent_id"]),
            version=int(body["version"]), status=str(body["status"]),
            priority=str(body.get("priority", "interactive")), input=body.get("input"),
            answer=body.get("answer"), error=body.get("error"),
            usage=Usage(int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))),
            cost_micros=int(body.get("cost_micros", 0)), steps=int(body.get("steps", 0)),
            last_seq=int(body.get("last_seq", 0)),
            cancel_requested=bool(body.get("cancel_requested", False)),
            webhook=body.get("webhook"), events_url=str(body.get("events_url", "")),
            created_at=_time(body["created_at"]), updated_at=_time(body["updated_at"]),
            finished_at=_maybe_time(body.get("finished_at")),
            parent_run_id=body.get("parent_run_id"), waiting_reason=body.get("waiting_reason"),
            raw=body,
        )


@dataclass(frozen=True, slots=True)
class Event:
    """One durable event of a run's log; ``seq`` counts from 1 with no gap. ``data`` is the
    type's payload (docs/reference/api.md#event-types)."""

    seq: int
    type: str
    data: Json
    created_at: datetime
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @property
    def terminal(self) -> bool:
        """The run's last event (RunFinished, RunFailed, RunCancelled, BudgetStopped)."""
        return self.type in TERMINAL_EVENTS

    @classmethod
    def from_json(cls, body: Json) -> Event:
        data = body.get("data")
        return cls(int(body["seq"]), str(body["type"]), data if isinstance(data, dict) else {},
                   _time(body["created_at"]), raw=body)


@dataclass(frozen=True, slots=True)
class ModelDelta:
    """A piece of a model reply as it is generated: ephemeral (never stored, no ``seq``),
    shown between the durable events. ``after_seq`` is the last durable event before it.
    A reconnected stream may lose or repeat deltas; the durable ``ModelReplied`` that
    follows holds the whole reply."""

    after_seq: int
    text: str


@dataclass(frozen=True, slots=True)
class EventPage:
    """One JSON page of a run's log: resume with ``after=next_after``; ``run_ended`` once
    the run has ended and the page reaches its last event."""

    events: tuple[Event, ...]
    next_after: int
    run_ended: bool

    @classmethod
    def from_json(cls, body: Json) -> EventPage:
        return cls(tuple(Event.from_json(e) for e in body["events"]), int(body["next_after"]),
                   bool(body["run_ended"]))


@dataclass(frozen=True, slots=True)
class AgentLimits:
    max_steps: int
    max_tokens: int
    max_cost_micros: int
    repeat_limit: int = 0


@dataclass(frozen=True, slots=True)
class ChildAgent:
    """An agent a version's runs may start (``version`` None: its latest when started)."""

    agent_id: str
    version: int | None
    name: str


@dataclass(frozen=True, slots=True)
class ReviewFlag:
    reason: str
    since: datetime
    refused_egress: int


@dataclass(frozen=True, slots=True)
class Agent:
    """An agent at one of its (immutable) versions."""

    agent_id: str
    name: str
    version: int
    created_at: datetime
    model: str
    fallback_models: tuple[str, ...]
    system_prompt: str
    tools: tuple[str, ...]
    needs_approval: tuple[str, ...]
    limits: AgentLimits
    egress: tuple[str, ...]
    tool_pins: Mapping[str, Mapping[str, str]]
    flagged_for_review: ReviewFlag | None
    children: tuple[ChildAgent, ...] = ()
    summarize: Mapping[str, Any] | None = None  # {after_tokens, keep_last_steps, model}
    # What a run without a version runs: publishing does not change it, promoting does. A
    # fact about the agent when it was read, not about this version: not compared.
    live_version: int = field(default=0, compare=False)
    # A provider served one of its models with a snapshot the tenant has not accepted.
    model_snapshot_changed: bool = False
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Json) -> Agent:
        limits = body.get("limits") or {}
        flag = body.get("flagged_for_review")
        return cls(
            agent_id=str(body["agent_id"]), name=str(body["name"]),
            version=int(body["version"]), created_at=_time(body["created_at"]),
            model=str(body["model"]), fallback_models=tuple(body.get("fallback_models", ())),
            system_prompt=str(body.get("system_prompt", "")),
            tools=tuple(body.get("tools", ())), needs_approval=tuple(body.get("needs_approval",
                                                                              ())),
            limits=AgentLimits(int(limits.get("max_steps", 0)), int(limits.get("max_tokens", 0)),
                               int(limits.get("max_cost_micros", 0)),
                               int(limits.get("repeat_limit", 0))),
            egress=tuple((body.get("sandbox") or {}).get("egress", ())),
            tool_pins=body.get("tool_pins") or {},
            flagged_for_review=None if not flag else ReviewFlag(
                str(flag["reason"]), _time(flag["since"]), int(flag["refused_egress"])),
            children=tuple(ChildAgent(str(c["agent_id"]), c.get("version"), str(c.get("name", "")))
                           for c in body.get("children") or ()),
            summarize=body.get("summarize"),
            live_version=int(body.get("live_version", body["version"])),
            model_snapshot_changed=bool(body.get("model_snapshot_changed", False)),
            raw=body,
        )


@dataclass(frozen=True, slots=True)
class AgentSummary:
    """An item of ``agents.list``."""

    agent_id: str
    name: str
    latest_version: int
    created_at: datetime
    live_version: int = 0

    @classmethod
    def from_json(cls, body: Json) -> AgentSummary:
        return cls(str(body["agent_id"]), str(body["name"]), int(body["latest_version"]),
                   _time(body["created_at"]),
                   int(body.get("live_version", body["latest_version"])))


@dataclass(frozen=True, slots=True)
class Promotion:
    """``agents.promote``: who made which version live instead of which, and when."""

    promotion_id: str
    agent_id: str
    version: int
    previous_version: int
    promoted_by: str
    evaluation_id: str | None
    promoted_at: datetime

    @classmethod
    def from_json(cls, body: Json) -> Promotion:
        return cls(str(body["promotion_id"]), str(body["agent_id"]), int(body["version"]),
                   int(body["previous_version"]), str(body["promoted_by"]),
                   body.get("evaluation_id"), _time(body["promoted_at"]))


@dataclass(frozen=True, slots=True)
class Approval:
    """A tool call waiting for (or given) a person's decision: ``arguments`` are exactly
    what will be sent, ``key`` the call's idempotency key."""

    approval_id: str
    run_id: str
    key: str
    tool: str
    arguments: Json
    status: str
    comment: str | None
    requested_at: datetime
    expires_at: datetime
    decided_at: datetime | None
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Json) -> Approval:
        return cls(
            approval_id=str(body["approval_id"]), run_id=str(body["run_id"]),
            key=str(body["key"]), tool=str(body["tool"]), arguments=body.get("arguments") or {},
            status=str(body["status"]), comment=body.get("comment"),
            requested_at=_time(body["requested_at"]), expires_at=_time(body["expires_at"]),
            decided_at=_maybe_time(body.get("decided_at")), raw=body,
        )
