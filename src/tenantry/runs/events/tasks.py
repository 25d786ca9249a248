"""Work done elsewhere: an activity task a run called as a tool and its ending, a child
run and its ending; and the events of a task's own log (an activity task's attempts,
a library task's signals)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tenantry.runs.events.base import EventType, Payload


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
    # Egress attempts the proxy refused during the attempt: the first few, each
    # {host, port, reason_code} as the code asked; how many in all, and how many by reason
    # code. Absent when there were none (and in logs written before they were recorded).
    egress_refused: list[dict[str, Any]] | None = None
    egress_refused_count: int = 0
    egress_refused_by_reason: dict[str, int] | None = None


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


#: The payload types of this family, for ``stored.PAYLOADS``.
PAYLOAD_TYPES: tuple[type[Payload], ...] = (
    ActivityRequested, ActivityReturned, ChildRunStarted, ChildRunEnded, ActivityStarted,
    ActivityAttempted, Signalled, SignalConsumed,
)
