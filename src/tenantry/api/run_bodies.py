"""The bodies of the runs API (``api/runs.py``): what starting a run takes, and what runs,
their event pages and stream and their traces are answered as; the shedding answer that
every admission route documents."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from tenantry.api.fields import Body, HttpUrl, PositiveInt4, StoredJsonNotNull, bounded_json
from tenantry.ids import RunId
from tenantry.runs import service
from tenantry.runs.events import (
    AUTHORIZATION_REQUIRED,
    MONTHLY_SPEND_CAP,
)

MAX_INPUT_BYTES = 64 * 1024

#: One Server-Sent Event of the stream: a durable event (`data` is an EventOut as JSON), or
#: a live model delta (no `id`: it is not in the log).
SSE_EVENT = {
    "oneOf": [
        {"type": "object", "title": "Durable event",
         "required": ["id", "event", "data"],
         "properties": {
             "id": {"type": "string", "pattern": "^[0-9]+$", "description": "The event's seq."},
             "event": {"type": "string", "description": "The event type."},
             "data": {"type": "string", "contentMediaType": "application/json",
                      "description": "The event: {seq, type, data, created_at}."},
         }},
        {"type": "object", "title": "Live model delta",
         "required": ["event", "data"],
         "properties": {
             "event": {"const": "model_delta"},
             "data": {"type": "string", "contentMediaType": "application/json",
                      "contentSchema": {
                          "type": "object", "required": ["type", "after_seq", "text"],
                          "properties": {
                              "type": {"const": "model_delta"},
                              "after_seq": {"type": "integer", "minimum": 0,
                                            "description": "The last durable seq before "
                                                           "the model call."},
                              "text": {"type": "string",
                                       "description": "The next piece of the reply."}}},
                      "description": "{type: model_delta, after_seq, text}."},
         }},
    ],
}

class StartRun(Body):
    agent_id: str = Field(description="An ill-formed id answers 404, like a missing one.")
    version: PositiveInt4 | None = None
    input: StoredJsonNotNull = Field(description="Any JSON but null, at most 64 KiB; no string "
                                         "(or key) may contain NUL.")
    webhook: HttpUrl | None = None
    priority: Literal["interactive", "batch"] = "interactive"
    stream: bool = Field(
        default=False,
        description="Stream every model call's text as `model_delta` events to this run's "
                    "event streams, including a call that starts before the client's stream "
                    "is open (it gets the text so far when it joins). Without it only calls "
                    "that start while somebody watches the run stream (ADR 0030).")

    @field_validator("input")
    @classmethod
    def _bounded(cls, value: JsonValue) -> JsonValue:
        if value is None:
            raise ValueError("input must not be null")
        return bounded_json(value, "input", MAX_INPUT_BYTES)


class Started(BaseModel):
    run_id: str
    status: str
    events_url: str


class Usage(BaseModel):
    input_tokens: int
    output_tokens: int


class RunOut(BaseModel):
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
    parent_run_id: str | None = Field(
        default=None, description="The run whose `start_agent` call started this child run "
                                  "(`GET /v1/runs/{run_id}/children` lists a run's children).")
    waiting_reason: Literal["monthly_spend_cap", "authorization_required"] | None = Field(
        default=None, description="`monthly_spend_cap` while the run is `waiting` because "
                                  "the tenant's monthly spend cap is reached: it holds no "
                                  "worker slot and continues from where it stopped when the "
                                  "operator raises or removes the cap, or when the month "
                                  "ends (UTC). `authorization_required` while a tool call "
                                  "waits for the tenant to connect its OAuth tool server "
                                  "again (the RunParked event names the server): the call "
                                  "is made once it is connected. Null otherwise (the event "
                                  "stream's last `RunParked` or `ApprovalRequested` says why "
                                  "other waits wait).")


class RunList(BaseModel):
    data: list[RunOut]
    next_cursor: str | None


class EventOut(BaseModel):
    seq: int
    type: str
    data: dict[str, Any]
    created_at: datetime


class EventPage(BaseModel):
    events: list[EventOut]
    next_after: int
    run_ended: bool


class TraceTotals(BaseModel):
    platform_ms: float
    gateway_ms: float = Field(description="The model gateway's own part of the model calls: "
                                          "capacity gate, client set-up, failed attempts, "
                                          "backoff.")
    model_ms: float = Field(description="The answering providers' own time.")
    tool_ms: float
    sandbox_ms: float = Field(description="Execution time inside the run's sandbox; part "
                                          "of tool_ms, not a separate slice.")
    queue_ms: float
    approval_ms: float
    parked_ms: float
    input_tokens: int
    output_tokens: int
    cost_micros: int = Field(description="The run's cost: its model calls and its sandbox "
                                         "time.")
    sandbox_cost_micros: int = Field(description="The sandbox time's part of cost_micros.")


class TraceSandbox(BaseModel):
    backend: str | None


class TraceSpan(BaseModel):
    kind: Literal["queue", "platform", "gateway", "model", "tool", "approval", "parked"]
    start_ms: float = Field(description="Offset from the run's created_at.")
    duration_ms: float
    seq: int = Field(description="The event this span belongs to.")
    label: str
    detail: dict[str, Any]


class TraceFallback(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    seq: int
    type: str = Field(description="ModelFallback (another model) or ModelRerouted (the "
                                  "same model on another account).")
    from_: str | None = Field(alias="from")
    to: str | None
    reason: str | None


class TraceEgressRefused(BaseModel):
    total: int = Field(description="Egress attempts the run's sandbox had refused.")
    by_reason: dict[str, int] = Field(description="By reason code: not_allowed, "
                                                  "internal_address, metadata_address.")


class TraceChild(BaseModel):
    seq: int = Field(description="The ChildRunStarted event.")
    run_id: str
    agent_id: str
    version: int
    status: str | None = Field(description="How it ended, once this run has read it.")


class TraceSummary(BaseModel):
    seq: int = Field(description="The Summarized event.")
    upto_seq: int = Field(description="Its summary stands for every step up to this seq.")


class TraceStop(BaseModel):
    seq: int = Field(description="The BudgetStopped event.")
    limit: str = Field(description="max_steps, max_tokens, max_cost_micros, repeat_limit or "
                                   "monthly_spend_cap_micros.")
    used: int
    max: int
    reason: str | None = Field(description="`repeating` for a repeat-detection stop; null "
                                           "otherwise.")


class TraceOut(BaseModel):
    """Where a run's wall time went. Spans partition [created_at, ended_at or now]."""

    run_id: str
    status: str
    agent_id: str
    agent_version: int
    created_at: datetime
    ended_at: datetime | None
    wall_ms: float
    totals: TraceTotals
    sandbox: TraceSandbox | None
    spans: list[TraceSpan]
    fallbacks: list[TraceFallback]
    egress_refused: TraceEgressRefused
    parent_run_id: str | None = Field(
        default=None, description="The run whose `start_agent` call started this one.")
    children: list[TraceChild] = Field(
        default_factory=list, description="The child runs this run started, in order.")
    summaries: list[TraceSummary] = Field(description="The run's summarizing calls (their "
                                                      "spans are `model` spans too).")
    stopped: TraceStop | None = Field(description="The BudgetStopped that ended the run; "
                                                  "null if none did.")


def events_url(run: RunId) -> str:
    return f"/v1/runs/{run}/events"


def run_out(run: service.Run) -> RunOut:
    return RunOut(
        run_id=str(run.run_id), agent_id=str(run.agent_id), version=run.agent_version,
        status=run.status.value, priority=run.priority, input=run.input, answer=run.answer,
        error=run.error,
        usage=Usage(input_tokens=run.input_tokens, output_tokens=run.output_tokens),
        cost_micros=run.cost_micros, steps=run.steps, last_seq=run.last_seq,
        cancel_requested=run.cancel_requested, webhook=run.webhook_url,
        events_url=events_url(run.run_id), created_at=run.created_at,
        updated_at=run.updated_at, finished_at=run.finished_at,
        parent_run_id=str(run.parent_run_id) if run.parent_run_id is not None else None,
        waiting_reason=_WAITING_REASONS.get(run.waiting_reason or ""),
    )


_WAITING_REASONS: dict[str, Literal["monthly_spend_cap", "authorization_required"]] = {
    MONTHLY_SPEND_CAP: "monthly_spend_cap", AUTHORIZATION_REQUIRED: "authorization_required"}


#: The shedding answer (ADR 0008): which priorities of new runs the cell refuses now, never
#: how deep its queue is.
OVERLOADED: dict[str, Any] = {
    "description": "`overloaded`: the cell is shedding new runs — new batch runs past its "
                   "batch level, every new run past its last; `shed` names the priorities "
                   "refused now. Nothing was written; retry after `Retry-After` seconds. An "
                   "idempotent retry of a run already accepted is answered, never refused. "
                   "(`database_unavailable`, without `shed`: the database is not answering.)",
    "headers": {"Retry-After": {"description": "Seconds to wait before retrying.",
                                "schema": {"type": "integer", "minimum": 1}}},
    "content": {"application/problem+json": {"schema": {"allOf": [
        {"$ref": "#/components/schemas/Problem"},
        {"type": "object", "required": ["retry_after"], "properties": {
            "shed": {"type": "array", "items": {"type": "string",
                                                "enum": ["batch", "interactive"]}},
            "retry_after": {"type": "integer", "minimum": 1}}},
    ]}}},
}
