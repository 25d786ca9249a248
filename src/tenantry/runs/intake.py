"""Group commit of new runs (ADR 0019). ``POST /v1/runs`` hands its run to the process's
intake, which gathers the requests that arrive while a batch commits into the next batch and
admits it in one transaction and one SQL call (``tenantry_create_runs``): each tenant's load
row is locked and updated once per batch instead of once per run, and the API's pool holds
one connection per batch in flight instead of one per request queued on a tenant's row.

Every request still gets its own answer — created, an idempotent replay, a conflict, a 404,
a 409 or a 429 — exactly as ``service.create_run`` gives it one run at a time: the function
makes the same checks in the same order, item by item, against a count it keeps while
holding the row."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg

from tenantry.agents.service import NOT_FOUND as AGENT_NOT_FOUND
from tenantry.agents.service import VERSION_NOT_FOUND
from tenantry.db import DATABASE_DOWN, TRANSIENT, Connection, Database
from tenantry.db.queries import load
from tenantry.errors import NotFound, TenantMoving, TenantryError
from tenantry.ids import RunId, TenantId
from tenantry.jsonutil import dumps
from tenantry.runs import service
from tenantry.runs.events import ABSENT, RunCreated, RunStatus
from tenantry.runs.service import INLINE_INPUT_BYTES, NOT_RUNNABLE_MODELS, Created, RunRequest
from tenantry.scheduler import admission

Q = load(__package__)
log = logging.getLogger(__name__)

#: The most runs one batch takes. Past a few hundred a batch's transaction holds its
#: tenants' rows long enough that the next batch's requests wait more than they save.
MAX_BATCH = 256
#: Batches in flight at once, each on its own pooled connection: while one commits (the
#: WAL flush is most of its time) the next gathers and starts.
FLUSHERS = 2
#: A batch Postgres rolled back (a deadlock with a claim or another batch) is tried again.
ATTEMPTS = 3
#: How long a quiet flusher keeps its pooled connection for the next request.
HOLD_IDLE_SECONDS = 2.0


@dataclass(slots=True)
class _Pending:
    tenant: TenantId
    request: RunRequest
    shed: bool  # the cell refuses this run's class now, unless it is a replay
    overloaded: Exception | None
    answer: asyncio.Future[Created]


@dataclass(slots=True)
class RunIntake:
    """One per API process, built with its :class:`Database` and closed before it. Started
    lazily by the first run it is given (it needs the running event loop)."""

    db: Database
    max_batch: int = MAX_BATCH
    flushers: int = FLUSHERS
    _queue: list[_Pending] = field(default_factory=list)
    _ready: asyncio.Event | None = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _closed: bool = False
    _busy: set[str] = field(default_factory=set)  # tenants of the batches committing now
    #: Batches committed and the runs' requests they answered (tests, benchmarks).
    batches: int = 0
    answered: int = 0

    async def create(self, tenant: TenantId, request: RunRequest, *,
                     overloaded: Exception | None = None) -> Created:
        """Admit and create one agent run, answered once its batch has committed.
        ``overloaded``: the cell's refusal for this run's class, raised unless the
        request is an idempotent retry of a run already accepted."""
        if self._closed:
            raise RuntimeError("the run intake is closed")
        ready = self._start()
        answer: asyncio.Future[Created] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(tenant, request, overloaded is not None, overloaded,
                                    answer))
        ready.set()
        return await answer

    def _start(self) -> asyncio.Event:
        if self._ready is None:
            self._ready = asyncio.Event()
            self._tasks = [asyncio.create_task(self._flush_forever(), name=f"run-intake-{n}")
                           for n in range(self.flushers)]
        return self._ready

    async def close(self) -> None:
        """Stop taking runs; batches in flight finish and are answered, then the
        connections go back to the pool."""
        self._closed = True
        if self._ready is not None:
            self._ready.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        _fail(self._queue, RuntimeError("the run intake is closed"))
        self._queue.clear()

    async def _flush_forever(self) -> None:
        assert self._ready is not None
        while not self._closed:
            await self._ready.wait()
            if self._closed:
                return
            try:
                # One connection held while requests keep coming: a batch costs one round
                # trip, not an acquire, a reset and a BEGIN/COMMIT besides.
                async with self.db.unscoped() as conn:
                    await self._serve(conn)
            except DATABASE_DOWN as exc:
                # No connection: the requests waiting now answer 503 at once rather than
                # wait out the outage (the next request tries to connect afresh).
                waiting = self._take()
                _fail(waiting, exc)
                self._release(waiting)
            except Exception:
                log.exception("the run intake's connection failed; taking another")

    async def _serve(self, conn: Connection) -> None:
        assert self._ready is not None
        while not self._closed:
            batch = self._take()
            if not batch:
                try:
                    async with asyncio.timeout(HOLD_IDLE_SECONDS):
                        await self._ready.wait()
                except TimeoutError:
                    return  # quiet: the connection goes back to the pool
                continue
            try:
                await self._flush(conn, batch)
            finally:
                self._release(batch)

    def _take(self) -> list[_Pending]:
        """The oldest waiting requests (cancelled ones dropped: nobody awaits them), but
        none of a tenant whose earlier batch is still committing: that batch holds the
        tenant's row, and a batch waiting for it would hold every other tenant's requests
        too (a whale's burst delayed the steady tenants' answers that way)."""
        assert self._ready is not None
        taken: list[_Pending] = []
        kept: list[_Pending] = []
        for pending in self._queue:
            if pending.answer.done():
                continue
            if len(taken) < self.max_batch and pending.tenant.value not in self._busy:
                taken.append(pending)
            else:
                kept.append(pending)
        self._queue = kept
        self._busy.update(p.tenant.value for p in taken)
        # What is left waits for a batch to finish (which wakes the flushers), unless the
        # batch was full and others can be taken at once.
        if not any(p.tenant.value not in self._busy for p in kept):
            self._ready.clear()
        return taken

    def _release(self, batch: Sequence[_Pending]) -> None:
        assert self._ready is not None
        self._busy.difference_update(p.tenant.value for p in batch)
        if self._queue:
            self._ready.set()

    async def _flush(self, conn: Connection, batch: list[_Pending]) -> None:
        try:
            rows = await self._commit(conn, batch)
        except DATABASE_DOWN as exc:
            _fail(batch, exc)  # each request answers 503, as it would alone
            raise
        except asyncpg.PostgresError as exc:
            if len(batch) == 1:
                _fail(batch, exc)
                return
            # Something about one item the edge did not catch: no request should fail for
            # another's; each is tried alone and answered for itself.
            log.warning("a batch of %d new runs failed (%s); trying each alone",
                        len(batch), exc)
            for pending in batch:
                await self._flush(conn, [pending])
            return
        except Exception as exc:
            _fail(batch, exc)
            return
        self.batches += 1
        self.answered += len(rows)
        for row in rows:
            pending = batch[row["i"]]
            if pending.answer.done():
                continue
            try:
                pending.answer.set_result(_answer(pending, row))
            except TenantryError as refused:
                pending.answer.set_exception(refused)

    @staticmethod
    async def _commit(conn: Connection, batch: Sequence[_Pending]) -> list[asyncpg.Record]:
        """One statement, so one transaction of its own (no BEGIN/COMMIT round trips)."""
        groups = _groups(batch)
        for attempt in range(1, ATTEMPTS + 1):
            try:
                rows: list[asyncpg.Record] = await conn.fetch(Q.create_runs, groups)
                return rows
            except TRANSIENT:
                if attempt == ATTEMPTS:
                    raise
        raise AssertionError("unreachable")


def _fail(batch: Sequence[_Pending], exc: BaseException) -> None:
    for pending in batch:
        if not pending.answer.done():
            pending.answer.set_exception(exc)


def _groups(batch: Sequence[_Pending]) -> list[dict[str, Any]]:
    """The batch as tenantry_create_runs takes it: per tenant, in tenant order (the order
    rows are locked in), each tenant's items in the order they arrived."""
    by_tenant: dict[str, list[dict[str, Any]]] = {}
    for index, pending in enumerate(batch):
        req = pending.request
        by_tenant.setdefault(pending.tenant.value, []).append({
            "i": index, "run_id": str(RunId.new().uuid), "agent_id": str(req.agent_id.uuid),
            "version": req.version, "input": req.input, "key": req.idempotency_key,
            "sha": req.request_sha256.hex(), "webhook": req.webhook_url,
            "priority": req.priority, "shed": pending.shed, "event": _created_event(req),
        })
    return [{"tenant": tenant, "items": items} for tenant, items in sorted(by_tenant.items())]


def _created_event(req: RunRequest) -> dict[str, Any]:
    """RunCreated's data as create_run_in writes it, but for the version, which the SQL
    function resolves (a request without one takes the agent's latest) and adds."""
    encoded = dumps(req.input)
    inline = len(encoded) <= INLINE_INPUT_BYTES
    data = RunCreated(
        agent_id=str(req.agent_id), version=0, priority=req.priority,
        input=req.input if inline else ABSENT,
        input_ref=None if inline else "run.input",
        input_bytes=None if inline else len(encoded),
        webhook_url=req.webhook_url or None,
        stream=req.stream,
    ).to_data()
    del data["version"]
    return data


def _answer(pending: _Pending, row: asyncpg.Record) -> Created:
    """The request's own answer from its row of the batch's result: its run, or the
    refusal create_run would have raised."""
    outcome: str = row["outcome"]
    detail: dict[str, Any] = row["detail"] or {}
    run = RunId(row["run_id"]) if row["run_id"] is not None else None
    if outcome in ("created", "existing"):
        assert run is not None
        return Created(run, RunStatus(row["status"]), outcome == "created")
    if outcome == "conflict":
        assert run is not None
        raise service.key_reused(run)
    if outcome == "tombstoned":
        assert run is not None
        raise service.key_tombstoned(run)
    if outcome == "overloaded":
        assert pending.overloaded is not None
        raise pending.overloaded
    if outcome == "agent_not_found":
        raise NotFound(AGENT_NOT_FOUND)
    if outcome == "version_not_found":
        raise NotFound(VERSION_NOT_FOUND)
    if outcome == "not_runnable":
        model = detail["model"]
        raise service.not_runnable(NOT_RUNNABLE_MODELS[model], model)
    if outcome == "erased":
        raise admission.erased()
    if outcome == "paused":
        # JSON renders the time in the session's time zone; the answer gives it in UTC,
        # as the row-at-a-time path (asyncpg's datetime) does.
        raise admission.paused(datetime.fromisoformat(detail["paused_at"]).astimezone(UTC))
    if outcome == "moving":
        raise TenantMoving()
    if outcome == "no_policy":
        raise admission.no_policy()
    if outcome == "quota":
        raise admission.quota_exceeded(detail["current"], detail["limit_value"])
    if outcome == "budget":
        raise admission.budget_exhausted(detail["current"], detail["limit_value"])
    raise AssertionError(f"tenantry_create_runs answered an unknown outcome {outcome!r}")
