"""The agent loop's steps in the log: the model's replies (and its summaries, and a change
of model or account), tool calls started and completed (with the egress their sandbox
was refused), and approvals asked for and decided."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tenantry.runs.events.base import ABSENT, Absent, EventType, Payload, renamed


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


@dataclass(frozen=True, slots=True)
class ToolStarted(Payload):
    """The intent of a call that must not be repeated blindly, saved before it is made.
    Interrupted (no ToolCompleted), it is recorded ``unknown`` — unless ``fresh_sandbox``:
    a built-in call whose effects all stay in the run's sandbox (or whose code passes the
    key on), made again with the same key on a sandbox restored from the last save, so
    that nothing of the interrupted attempt is there."""

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


#: The payload types of this family, for ``stored.PAYLOADS``.
PAYLOAD_TYPES: tuple[type[Payload], ...] = (
    ModelReplied, Summarized, ModelFallback, ModelRerouted, ToolStarted, ToolCompleted,
    EgressRefused, ApprovalRequested, ApprovalDecided,
)
