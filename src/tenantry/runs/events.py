"""The run's event log vocabulary (DESIGN §6): the event types, the stored row, and one
typed payload per type that anything writes. A run *is* its events: status, answer and
usage on the ``runs`` row are projections kept in the same transaction as the event that
changes them.

A payload's ``to_data`` is the JSON stored in ``run_events.data`` (the keys every log and
the replay corpus already hold); its ``FORMAT`` goes to ``run_events.format``. A worker
that meets a format newer than it knows, or a type it does not know, leaves the run to a
newer worker (``NewerEvent``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from datetime import datetime
from enum import Enum, StrEnum
from typing import Any, ClassVar, Self


class EventType(StrEnum):
    RUN_CREATED = "RunCreated"
    MODEL_REQUESTED = "ModelRequested"
    MODEL_REPLIED = "ModelReplied"
    TOOL_STARTED = "ToolStarted"
    TOOL_COMPLETED = "ToolCompleted"
    APPROVAL_REQUESTED = "ApprovalRequested"
    APPROVAL_DECIDED = "ApprovalDecided"
    MODEL_FALLBACK = "ModelFallback"
    MODEL_REROUTED = "ModelRerouted"
    RUN_PARKED = "RunParked"
    RUN_RESUMED = "RunResumed"
    SANDBOX_SAVED = "SandboxSaved"
    BUDGET_STOPPED = "BudgetStopped"
    CANCEL_REQUESTED = "CancelRequested"
    RUN_FINISHED = "RunFinished"
    RUN_FAILED = "RunFailed"
    RUN_CANCELLED = "RunCancelled"
    SUMMARIZED = "Summarized"
    # Child runs (runs/child_step.py): the parent started a child for its start_agent call
    # and waits; the child's ending, read by the parent when it is woken.
    CHILD_RUN_STARTED = "ChildRunStarted"
    CHILD_RUN_ENDED = "ChildRunEnded"
    WEBHOOK_DELIVERED = "WebhookDelivered"
    WEBHOOK_FAILED = "WebhookFailed"
    EGRESS_REFUSED = "EgressRefused"
    # Library tasks (tenantry.store): a tenant's signal to a task, and its consumption by
    # the task's lease holder (under the lease epoch, so each signal is consumed once).
    SIGNALLED = "Signalled"
    SIGNAL_CONSUMED = "SignalConsumed"
    # Activity tasks (tenantry.activities.tasks): one attempt in a fresh sandbox and how it
    # ended, written under the task's lease with what it decided (finish, retry, dead letter).
    ACTIVITY_ATTEMPTED = "ActivityAttempted"
    # An agent calling an activity as a tool (ADR 0015): the run enqueued the task with the
    # call's key and waits; the task's ending is appended to the run by the dispatcher.
    ACTIVITY_REQUESTED = "ActivityRequested"
    ACTIVITY_RETURNED = "ActivityReturned"
    # Written when an attempt's sandbox is bound, before tenant code runs: an attempt whose
    # dispatcher died (no ActivityAttempted follows) is then numbered and recorded, not lost.
    ACTIVITY_STARTED = "ActivityStarted"


#: After one of these nothing but webhook bookkeeping is appended; live tails end here.
#: BudgetStopped ends a run that reached one of its agent's limits (status ``failed``).
TERMINAL_EVENTS = frozenset({
    EventType.RUN_FINISHED, EventType.RUN_FAILED, EventType.RUN_CANCELLED,
    EventType.BUDGET_STOPPED,
})


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (RunStatus.FINISHED, RunStatus.FAILED, RunStatus.CANCELLED)


class Absent(Enum):
    """For keys that may hold null but that some writers leave out: absent ≠ null."""

    ABSENT = "absent"


ABSENT = Absent.ABSENT


class NewerEvent(ValueError):
    """An event this code cannot read: an unknown type, or a newer format of a known one."""

    def __init__(self, type: str, format: int) -> None:
        super().__init__(f"event {type} in format {format} is newer than this worker knows")
        self.type, self.format = type, format


def _key(f: Field[Any]) -> str:
    key: str = f.metadata.get("key", f.name)
    return key


_Layout = tuple[tuple[str, str, Any], ...]
_LAYOUTS: dict[type, _Layout] = {}  # a fact about each class, not state: never changes


def _layout(cls: type) -> _Layout:
    """(field, stored key, default) of a payload class, ``basis_seq`` last as the old
    writers put it: worked out once per class, not on every event written or read."""
    layout = _LAYOUTS.get(cls)
    if layout is None:
        ordered = sorted(fields(cls), key=lambda f: f.name == "basis_seq")
        layout = _LAYOUTS[cls] = tuple((f.name, _key(f), f.default) for f in ordered)
    return layout


def renamed(key: str) -> Any:
    """A field stored under another key (``from`` is a Python keyword)."""
    return field(metadata={"key": key})


@dataclass(frozen=True, slots=True)
class Payload:
    """One event's data. Fields without a default are always written; a field with a
    default is written only when its value differs from it (today's optional keys)."""

    TYPE: ClassVar[EventType]
    FORMAT: ClassVar[int] = 1
    # The last seq the engine's decision saw (set on what the driver writes): replay
    # folds the log up to it, not up to the event itself.
    basis_seq: int | None = field(default=None, kw_only=True)

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for name, key, default in _layout(type(self)):
            value = getattr(self, name)
            if default is MISSING or value != default:
                data[key] = value
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Self:
        return cls(**{name: data[key] for name, key, _ in _layout(cls) if key in data})


@dataclass(frozen=True, slots=True)
class RunCreated(Payload):
    TYPE = EventType.RUN_CREATED
    agent_id: str
    version: int
    priority: str
    input: Any = ABSENT  # absent when it is big: then input_ref and input_bytes say where
    input_ref: str | None = None
    input_bytes: int | None = None
    webhook_url: str | None = None
    kind: str | None = None  # absent for agent runs; "task" for library tasks
    # A child run (runs/child_step.py): the run and call that started it, how deep it is
    # (1: a top-level run's child), and the most it may spend — what its parent's budget
    # had left for it. Absent for every other run.
    parent_run_id: str | None = None
    parent_key: str | None = None
    depth: int | None = None
    cost_cap_micros: int | None = None
    # Asked to stream (POST /v1/runs `stream`): its model calls stream their text to live
    # listeners even before one is heard of (ADR 0030). Absent: only watched calls stream.
    stream: bool = False
    # A run of an evaluation (ADR 0034): which one (its tool calls are answered as the
    # evaluation's test set says), and the candidate's model in place of the version's.
    evaluation_id: str | None = None
    model: str | None = None


@dataclass(frozen=True, slots=True)
class ModelReplied(Payload):
    TYPE = EventType.MODEL_REPLIED
    text: str
    calls: list[dict[str, Any]]
    usage: dict[str, int]
    provider: str
    account: str
    model: str
    cost_micros: int
    price_version: str
    latency_ms: float
    waited_ms: float | None = None  # the whole gateway call; older events lack it
    prompt_sha256: str | None = None
    # The part of latency_ms spent opening the connection (the trace counts it as the
    # gateway's); absent on a pooled connection and in events written before it existed.
    connect_ms: float | None = None
    # The snapshot the provider says it served (its reply's ``model``, e.g.
    # ``gpt-4o-2024-08-06``); absent when it said nothing and in older events.
    provider_model: str | None = None


@dataclass(frozen=True, slots=True)
class ToolStarted(Payload):
    """The intent of a call that must not be repeated blindly, saved before it is made.
    Interrupted (no ToolCompleted), it is recorded ``unknown`` — unless ``fresh_sandbox``:
    a built-in call whose effects all stay in the run's sandbox (or whose code passes the
    key on), made again with the same key on a sandbox restored from the last save, so
    that nothing of the interrupted attempt is there (issue 36)."""

    TYPE = EventType.TOOL_STARTED
    key: str
    tool: str
    fresh_sandbox: bool = False


@dataclass(frozen=True, slots=True)
class ToolCompleted(Payload):
    """A call's result or error. A call refused before it was made has no arguments,
    server or duration; an interrupted keyless call has ``outcome: unknown``."""

    TYPE = EventType.TOOL_COMPLETED
    key: str
    tool: str
    reply_seq: int
    call_index: int
    arguments: dict[str, Any] | None = None
    server: str | Absent | None = ABSENT
    duration_ms: float | None = None
    error: str | None = None
    result: str | Absent | None = ABSENT
    outcome: str | None = None
    sandbox: dict[str, Any] | None = None
    truncated: bool = False
    output_bytes: int | None = None
    output_ref: str | None = None
    # Blobs the call stored besides its output (a browser's screenshot): the run's, deleted
    # with it.
    blob_refs: list[str] | None = None


@dataclass(frozen=True, slots=True)
class ApprovalRequested(Payload):
    TYPE = EventType.APPROVAL_REQUESTED
    approval_id: str
    key: str
    tool: str
    arguments: dict[str, Any]
    expires_at: str


@dataclass(frozen=True, slots=True)
class ApprovalDecided(Payload):
    TYPE = EventType.APPROVAL_DECIDED
    approval_id: str
    key: str
    decision: str  # approved | denied | expired
    comment: str | None = None
    decided_by: str | None = None  # who, when not the tenant itself ("operator")


@dataclass(frozen=True, slots=True)
class ModelFallback(Payload):
    TYPE = EventType.MODEL_FALLBACK
    from_: str = renamed("from")
    to: str = renamed("to")
    reason: str = renamed("reason")


@dataclass(frozen=True, slots=True)
class ModelRerouted(Payload):
    TYPE = EventType.MODEL_REROUTED
    from_: str = renamed("from")
    to: str = renamed("to")
    model: str = renamed("model")
    reason: str = renamed("reason")


#: RunParked's reason, and a run's ``waiting_reason``, while it waits for its tenant's
#: monthly spend cap (ADR 0035).
MONTHLY_SPEND_CAP = "monthly_spend_cap"


@dataclass(frozen=True, slots=True)
class RunParked(Payload):
    TYPE = EventType.RUN_PARKED
    reason: str
    until: str | None = None
    models: list[str] | None = None  # waiting for an account serving one of these
    error_id: str | None = None  # our log's record of why, when the cause is ours
    # Waiting for the tenant's monthly spend cap (reason ``monthly_spend_cap``, ADR 0035):
    # what the month's spend (reservations included) and the cap were when the call was
    # refused. Absent in every other park, and in logs written before it existed.
    spent_micros: int | None = None
    cap_micros: int | None = None


@dataclass(frozen=True, slots=True)
class RunResumed(Payload):
    TYPE = EventType.RUN_RESUMED
    after: str


@dataclass(frozen=True, slots=True)
class SandboxSaved(Payload):
    TYPE = EventType.SANDBOX_SAVED
    ref: str
    bytes: int
    duration_ms: float


@dataclass(frozen=True, slots=True)
class BudgetStopped(Payload):
    """The run reached ``limit`` (one of its agent's limits, or the tenant's monthly spend
    cap). ``reason`` says more where the limit alone does not: ``repeating`` for a stop by
    ``repeat_limit`` (ADR 0031). Absent in every other stop, and in logs written before
    it existed; an older reader that skips it still reads a complete stop."""

    TYPE = EventType.BUDGET_STOPPED
    limit: str
    used: int
    max: int
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Summarized(Payload):
    """A summarizing model call (ADR 0031): ``summary`` stands for every step up to
    ``upto_seq`` in the prompts after it. Billed like a model reply (usage, cost, the price
    version) and, like one, saved before anything uses it; ``prompt_sha256`` is the digest
    of the summarizing prompt, which replay rebuilds."""

    TYPE = EventType.SUMMARIZED
    upto_seq: int
    summary: str
    usage: dict[str, int]
    provider: str
    account: str
    model: str
    cost_micros: int
    price_version: str
    latency_ms: float
    waited_ms: float | None = None
    prompt_sha256: str | None = None


@dataclass(frozen=True, slots=True)
class CancelRequested(Payload):
    TYPE = EventType.CANCEL_REQUESTED


@dataclass(frozen=True, slots=True)
class RunFinished(Payload):
    TYPE = EventType.RUN_FINISHED
    answer: Any


@dataclass(frozen=True, slots=True)
class RunFailed(Payload):
    TYPE = EventType.RUN_FAILED
    error: str
    ours: bool  # a platform fault rather than the run's own failure
    cause: str | None = None  # unpriced_model | model_provider
    details: Any = None  # a library task's own details
    error_id: str | None = None  # our log's record of the detail (runs/faults.py)


@dataclass(frozen=True, slots=True)
class RunCancelled(Payload):
    TYPE = EventType.RUN_CANCELLED
    reason: str


@dataclass(frozen=True, slots=True)
class WebhookOutcome(Payload):
    url: str
    attempts: int
    status_code: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class WebhookDelivered(WebhookOutcome):
    TYPE = EventType.WEBHOOK_DELIVERED


@dataclass(frozen=True, slots=True)
class WebhookFailed(WebhookOutcome):
    TYPE = EventType.WEBHOOK_FAILED


@dataclass(frozen=True, slots=True)
class EgressRefused(Payload):
    """Code in the run's sandbox tried to reach somewhere its allow-list does not allow
    (or an internal or metadata address), during the tool call ``key``: the host and port
    it asked for, and why it was refused (``not_allowed``, ``internal_address``,
    ``metadata_address``). ``count`` > 1 folds the attempts past the per-call cap of
    separate events that share this reason (host and port are then the first of them)."""

    TYPE = EventType.EGRESS_REFUSED
    key: str
    host: str
    port: int
    reason_code: str
    count: int = 1


@dataclass(frozen=True, slots=True)
class Signalled(Payload):
    TYPE = EventType.SIGNALLED
    name: str
    data: Any


@dataclass(frozen=True, slots=True)
class SignalConsumed(Payload):
    TYPE = EventType.SIGNAL_CONSUMED
    signal_seq: int
    name: str


@dataclass(frozen=True, slots=True)
class ActivityStarted(Payload):
    """An attempt got its fresh sandbox and is about to run the tenant's code. Without an
    ``ActivityAttempted`` of the same number after it, the attempt was abandoned (its
    dispatcher died or stopped): the next holder of the task records it so."""

    TYPE = EventType.ACTIVITY_STARTED
    attempt: int
    sandbox_id: str


@dataclass(frozen=True, slots=True)
class ActivityAttempted(Payload):
    """One attempt of an activity task: ``status`` completed|retryable|failed (the
    attempt's outcome), ``killed_sandbox`` when a kill or crash ended it (the dead-letter
    count), and the step's output capped for the log (the full output never is stored)."""

    TYPE = EventType.ACTIVITY_ATTEMPTED
    attempt: int
    status: str
    error: str | None
    exit_code: int | None
    killed_sandbox: bool
    stdout: str
    stderr: str
    duration_ms: float
    sandbox_id: str  # a fresh one per attempt: never the same twice
    # What the attempt's sandbox used (ADR 0016), host-measured; absent in logs written
    # before it was measured, and None when the backend could not tell.
    cpu_s: float | None = None
    peak_memory_bytes: int | None = None
    sandbox_ms: float | None = None  # the sandbox seconds billed, and their cost
    cost_micros: int | None = None
    # Egress attempts the proxy refused during the attempt (issue 35): the first few, each
    # {host, port, reason_code} as the code asked; how many in all, and how many by reason
    # code. Absent when there were none (and in logs written before they were recorded).
    egress_refused: list[dict[str, Any]] | None = None
    egress_refused_count: int = 0
    egress_refused_by_reason: dict[str, int] | None = None


@dataclass(frozen=True, slots=True)
class ActivityRequested(Payload):
    """The run enqueued activity task ``task_id`` for its tool call ``key`` (the task's
    idempotency key and the key its guest sees) and waits, slot released, for it to end.
    ``tool`` is the tools entry (``activity:<name>[@<version>]``); ``version`` the
    activity version the task is pinned to."""

    TYPE = EventType.ACTIVITY_REQUESTED
    key: str
    tool: str
    task_id: str
    activity: str
    version: int


@dataclass(frozen=True, slots=True)
class ActivityReturned(Payload):
    """Task ``task_id`` of the tool call ``key`` ended: ``status`` finished, failed,
    dead_lettered or cancelled; ``result`` (finished) or ``error``. Appended without a
    lease, in the transaction that ended the task; the run turns it into the call's
    ToolCompleted."""

    TYPE = EventType.ACTIVITY_RETURNED
    key: str
    task_id: str
    status: str
    result: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ChildRunStarted(Payload):
    """The run started child run ``run_id`` (agent ``agent_id`` at ``version``) for its
    start_agent call ``key`` — the child's idempotency key — and waits, slot released, for
    it to end. ``cost_cap_micros``: the part of this run's budget handed to the child."""

    TYPE = EventType.CHILD_RUN_STARTED
    key: str
    tool: str
    run_id: str
    agent_id: str
    version: int
    cost_cap_micros: int


@dataclass(frozen=True, slots=True)
class ChildRunEnded(Payload):
    """Child run ``run_id`` of the call ``key`` ended: ``status`` finished, failed or
    cancelled, its ``answer`` or ``error``, and what it (and its own children) spent,
    which counts against this run's max_cost_micros too. Read from the child's row by the
    parent, under its lease, once the child's end woke it."""

    TYPE = EventType.CHILD_RUN_ENDED
    key: str
    run_id: str
    status: str
    cost_micros: int
    answer: Any = None
    error: str | None = None


#: Every payload type by its event type. ModelRequested is reserved:
#: nothing writes them yet, so no worker reads them either.
PAYLOADS: dict[str, type[Payload]] = {p.TYPE.value: p for p in (
    RunCreated, ModelReplied, ToolStarted, ToolCompleted, ApprovalRequested, ApprovalDecided,
    ModelFallback, ModelRerouted, RunParked, RunResumed, SandboxSaved, BudgetStopped,
    CancelRequested, RunFinished, RunFailed, RunCancelled, WebhookDelivered, WebhookFailed,
    Signalled, SignalConsumed, EgressRefused, ActivityAttempted, ActivityStarted,
    ActivityRequested, ActivityReturned, ChildRunStarted, ChildRunEnded, Summarized,
)}


def parse(type: str, data: Mapping[str, Any], format: int = 1) -> Payload:
    """The typed payload of stored (or API) event data; ``NewerEvent`` if this code
    cannot read it."""
    kind = PAYLOADS.get(type)
    if kind is None or format > kind.FORMAT:
        raise NewerEvent(type, format)
    return kind.from_data(data)


@dataclass(frozen=True, slots=True)
class Event:
    """One stored row of a run's log: ``data`` as stored, ``payload`` typed."""

    seq: int
    type: str
    data: dict[str, Any]
    created_at: datetime
    format: int = 1

    @classmethod
    def of(cls, seq: int, payload: Payload, created_at: datetime) -> Event:
        return cls(seq, payload.TYPE, payload.to_data(), created_at, payload.FORMAT)

    @property
    def payload(self) -> Payload:
        return parse(self.type, self.data, self.format)

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "type": self.type,
            "data": self.data,
            "created_at": self.created_at.isoformat(),
        }
