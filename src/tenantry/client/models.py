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
    "Evaluation",
    "EvaluationCase",
    "EvaluationCheck",
    "EvaluationSide",
    "EvaluationSpec",
    "EvaluationSummary",
    "EvaluationToolCall",
    "EvaluationTotals",
    "Event",
    "EventPage",
    "ModelDelta",
    "Page",
    "ReviewFlag",
    "Run",
    "StartedRun",
    "TestCase",
    "TestSet",
    "TestSetSummary",
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


# -- test sets and evaluations (ADR 0034) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class TestCase:
    """One case of a test set: its run's ``input``, what is checked (``checks``), the tool
    results recorded for it, and the run it was made from (``from_run``), if any."""

    __test__ = False  # not a pytest test class, whatever its name says

    name: str | None
    input: Any
    checks: Json
    recorded: tuple[Json, ...]
    from_run: str | None = None
    #: The run ``from_run`` names was deleted: what the case copied from it went with it
    #: (an evaluation of the test set is refused while it has such a case).
    from_run_deleted: bool = False

    @classmethod
    def from_json(cls, body: Json) -> TestCase:
        return cls(body.get("name"), body.get("input"), body.get("checks") or {},
                   tuple(body.get("recorded") or ()), body.get("from_run"),
                   bool(body.get("from_run_deleted", False)))


@dataclass(frozen=True, slots=True)
class TestSet:
    """An agent's test set: ``tool_results`` is ``recorded`` (no call reaches a tool
    server) or ``live``; ``stubs`` answer a tool's calls that no recording matches."""

    __test__ = False

    test_set_id: str
    agent_id: str
    name: str
    tool_results: str
    stubs: Mapping[str, str]
    cases: tuple[TestCase, ...]
    created_at: datetime
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Json) -> TestSet:
        return cls(str(body["test_set_id"]), str(body["agent_id"]), str(body["name"]),
                   str(body.get("tool_results", "recorded")), body.get("stubs") or {},
                   tuple(TestCase.from_json(c) for c in body.get("cases") or ()),
                   _time(body["created_at"]), raw=body)


@dataclass(frozen=True, slots=True)
class TestSetSummary:
    """A test set as a list shows it: how many cases, not the cases
    (``get_test_set`` reads them)."""

    __test__ = False

    test_set_id: str
    agent_id: str
    name: str
    tool_results: str
    cases: int
    created_at: datetime
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Json) -> TestSetSummary:
        return cls(str(body["test_set_id"]), str(body["agent_id"]), str(body["name"]),
                   str(body.get("tool_results", "recorded")), int(body["cases"]),
                   _time(body["created_at"]), raw=body)


@dataclass(frozen=True, slots=True)
class EvaluationSpec:
    """One side of an evaluation: a version, and the model run in place of its own."""

    version: int
    model: str | None

    @classmethod
    def from_json(cls, body: Json) -> EvaluationSpec:
        return cls(int(body["version"]), body.get("model"))

    def __str__(self) -> str:
        return f"v{self.version}" + (f" with {self.model}" if self.model else "")


@dataclass(frozen=True, slots=True)
class EvaluationCheck:
    """One check of a case on one side: which (``answer_contains``, ...), and why it
    passed or failed."""

    check: str
    passed: bool
    detail: str


@dataclass(frozen=True, slots=True)
class EvaluationToolCall:
    """A tool call of an evaluation's run; ``outcome``: ``recorded``, ``stub`` or
    ``no_recording`` when a stand-in answered it, None when it was made."""

    tool: str
    arguments: Any
    outcome: str | None


@dataclass(frozen=True, slots=True)
class EvaluationSide:
    """A case's run on one side. ``status`` None: the run was deleted (retention);
    ``passed`` None while it runs. The numbers are None for a deleted run. Once the run
    ended, ``tool_calls`` are its first calls (50) and ``tool_calls_total`` how many it
    made (None while it runs)."""

    run_id: str
    status: str | None
    passed: bool | None
    answer: Any
    error: Any
    checks: tuple[EvaluationCheck, ...]
    steps: int | None
    input_tokens: int | None
    output_tokens: int | None
    cost_micros: int | None
    latency_ms: float | None
    tool_calls: tuple[EvaluationToolCall, ...]
    tool_calls_total: int | None = None

    @property
    def tokens(self) -> int | None:
        """Input and output tokens together."""
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)

    @property
    def failed_checks(self) -> tuple[EvaluationCheck, ...]:
        return tuple(c for c in self.checks if not c.passed)

    @classmethod
    def from_json(cls, body: Json) -> EvaluationSide:
        return cls(
            run_id=str(body["run_id"]), status=body.get("status"), passed=body.get("passed"),
            answer=body.get("answer"), error=body.get("error"),
            checks=tuple(EvaluationCheck(str(c["check"]), bool(c["passed"]),
                                         str(c.get("detail", "")))
                         for c in body.get("checks") or ()),
            steps=body.get("steps"), input_tokens=body.get("input_tokens"),
            output_tokens=body.get("output_tokens"), cost_micros=body.get("cost_micros"),
            latency_ms=body.get("latency_ms"),
            tool_calls=tuple(EvaluationToolCall(str(c["tool"]), c.get("arguments"),
                                                c.get("outcome"))
                             for c in body.get("tool_calls") or ()),
            tool_calls_total=body.get("tool_calls_total"))


@dataclass(frozen=True, slots=True)
class EvaluationCase:
    """One case of an evaluation, both sides; ``differences`` (once both ended): which of
    ``passed``, ``status``, ``answer``, ``tool_calls``, ``steps`` differ."""

    index: int
    name: str
    input: Any
    baseline: EvaluationSide
    candidate: EvaluationSide
    differences: tuple[str, ...]

    @property
    def regressed(self) -> bool:
        """Passed on the baseline, failed on the candidate."""
        return self.baseline.passed is True and self.candidate.passed is False

    @classmethod
    def from_json(cls, body: Json) -> EvaluationCase:
        return cls(int(body["index"]), str(body["name"]), body.get("input"),
                   EvaluationSide.from_json(body["baseline"]),
                   EvaluationSide.from_json(body["candidate"]),
                   tuple(str(d) for d in body.get("differences") or ()))


@dataclass(frozen=True, slots=True)
class EvaluationTotals:
    """One side's sums over the cases (``running``: runs not ended yet)."""

    cases: int
    passed: int
    failed: int
    running: int
    steps: int
    input_tokens: int
    output_tokens: int
    cost_micros: int
    latency_ms: float

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @classmethod
    def from_json(cls, body: Json) -> EvaluationTotals:
        return cls(int(body.get("cases", 0)), int(body.get("passed", 0)),
                   int(body.get("failed", 0)), int(body.get("running", 0)),
                   int(body.get("steps", 0)), int(body.get("input_tokens", 0)),
                   int(body.get("output_tokens", 0)), int(body.get("cost_micros", 0)),
                   float(body.get("latency_ms", 0.0)))


_NO_TOTALS = EvaluationTotals(0, 0, 0, 0, 0, 0, 0, 0, 0.0)


@dataclass(frozen=True, slots=True)
class Evaluation:
    """An evaluation's report, read from its runs whenever it is asked for: ``status``
    ``running`` or ``finished``; ``passed`` (the candidate passed every case) None until
    every run ended."""

    evaluation_id: str
    agent_id: str
    test_set_id: str
    status: str
    passed: bool | None
    baseline: EvaluationSpec
    candidate: EvaluationSpec
    created_by: str
    created_at: datetime
    cases: tuple[EvaluationCase, ...]
    totals: Mapping[str, EvaluationTotals]  # "baseline" and "candidate"
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    @property
    def baseline_totals(self) -> EvaluationTotals:
        return self.totals.get("baseline", _NO_TOTALS)

    @property
    def candidate_totals(self) -> EvaluationTotals:
        return self.totals.get("candidate", _NO_TOTALS)

    @classmethod
    def from_json(cls, body: Json) -> Evaluation:
        return cls(
            evaluation_id=str(body["evaluation_id"]), agent_id=str(body["agent_id"]),
            test_set_id=str(body["test_set_id"]), status=str(body["status"]),
            passed=body.get("passed"), baseline=EvaluationSpec.from_json(body["baseline"]),
            candidate=EvaluationSpec.from_json(body["candidate"]),
            created_by=str(body.get("created_by", "")), created_at=_time(body["created_at"]),
            cases=tuple(EvaluationCase.from_json(c) for c in body.get("cases") or ()),
            totals={side: EvaluationTotals.from_json(t)
                    for side, t in (body.get("totals") or {}).items()},
            raw=body)


@dataclass(frozen=True, slots=True)
class EvaluationSummary:
    """An item of ``evaluations.list`` (no results: ``evaluations.get`` reads them)."""

    evaluation_id: str
    test_set_id: str
    baseline: EvaluationSpec
    candidate: EvaluationSpec
    cases: int
    created_by: str
    created_at: datetime

    @classmethod
    def from_json(cls, body: Json) -> EvaluationSummary:
        return cls(str(body["evaluation_id"]), str(body["test_set_id"]),
                   EvaluationSpec.from_json(body["baseline"]),
                   EvaluationSpec.from_json(body["candidate"]), int(body["cases"]),
                   str(body.get("created_by", "")), _time(body["created_at"]))
