"""The run's event log vocabulary (DESIGN §6). A run *is* its events: status, answer and
usage on the ``runs`` row are projections kept in the same transaction as the event that
changes them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


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
    CHILD_RUN_STARTED = "ChildRunStarted"
    WEBHOOK_DELIVERED = "WebhookDelivered"
    WEBHOOK_FAILED = "WebhookFailed"
    # Library tasks (tenantry.store): a tenant's signal to a task, and its consumption by
    # the task's lease holder (under the lease epoch, so each signal is consumed once).
    SIGNALLED = "Signalled"
    SIGNAL_CONSUMED = "SignalConsumed"


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


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    type: str
    data: dict[str, Any]
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "type": self.type,
            "data": self.data,
            "created_at": self.created_at.isoformat(),
        }
