"""A run's trace: where its wall time went, step by step, derived from the run row and its
event log only — so it is the same on any API replica and survives any worker crash.

``spans`` partition ``[created_at, ended_at or now]`` contiguously: each span starts where
the previous one ended, and their durations add up to ``wall_ms`` (exactly, in integer
microseconds, before each is rounded to 0.001 ms for the JSON). Spans come from when
things happened — the claim (the row's ``started_at``), each call's end (the transaction
that saved it) and its length as the worker measured it — not from the order of the log:
an event another writer appended during a call or in the queue (FOREIGN: a cancel
request, a signal) is no boundary; it only ends a wait (an approval decided, an activity
returned, a parked task signalled) or, written with RunCancelled, the run. Every gap between
two consecutive transactions of the run's own writers is attributed to one cause:

- ``queue``: from RunCreated to the first claim (the run row's ``started_at``), and, after an
  approval was decided, the time until a worker took the run back (this also holds the few
  milliseconds of that worker loading the run);
- ``gateway`` then ``model``: one ModelReplied's ``waited_ms`` (the worker's whole wait on
  the model gateway), ending at its event (a ModelFallback/ModelRerouted written with it
  shares its transaction), split into the answering provider's own time (the ``model``
  span, last: the answer came at its end — ``latency_ms`` less ``connect_ms``, the part it
  spent opening a connection) and the gateway's part before it (``gateway``: its capacity
  gate, building a client, opening the connection, attempts that failed, backoff, other
  accounts and models tried). Events written before ``waited_ms`` existed give ``model``
  only, of ``latency_ms``;
- ``tool``: a ToolCompleted's ``duration_ms``, ending at its event (for built-in code tools
  ``detail.sandbox`` carries backend, id, warm, ready_ms, exec_ms; ``totals.sandbox_ms`` sums
  exec_ms — it is part of tool time, not a separate slice of the partition);
- ``approval``: ApprovalRequested → the decision (or whatever ended the wait);
- ``tool`` also: ActivityRequested → ActivityReturned, the run waiting (slot released) for
  the activity task its call enqueued (ADR 0015); then ``queue`` until a worker took it;
  and ChildRunStarted → the parent's next write (another child started, or a child's
  ending read after the parent was woken): waiting for its child runs, claim included;
- ``parked``: RunParked → RunResumed (the run waited for a model provider, its token
  bucket or its tenant's monthly spend cap, slot released; includes being claimed again);
- ``platform``: the rest of each gap — Postgres writes, budget reservation, deciding,
  loading a run, a sandbox save before a park, and lease recovery after a worker died.

How exact it is: ``run_events.created_at`` is ``now()`` — the *start* of the transaction
that appended the event — so events of one transaction share a timestamp and an event's
time is when its writer began saving it (just after the model or tool returned). Model and
tool durations are the worker's own measurements; when one is longer than its gap (clock
skew between worker and database) it is clamped to the gap, never overlapping or going
negative (``gateway`` is clamped before ``model``).
Transactions that committed out of start order are clamped to zero-length gaps. So the
partition is exact, and the attribution within a step is good to a few milliseconds (the
database round trips around each call). A running run's last span runs to "now" and is
``platform`` labelled ``in progress`` (a model or tool call in flight is not in the log
yet), after its queue wait if nothing is written since its claim.

``egress_refused`` sums the EgressRefused events (an activity task's: its attempts'
refusals): egress attempts the run's sandbox had refused, in total and by reason code.
A summarizing call (Summarized, ADR 0031) is a ``gateway`` then ``model`` span like a
reply's, labelled ``summary by <model>``, its tokens and cost in the totals; ``summaries``
lists them (seq, upto_seq). ``stopped`` is the BudgetStopped that ended the run (limit,
used, max, and ``reason`` — ``repeating`` for a repeat-detection stop), else null."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from tenantry.db import Connection
from tenantry.db.queries import load
from tenantry.ids import AgentId, RunId, TenantId
from tenantry.runs import log
from tenantry.runs.events import (
    ABSENT,
    TERMINAL_EVENTS,
    ActivityAttempted,
    ActivityRequested,
    ActivityReturned,
    ApprovalDecided,
    ApprovalRequested,
    BudgetStopped,
    ChildRunEnded,
    ChildRunStarted,
    EgressRefused,
    Event,
    EventType,
    ModelFallback,
    ModelReplied,
    ModelRerouted,
    NewerEvent,
    Payload,
    RunCreated,
    RunParked,
    Summarized,
    ToolCompleted,
)

Q = load(__package__, "trace.sql")

#: A trace reads at most this many events (a run of ~15 steps writes ~50).
MAX_TRACE_EVENTS = 100_000
SPAN_KINDS = ("queue", "platform", "gateway", "model", "tool", "approval", "parked")
#: Events written by someone other than the run's worker (the API, a person): the run was
#: not necessarily being driven in the gap before them.
FOREIGN = frozenset({EventType.CANCEL_REQUESTED, EventType.APPROVAL_DECIDED,
                     EventType.SIGNALLED, EventType.WEBHOOK_DELIVERED,
                     EventType.WEBHOOK_FAILED, EventType.ACTIVITY_RETURNED})
_US = timedelta(microseconds=1)


def _ms(us: int) -> float:
    return round(us / 1000, 3)


def _us(ms: float) -> int:
    """Recorded milliseconds as whole microseconds (rounded: 4.097 ms is 4097 µs, not the
    4096 that truncating its binary fraction would give)."""
    return max(round(float(ms) * 1000), 0)


@dataclass(slots=True)
class _Wait:
    kind: str
    seq: int
    label: str
    detail: dict[str, Any]


@dataclass(slots=True)
class _Builder:
    """Lays spans end to end over integer microseconds since the run's creation."""

    spans: list[dict[str, Any]] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SPAN_KINDS, 0))
    cursor: int = 0

    def add(self, kind: str, until: int, seq: int, label: str,
            detail: dict[str, Any] | None = None, *, keep_empty: bool = False) -> None:
        until = max(until, self.cursor)
        duration = until - self.cursor
        if duration == 0 and not keep_empty:
            return
        self.spans.append({"kind": kind, "start_ms": _ms(self.cursor),
                           "duration_ms": _ms(duration), "seq": seq, "label": label,
                           "detail": detail or {}})
        self.totals[kind] += duration
        self.cursor = until


def _typed(event: Event) -> Payload | None:
    """The payload, or None for an event this code cannot read (the trace skips it)."""
    try:
        return event.payload
    except NewerEvent:
        return None


def _external(group: list[Event],
              ) -> tuple[int, ModelReplied | Summarized | ToolCompleted | ActivityAttempted,
                         float] | None:
    """The model or tool call (or activity attempt) that a transaction saved, with its
    measured duration."""
    for event in group:
        match _typed(event):
            case ActivityAttempted() as attempted:
                return event.seq, attempted, float(attempted.duration_ms)
            case ModelReplied() | Summarized() as reply:
                # waited_ms: the whole gateway call (retries, other accounts); older events
                # carry only the answering provider's latency_ms.
                return event.seq, reply, float(reply.waited_ms or reply.latency_ms or 0)
            case ToolCompleted() as done:
                return event.seq, done, float(done.duration_ms or 0.0)
    return None


def _model_detail(reply: ModelReplied | Summarized) -> dict[str, Any]:
    inp = int(reply.usage.get("input_tokens", 0))
    out = int(reply.usage.get("output_tokens", 0))
    detail = {"provider": reply.provider, "account": reply.account,
              "model": reply.model, "input_tokens": inp, "output_tokens": out,
              "tokens": inp + out, "cost_micros": int(reply.cost_micros),
              "latency_ms": reply.latency_ms, "waited_ms": reply.waited_ms,
              "connect_ms": reply.connect_ms if isinstance(reply, ModelReplied) else None}
    if isinstance(reply, Summarized):
        detail["summary_upto_seq"] = reply.upto_seq
    return detail


def _tool_detail(done: ToolCompleted) -> dict[str, Any]:
    outcome = done.outcome or ("error" if done.error is not None else "ok")
    detail: dict[str, Any] = {"tool": done.tool,
                              "server": None if done.server is ABSENT else done.server,
                              "outcome": outcome, "key": done.key,
                              "duration_ms": done.duration_ms}
    if isinstance(done.sandbox, dict):
        detail["sandbox"] = {k: done.sandbox.get(k)
                             for k in ("backend", "id", "warm", "ready_ms", "exec_ms")
                             if k in done.sandbox}
    return detail


def _groups(events: list[Event]) -> list[list[Event]]:
    """Consecutive events of one transaction (same ``created_at``)."""
    groups: list[list[Event]] = []
    for event in events:
        if groups and groups[-1][0].created_at == event.created_at:
            groups[-1].append(event)
        else:
            groups.append([event])
    return groups


async def build_trace(conn: Connection, tenant: TenantId, run: RunId) -> dict[str, Any] | None:
    """The run's trace (see the module docstring), or None when this tenant has no such
    run. ``conn`` must act for ``tenant`` (``Database.tenant_tx``)."""
    row = await conn.fetchrow(Q.trace_run, tenant.value, run.uuid)
    if row is None:
        return None
    events = await log.read(conn, tenant, run, after=0, limit=MAX_TRACE_EVENTS)
    return trace_of(run, row, events)


def trace_of(run: RunId, row: Any, events: list[Event]) -> dict[str, Any]:
    """The pure part of :func:`build_trace`: the run row's fields and its events."""
    created: datetime = row["created_at"]
    ended_at: datetime | None = row["finished_at"]
    end = max(((ended_at or row["now"]) - created) // _US, 0)
    started: int | None = None
    if row["started_at"] is not None:
        started = min(max((row["started_at"] - created) // _US, 0), end)
    # Only what happened up to the end: webhook bookkeeping after it is not run time.
    kept: list[Event] = []
    for event in events:
        kept.append(event)
        if event.type in TERMINAL_EVENTS:
            break
    body = [e for e in kept if e.seq > 1]  # after RunCreated (written with the run row)

    b = _Builder()
    fallbacks: list[dict[str, Any]] = []
    # Egress attempts the run's sandbox had refused, by reason code.
    refused: dict[str, int] = {}
    summarized: list[dict[str, Any]] = []  # each summary: where, and up to which seq
    stopped: dict[str, Any] | None = None  # the BudgetStopped that ended the run, if one did
    sandbox: dict[str, Any] | None = None
    sandbox_us = 0
    tokens = {"input_tokens": 0, "output_tokens": 0, "cost_micros": 0,
              "sandbox_cost_micros": 0}
    waiting: _Wait | None = None
    # The child runs this run started (ADR 0032), linked by id; ``status`` once ended.
    children: dict[str, dict[str, Any]] = {}
    claimed = False  # a worker has written to the log
    requeued = False  # an approval was decided: the run waits for a worker again
    after = "the approval"  # what requeued it
    for group in _groups(body):
        at = min(max((group[0].created_at - created) // _US, b.cursor), end)
        foreign = group[0].type in FOREIGN
        ends_run = any(e.type in TERMINAL_EVENTS for e in group)
        main = next((e for e in group if e.type in (EventType.MODEL_REPLIED,
                                                    EventType.SUMMARIZED,
                                                    EventType.TOOL_COMPLETED,
                                                    EventType.ACTIVITY_ATTEMPTED)), group[0])
        if foreign and waiting is None and not ends_run:
            # Appended by someone else while the run was queued or being driven — a cancel
            # request or a signal during a model call: not a boundary of the run's time (the
            # call's span ends at its own reply, and the queue at the claim).
            continue
        if waiting is not None:
            # Whatever ends a wait (a decision, the claim after a park, a signal to a parked
            # task, a cancel with its RunCancelled) closes it.
            if isinstance(decided := _typed(group[0]), ApprovalDecided):
                waiting.detail["decision"] = decided.decision
            if isinstance(returned := _typed(group[0]), ActivityReturned | ChildRunEnded):
                waiting.detail["status"] = returned.status
            b.add(waiting.kind, at, waiting.seq, waiting.label, waiting.detail)
            waiting = None
        elif foreign:
            # The API ended a run no worker held (a cancel of a queued or requeued run).
            if not claimed or requeued:
                b.add("queue", at, group[0].seq,
                      f"queued after {after}" if claimed else "queued")
            else:
                b.add("platform", at, group[0].seq, f"platform: {group[0].type}")
        else:
            external = _external(group)
            ext_us = min(_us(external[2] if external else 0.0), at - b.cursor)
            ext_start = at - ext_us
            if not claimed or requeued:
                label = "queued" if not claimed else f"queued after {after}"
                queue_end = ext_start
                if not claimed and started is not None:
                    queue_end = min(max(started, b.cursor), ext_start)
                elif not claimed:
                    queue_end = b.cursor  # claimed, but the row does not say when
                b.add("queue", queue_end, main.seq, label)
            b.add("platform", ext_start, main.seq, f"platform: {main.type}")
            match external:
                case (seq, ModelReplied() | Summarized() as reply, _):
                    # The answering provider's own time comes last; before it, the gateway's
                    # (capacity gate, client set-up, failed attempts, backoff, other accounts).
                    detail = _model_detail(reply)
                    provider_us = min(max(_us(reply.latency_ms or 0.0)
                                          - _us(detail["connect_ms"] or 0.0), 0), ext_us)
                    what = "summary by " if isinstance(reply, Summarized) else ""
                    b.add("gateway", at - provider_us, seq, f"gateway: {reply.model}", dict(detail))
                    b.add("model", at, seq, f"{what}{reply.model} via {reply.account}", detail,
                          keep_empty=True)
                case (seq, ToolCompleted() as done, _):
                    b.add("tool", at, seq, done.tool, _tool_detail(done), keep_empty=True)
                case (seq, ActivityAttempted() as attempted, _):
                    # An activity task's attempt: its sandbox time, as a tool call's is.
                    b.add("tool", at, seq, f"activity attempt {attempted.attempt}",
                          {"attempt": attempted.attempt, "status": attempted.status,
                           "error": attempted.error, "exit_code": attempted.exit_code,
                           "killed_sandbox": attempted.killed_sandbox,
                           "duration_ms": attempted.duration_ms,
                           "sandbox_id": attempted.sandbox_id}, keep_empty=True)
        if not foreign:
            claimed, requeued = True, False
        for event in group:
            match _typed(event):
                case ModelReplied() | Summarized() as reply:
                    # A summary's tokens are billed and budgeted as a reply's are.
                    if isinstance(reply, Summarized):
                        summarized.append({"seq": event.seq, "upto_seq": reply.upto_seq})
                    tokens["input_tokens"] += int(reply.usage.get("input_tokens", 0))
                    tokens["output_tokens"] += int(reply.usage.get("output_tokens", 0))
                    tokens["cost_micros"] += int(reply.cost_micros)
                case ModelFallback(from_=from_, to=to, reason=reason) | ModelRerouted(
                        from_=from_, to=to, reason=reason):
                    fallbacks.append({"seq": event.seq, "type": event.type,
                                      "from": from_, "to": to, "reason": reason})
                case ToolCompleted(sandbox=dict() as box):
                    sandbox = sandbox or {"backend": box.get("backend")}
                    sandbox_us += _us(box.get("exec_ms") or 0.0)
                    # The run's cost counts its sandbox time (the run row's cost does too).
                    tokens["sandbox_cost_micros"] += int(box.get("cost_micros") or 0)
                    tokens["cost_micros"] += int(box.get("cost_micros") or 0)
                case ApprovalRequested() as asked:
                    waiting = _Wait("approval", event.seq, f"approval of {asked.tool}",
                                    {"approval_id": asked.approval_id,
                                     "tool": asked.tool, "key": asked.key})
                case RunParked(reason=reason, until=until):
                    waiting = _Wait("parked", event.seq, f"parked: {reason[:120]}",
                                    {"reason": reason, "until": until})
                case ApprovalDecided():
                    requeued, after = True, "the approval"
                case ActivityRequested() as enqueued:
                    waiting = _Wait("tool", event.seq, f"activity {enqueued.tool}",
                                    {"tool": enqueued.tool, "key": enqueued.key,
                                     "task_id": enqueued.task_id})
                case ActivityReturned():
                    requeued, after = True, "the activity"
                case ChildRunStarted() as child:
                    waiting = _Wait("tool", event.seq, f"child run of {child.agent_id}",
                                    {"tool": child.tool, "key": child.key,
                                     "child_run_id": child.run_id})
                    children[child.key] = {"seq": event.seq, "run_id": child.run_id,
                                           "agent_id": child.agent_id,
                                           "version": child.version, "status": None}
                case ChildRunEnded(key=key, status=status) if key in children:
                    children[key]["status"] = status
                case EgressRefused(reason_code=code, count=count):
                    refused[code] = refused.get(code, 0) + count
                case ActivityAttempted(egress_refused_by_reason=dict() as by_reason):
                    for code, count in by_reason.items():
                        refused[code] = refused.get(code, 0) + count
                case BudgetStopped() as stop:
                    stopped = {"seq": event.seq, "limit": stop.limit, "used": stop.used,
                               "max": stop.max, "reason": stop.reason}
                case _:
                    pass
        b.cursor = max(b.cursor, at)
    last_seq = kept[-1].seq if kept else 0
    if b.cursor < end:
        if waiting is not None:
            b.add(waiting.kind, end, waiting.seq, waiting.label, waiting.detail)
        elif requeued or row["status"] == "queued":
            b.add("queue", end, last_seq, "queued")
        elif not claimed:
            # Claimed (the row says when) but nothing written yet: its first call is in
            # flight, not in the queue.
            b.add("queue", started if started is not None else end, last_seq, "queued")
            b.add("platform", end, last_seq, "in progress")
        else:
            b.add("platform", end, last_seq, "in progress")
    totals: dict[str, Any] = {f"{kind}_ms": _ms(b.totals[kind]) for kind in
                              ("platform", "gateway", "model", "tool")}
    totals["sandbox_ms"] = _ms(sandbox_us)
    totals.update({f"{kind}_ms": _ms(b.totals[kind]) for kind in
                   ("queue", "approval", "parked")})
    totals.update(tokens)
    return {
        "run_id": str(run),
        "status": row["status"],
        "agent_id": str(AgentId(row["agent_id"])),
        "agent_version": row["agent_version"],
        "created_at": created.isoformat(),
        "ended_at": ended_at.isoformat() if ended_at is not None else None,
        "wall_ms": _ms(end),
        "totals": totals,
        "sandbox": sandbox,
        "spans": b.spans,
        "fallbacks": fallbacks,
        "egress_refused": {"total": sum(refused.values()), "by_reason": refused},
        "parent_run_id": _parent(kept),
        "children": list(children.values()),
        "summaries": summarized,
        "stopped": stopped,
    }


def _parent(events: list[Event]) -> str | None:
    """The run whose start_agent call started this one (its RunCreated says)."""
    created = _typed(events[0]) if events else None
    return created.parent_run_id if isinstance(created, RunCreated) else None
