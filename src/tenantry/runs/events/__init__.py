"""The run's event log vocabulary (ADR 0010): the event types, the stored row, and one
typed payload per type that anything writes. A run *is* its events: status, answer and
usage on the ``runs`` row are projections kept in the same transaction as the event that
changes them.

A payload's ``to_data`` is the JSON stored in ``run_events.data`` (the keys every log and
the replay corpus already hold); its ``FORMAT`` goes to ``run_events.format``. A worker
that meets a format newer than it knows, or a type it does not know, leaves the run to a
newer worker (``NewerEvent``).

The vocabulary by family: ``base`` (the types, statuses and ``Payload``), ``lifecycle``
(a run's own life), ``calls`` (model and tool calls, approvals), ``tasks`` (activity
tasks, child runs, signals) and ``stored`` (the stored row and ``parse``); every name
is imported from here."""

from __future__ import annotations

from tenantry.runs.events.base import (
    ABSENT,
    TERMINAL_EVENTS,
    Absent,
    EventType,
    NewerEvent,
    Payload,
    RunStatus,
    renamed,
)
from tenantry.runs.events.calls import (
    ApprovalDecided,
    ApprovalRequested,
    EgressRefused,
    ModelFallback,
    ModelReplied,
    ModelRerouted,
    Summarized,
    ToolCompleted,
    ToolStarted,
)
from tenantry.runs.events.lifecycle import (
    AUTHORIZATION_REQUIRED,
    MONTHLY_SPEND_CAP,
    BudgetStopped,
    CancelRequested,
    RunCancelled,
    RunCreated,
    RunFailed,
    RunFinished,
    RunParked,
    RunResumed,
    SandboxSaved,
    WebhookDelivered,
    WebhookFailed,
    WebhookOutcome,
)
from tenantry.runs.events.stored import (
    PAYLOADS,
    Event,
    parse,
)
from tenantry.runs.events.tasks import (
    ActivityAttempted,
    ActivityRequested,
    ActivityReturned,
    ActivityStarted,
    ChildRunEnded,
    ChildRunStarted,
    SignalConsumed,
    Signalled,
)

__all__ = [
    "ABSENT",
    "AUTHORIZATION_REQUIRED",
    "MONTHLY_SPEND_CAP",
    "PAYLOADS",
    "TERMINAL_EVENTS",
    "Absent",
    "ActivityAttempted",
    "ActivityRequested",
    "ActivityReturned",
    "ActivityStarted",
    "ApprovalDecided",
    "ApprovalRequested",
    "BudgetStopped",
    "CancelRequested",
    "ChildRunEnded",
    "ChildRunStarted",
    "EgressRefused",
    "Event",
    "EventType",
    "ModelFallback",
    "ModelReplied",
    "ModelRerouted",
    "NewerEvent",
    "Payload",
    "RunCancelled",
    "RunCreated",
    "RunFailed",
    "RunFinished",
    "RunParked",
    "RunResumed",
    "RunStatus",
    "SandboxSaved",
    "SignalConsumed",
    "Signalled",
    "Summarized",
    "ToolCompleted",
    "ToolStarted",
    "WebhookDelivered",
    "WebhookFailed",
    "WebhookOutcome",
    "parse",
    "renamed",
]
