"""What every event shares: its type's name (``EventType``), the statuses a run's row
projects from its events, ``NewerEvent`` for what this code cannot read, and
``Payload``, the frozen dataclass each type's data is, whose one generic ``to_data`` /
``from_data`` writes and reads the stored JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
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
