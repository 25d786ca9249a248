"""A run's own life in its log: created, parked and resumed (its sandbox saved before it
waits), a cancel requested, the four ways it ends (finished, failed, cancelled, stopped
at a limit), and the webhook that told of its end."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tenantry.runs.events.base import ABSENT, EventType, Payload


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


#: RunParked's reason, and a run's ``waiting_reason``, while it waits for its tenant's
#: monthly spend cap (ADR 0035).
MONTHLY_SPEND_CAP = "monthly_spend_cap"
#: ... and while a call waits for the tenant to connect its tool server again (issue 39).
AUTHORIZATION_REQUIRED = "authorization_required"


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
    # Waiting for a tool server's connection (reason ``authorization_required``): the call
    # that waits, not made (its ToolStarted, if any, is void: the call is made afresh once
    # the run goes on), and the server. Absent in every other park.
    key: str | None = None
    tool_server: str | None = None


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
    cause: str | None = None  # unpriced_model | model_provider | blob_quota
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


#: The payload types of this family, for ``stored.PAYLOADS``.
PAYLOAD_TYPES: tuple[type[Payload], ...] = (
    RunCreated, RunParked, RunResumed, SandboxSaved, BudgetStopped, CancelRequested,
    RunFinished, RunFailed, RunCancelled, WebhookDelivered, WebhookFailed,
)
