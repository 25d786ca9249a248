"""Tenant API: start, read, list and cancel runs, and stream their event logs (the bodies
are ``api/run_bodies.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response

from tenantry.api.auth import PlatformDep, RunsReader, RunsWriter
from tenantry.api.links import links, to
from tenantry.api.pagination import PageRequest, keyed_by
from tenantry.api.params import LongPageLimit, Seq, idempotency_header, parse_or_404
from tenantry.api.platform import Platform
from tenantry.api.run_bodies import (
    OVERLOADED,
    SSE_EVENT,
    EventOut,
    EventPage,
    RunList,
    RunOut,
    Started,
    StartRun,
    TraceOut,
    events_url,
    run_out,
)
from tenantry.api.streams import RETRY_AFTER, Slot, SlotStream
from tenantry.db import DATABASE_DOWN
from tenantry.errors import NotFound
from tenantry.ids import AgentId, RunId, TenantId
from tenantry.jsonutil import digest, dumps
from tenantry.runs import service
from tenantry.runs.events import TERMINAL_EVENTS, Event, EventType, RunStatus
from tenantry.runs.trace import build_trace

router = APIRouter(prefix="/v1/runs", tags=["runs"])
_RunPage = Annotated[PageRequest, Depends(keyed_by(RunId.pattern()))]

NOT_FOUND = service.NOT_FOUND
KEEPALIVE_SECONDS = 15.0
#: The events that close a model call: a live delta of a call before one is stale.
CALL_CLOSERS = frozenset({EventType.MODEL_REPLIED, EventType.RUN_PARKED, *TERMINAL_EVENTS})

_THE_RUN = {"run_id": "$response.body#/run_id"}
_STARTED = links(
    GetRun=to("GET", "/v1/runs/{run_id}", "The run just started.", parameters=_THE_RUN),
    RunEvents=to("GET", "/v1/runs/{run_id}/events", "Its event stream.", parameters=_THE_RUN),
    RunTrace=to("GET", "/v1/runs/{run_id}/trace", "Where its time goes.", parameters=_THE_RUN),
    RunChildren=to("GET", "/v1/runs/{run_id}/children", "The runs it starts.",
                   parameters=_THE_RUN),
    CancelRun=to("POST", "/v1/runs/{run_id}/cancel", "Cancel it.", parameters=_THE_RUN))


@router.post("", status_code=202, response_model=Started, responses={
    202: _STARTED,
    409: {"description": "`conflict`: the Idempotency-Key was used with a different body, "
                         "or by a run since deleted (`tombstoned: true`, `run_id` names it: "
                         "a key is not reusable while the run's tombstone lives); or the "
                         "agent is an activity (enqueue it with POST /v1/activity-tasks) or "
                         "a library task type (`agent_model` says which): no platform "
                         "worker drives those; `tenant_erased`: the tenant is being erased "
                         "and admits nothing; `admissions_paused` (with `paused_at`): an "
                         "operator paused the tenant's admissions"},
    429: {"description": "`quota_exceeded`: the tenant has `max_queued` runs not yet ended; "
                         "`budget_exhausted`: its monthly spend cap is reached"},
    503: OVERLOADED,
})
async def start_run(
    body: StartRun, response: Response, tenant: RunsWriter, p: PlatformDep,
    idempotency_key: str | None = idempotency_header(
        "Retrying with the same key and body returns the same run."),
) -> Started:
    """Start a run of an agent.

    The run is queued (202) and a worker drives it; the answer names it and its event
    stream. Without `version` the agent's live version runs. With an `Idempotency-Key`, a
    retry with the same key and body answers the same run instead of starting another."""
    agent = parse_or_404(AgentId, body.agent_id, "No agent with this id.")
    request = service.RunRequest(
        agent_id=agent, version=body.version, input=body.input, webhook_url=body.webhook,
        priority=body.priority, idempotency_key=idempotency_key,
        request_sha256=request_digest(body), stream=body.stream,
    )
    # Shedding (ADR 0008) looks at this run's priority; the intake answers an idempotent
    # retry of a run already accepted even while its class is shed.
    overloaded = await p.cell.refusal(body.priority) if p.cell is not None else None
    created = await p.intake.create(tenant, request, overloaded=overloaded)
    response.headers["Location"] = f"/v1/runs/{created.run_id}"
    return Started(run_id=str(created.run_id), status=created.status.value,
                   events_url=events_url(created.run_id))


def request_digest(body: StartRun) -> bytes:
    """What "the same body" means for an Idempotency-Key: the validated body, defaults
    filled in — but `stream: false` left out, so keys used before it existed still match."""
    dumped = body.model_dump(mode="json")
    if not dumped["stream"]:
        del dumped["stream"]
    return digest(dumped)


@router.get("", response_model=RunList)
async def list_runs(
    page: _RunPage, tenant: RunsReader, p: PlatformDep, status: RunStatus | None = Query(None),
) -> RunList:
    """List runs.

    The tenant's runs, newest first, optionally those with one `status`; `cursor` is the
    `next_cursor` of the previous page."""
    runs = await service.list_runs(p.db, tenant, before=page.position(RunId.parse),
                                   status=status, limit=page.limit)
    return page.answer(RunList, runs, run_out, key=lambda r: str(r.run_id))


@router.get("/{run_id}", response_model=RunOut)
async def get_run(run_id: str, tenant: RunsReader, p: PlatformDep) -> RunOut:
    """Get a run.

    Its status, answer or error, usage and cost, steps so far and the version of the agent
    it runs."""
    run = parse_or_404(RunId, run_id, NOT_FOUND)
    return run_out(await service.get_run(p.db, tenant, run))


@router.get("/{run_id}/children", response_model=RunList)
async def list_children(run_id: str, page: _RunPage, tenant: RunsReader, p: PlatformDep) -> RunList:
    """The child runs this run's `start_agent` calls started, oldest first (`cursor`:
    the last run id of the previous page)."""
    run = parse_or_404(RunId, run_id, NOT_FOUND)
    children = await service.list_children(p.db, tenant, run, after=page.position(RunId.parse),
                                           limit=page.limit)
    return page.answer(RunList, children, run_out, key=lambda r: str(r.run_id))


@router.get("/{run_id}/trace", response_model=TraceOut)
async def get_trace(run_id: str, tenant: RunsReader, p: PlatformDep) -> Response:
    """The run's trace, derived from its event log: queue, platform, gateway, model, tool,
    approval and parked time as contiguous spans whose durations add up to `wall_ms`,
    token and cost totals, the sandbox backend, and every model fallback or reroute."""
    return await trace_answer(p, tenant, parse_or_404(RunId, run_id, NOT_FOUND))


async def trace_answer(p: Platform, tenant: TenantId, run: RunId) -> Response:
    """The run's trace as ``build_trace`` wrote it (the tenant's route and the operator's)."""
    async with p.db.tenant_tx(tenant) as conn:
        trace = await build_trace(conn, tenant, run)
    if trace is None:
        raise NotFound(NOT_FOUND)
    # The contract is build_trace's own JSON (timestamps exactly as it wrote them).
    return Response(dumps(trace), media_type="application/json")


@router.post("/{run_id}/cancel", response_model=RunOut, responses={200: links(
    GetRun=to("GET", "/v1/runs/{run_id}", "The run.", parameters=_THE_RUN),
    DeleteRun=to("DELETE", "/v1/runs/{run_id}", "Delete it once it has ended.",
                 parameters=_THE_RUN))})
async def cancel_run(run_id: str, tenant: RunsWriter, p: PlatformDep) -> RunOut:
    """Cancel a run.

    Asks the run to stop: a queued or waiting run ends `cancelled` at once, a running one
    at its next step (a model reply already on its way is saved). Asking again changes
    nothing; a run that ended otherwise answers 409."""
    run = parse_or_404(RunId, run_id, NOT_FOUND)
    return run_out(await service.cancel_run(p.db, tenant, run))


#: The events route's answers (the tenant's and the operator's read of a run's log).
EVENTS_RESPONSES: dict[int | str, dict[str, Any]] = {200: {
    "description": "The run's event log after `after`: Server-Sent Events by default "
                   "(`id` is the seq), or one JSON page with `Accept: application/json`. "
                   "While a model call of the run streams, the SSE stream also carries "
                   "`model_delta` events (`{type, after_seq, text}`, no `id`): the "
                   "reply's text as it arrives, never stored nor replayed; a step's "
                   "deltas come before its `ModelReplied` and join into its `text` "
                   "(a retried call's deltas start again). JSON pages never hold them.",
    "content": {
        "text/event-stream": {"schema": SSE_EVENT},
        "application/json": {"schema": {"$ref": "#/components/schemas/EventPage"}},
    },
}, 429: {
    "description": "`overloaded`: this tenant, or this API process, has as many event "
                   "streams open as it serves (`TENANTRY_SSE_MAX_STREAMS_PER_TENANT`, "
                   "`TENANTRY_SSE_MAX_STREAMS`); the answer does not say which. Close "
                   "a stream or retry after `Retry-After` seconds. JSON pages are "
                   "never refused.",
    "headers": {"Retry-After": {"description": "Seconds to wait before retrying.",
                                "schema": {"type": "integer", "const": RETRY_AFTER}}},
    "content": {"application/problem+json": {"schema": {"allOf": [
        {"$ref": "#/components/schemas/Problem"},
        {"type": "object", "required": ["retry_after"],
         "properties": {"retry_after": {"type": "integer", "minimum": 1}}},
    ]}}},
}}
After = Annotated[Seq | None, Query(description="Resume after this seq (default 0).")]
EventsLimit = Annotated[LongPageLimit, Query(description="JSON page size.")]
LastEventId = Annotated[Seq | None, Header(description="SSE resume; same as `after`.")]


@router.get("/{run_id}/events", response_model=None, responses=EVENTS_RESPONSES)
async def run_events(
    run_id: str, request: Request, tenant: RunsReader, p: PlatformDep, after: After = None,
    limit: EventsLimit = 500, last_event_id: LastEventId = None,
) -> Response:
    """Read or stream a run's events.

    The run's event log after `after` (or `Last-Event-ID`): Server-Sent Events that stay
    open until the run ends, or one JSON page with `Accept: application/json`."""
    run = parse_or_404(RunId, run_id, NOT_FOUND)
    start = after if after is not None else (last_event_id or 0)
    return await events_answer(request, p, tenant, run, start, limit, stream_of=tenant.value)


async def events_answer(request: Request, p: Platform, tenant: TenantId, run: RunId,
                        start: int, limit: int, *, stream_of: str | None) -> Response:
    """The run's log after ``start``: a JSON page when asked for one, else the live SSE
    stream, counted as ``stream_of``'s (None: the operator's, as the console's are)."""
    if "application/json" in request.headers.get("accept", "") and (
        "text/event-stream" not in request.headers.get("accept", "")
    ):
        events = await service.read_events(p.db, tenant, run, after=start, limit=limit)
        next_after = events[-1].seq if events else start
        ended = any(e.type in TERMINAL_EVENTS for e in events)
        if not ended and len(events) < limit:
            # Past the terminal event (or an empty page after it): ask the run itself.
            ended = (await service.get_run(p.db, tenant, run)).status.terminal
        page = EventPage(events=[EventOut(**e.to_json()) for e in events],
                         next_after=next_after, run_ended=ended)
        return Response(page.model_dump_json(), media_type="application/json")
    slot = take_stream_slot(p, stream_of)
    try:
        # Check the run exists (and is this tenant's) before committing to a 200 stream.
        first, first_is_all = await first_events(p, tenant, run, start)
    except BaseException:
        slot.release()
        raise
    return SlotStream(
        event_stream(p, tenant, run, start, first, ended=first_is_all), slot,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def take_stream_slot(p: Platform, tenant: str | None) -> Slot:
    """A slot for one more open stream of ``tenant`` (None: the operator's console), or
    429 overloaded past the process's or the tenant's cap (shared with the console)."""
    return p.streams.take(tenant, max_total=p.settings.sse_max_streams,
                          max_per_tenant=p.settings.sse_max_streams_per_tenant)


async def first_events(
    p: Platform, tenant: TenantId, run: RunId, start: int
) -> tuple[list[Event], bool]:
    """The events a stream starts with, and whether they are all it will ever send (shared
    with the operator console's stream). NotFound when the run is not this tenant's."""
    first = await service.read_events(p.db, tenant, run, after=start, limit=500)
    # Resumed after the run ended: send what is left (webhook records) and close. The run
    # may have ended between the read above and the status check: its terminal event and
    # status commit together, so a read after a terminal status sees everything.
    is_all = (len(first) < 500 and not any(e.type in TERMINAL_EVENTS for e in first)
              and (await service.get_run(p.db, tenant, run)).status.terminal)
    if is_all:
        first = await service.read_events(p.db, tenant, run, after=start, limit=500)
        is_all = len(first) < 500 and not any(e.type in TERMINAL_EVENTS for e in first)
    return first, is_all


async def _woken(wake: asyncio.Event, closing: asyncio.Event) -> bool:
    """Wait for new events or shutdown; False when the keepalive interval passed first."""
    waiters = {asyncio.ensure_future(wake.wait()), asyncio.ensure_future(closing.wait())}
    try:
        done, _ = await asyncio.wait(waiters, timeout=KEEPALIVE_SECONDS,
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        # Also when the client went away and the stream is cancelled mid-wait: a waiter
        # left pending on the dropped `wake` is garbage-collected as "Task was destroyed
        # but it is pending!" (and one on `closing` would live until shutdown).
        for waiter in waiters:
            waiter.cancel()
    return bool(done)


def _sse(event: Event) -> bytes:
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (
        event.seq, event.type.encode(), dumps(event.to_json())
    )


def _delta_sse(after_seq: int, text: str) -> bytes:
    """A live model delta: no ``id`` line, so ``Last-Event-ID`` stays on durable seqs."""
    return b"event: model_delta\ndata: %s\n\n" % dumps(
        {"type": "model_delta", "after_seq": after_seq, "text": text})


async def event_stream(
    p: Platform, tenant: TenantId, run: RunId, after: int, first: list[Event], *, ended: bool,
    deltas: bool = True,
) -> AsyncIterator[bytes]:
    """A run's events as SSE from ``first`` on, live until the run ends (shared with the
    operator console's stream). With ``deltas``, the live ``model_delta`` events of the
    run's model calls in progress go in between (ADR 0030): never those of a call whose
    closing event (ModelReplied, RunParked, the end) was sent, or came before ``after``."""
    if ended:
        for event in first:
            yield _sse(event)
        return
    async with p.hub.subscribe(tenant.value, run.uuid, deltas=deltas) as sub:
        # `first` was read before we subscribed: re-read once straight away so an event
        # committed in between is not left waiting for the next notification.
        sub.news()
        batch = first
        failed = False  # the last read met an outage: retry at the next keepalive
        closed_at = after  # deltas of calls made before this seq are stale
        while True:
            for event in batch:
                yield _sse(event)
                after = event.seq
                if event.type in CALL_CLOSERS:
                    closed_at = event.seq
                if event.type in TERMINAL_EVENTS:
                    return
            if len(batch) < 500:
                # Idle: no connection is held or taken until a notification (or, after a
                # failed read, the keepalive interval) says there may be something to read;
                # live deltas are sent as they come meanwhile.
                while True:
                    sub.wake.clear()
                    for after_seq, text in sub.take_deltas():
                        if after_seq >= closed_at:
                            yield _delta_sse(after_seq, text)
                    if sub.durable:
                        break
                    if await _woken(sub.wake, p.closing):
                        if p.closing.is_set():
                            return  # the client resumes elsewhere with Last-Event-ID
                        continue
                    yield b": keepalive\n\n"
                    if failed:
                        break
            sub.durable = False
            try:
                batch = await service.read_events(p.db, tenant, run, after=after, limit=500)
                failed = False
            except NotFound:
                return
            except DATABASE_DOWN as exc:
                # The stream outlives an outage: the hub wakes every stream when its LISTEN
                # connection is back, and the keepalive interval retries meanwhile.
                p.db.outage.failed("event stream", exc)
                batch, failed = [], True
