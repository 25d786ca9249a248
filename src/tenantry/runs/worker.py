"""A worker process's loop: claim runs, drive each in its own task, keep their leases alive,
deliver webhooks. One asyncio process holds thousands of runs: they mostly wait on models."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

import asyncpg

from tenantry.db import DATABASE_DOWN, TRANSIENT, Database
from tenantry.db.pool import connect_timeout, server_settings
from tenantry.ledger import budget
from tenantry.models.accounts import wake_parked
from tenantry.runs import approvals, liveness
from tenantry.runs.deltas import LISTENERS_CHANNEL
from tenantry.runs.driver import RunDriver
from tenantry.runs.engine import Engine
from tenantry.runs.lease import Lease, claim, release, renew, worker_id
from tenantry.runs.webhooks import WebhookSender
from tenantry.scheduler import spend_cap
from tenantry.scheduler.shedding import CellLoad, ShedLevel

logger = logging.getLogger(__name__)

WAKE_CHANNEL = "tenantry_runnable"


def _utcnow() -> datetime:
    return datetime.now(UTC)


LISTEN_FAILURES: tuple[type[Exception], ...] = (*DATABASE_DOWN, asyncpg.PostgresError)
SESSION_FAILURES: tuple[type[Exception], ...] = (*LISTEN_FAILURES,
                                                liveness.RegistrationFailed)


class Worker:
    def __init__(
        self, engine: Engine, *, dsn: str, concurrency: int = 200, claim_batch: int = 32,
        poll_seconds: float = 1.0, webhooks: WebhookSender | None = None,
        drain_seconds: float = 5.0, clock: Callable[[], datetime] = _utcnow,
        control: Database | None = None, claim_order: str = "fair",
        load: CellLoad | None = None, role: str | None = "tenantry_app",
    ) -> None:
        self.engine = engine
        self._dsn = dsn
        self._role = role  # of the session connection, as the pools' (a startup parameter)
        self.concurrency = concurrency
        self._batch = claim_batch
        self._poll = poll_seconds
        self._webhooks = webhooks
        self._drain = drain_seconds
        self._clock = clock
        # Claims and lease renewals on their own small pool: behind hundreds of steps
        # queued for the main pool they would starve (fewer runs claimed, leases at risk).
        self._control = control or engine.db
        self._claim_order = claim_order
        # The cell's load level (ADR 0008): from its first level on, in-flight runs of every
        # tenant are claimed before new runs. None: never (the claim's normal order).
        self._load = load
        self._level = ShedLevel.NORMAL
        self._active: dict[Lease, asyncio.Task[None]] = {}
        self._lease_of: dict[asyncio.Task[None], Lease] = {}
        self._wake = asyncio.Event()
        # LISTEN and the worker's session lock (ADR 0018) share one connection: while it is
        # down the loop claims nothing (what it took would be seen as a dead worker's).
        self._listener: asyncpg.Connection | None = None
        self._session: liveness.Session | None = None
        self._claimed_once = False

    @property
    def active(self) -> int:
        return len(self._active)

    async def run(self, stop: asyncio.Event) -> None:
        await self._listen()
        # Scrape-time gauges of this loop: breakers, sandbox pool, leases held by class.
        unwatch = self.engine.metrics.watch(
            model=self.engine.model, tools=self.engine.tools, sandboxes=self.engine.sandboxes,
            leases=lambda: [lease.tenant.value for lease in self._active])
        background = [asyncio.create_task(self._heartbeat(stop), name="lease-heartbeat"),
                      asyncio.create_task(self._housekeeping(stop), name="housekeeping")]
        # process_cpu_ms: the CPU this process spent from exec to its first claim (imports,
        # start-up checks, pools): what a replacement worker costs (benchmarks/recovery.py).
        logger.info("worker started", extra={
            "worker": self.engine.worker, "concurrency": self.concurrency,
            "lock_key": self._session.key if self._session is not None else None,
            "process_cpu_ms": round(time.process_time() * 1000)})
        try:
            while not stop.is_set():
                if await self._fill() == 0:
                    await self._idle(stop)
        finally:
            unwatch()
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            if self._webhooks is not None:
                await self._webhooks.stop()  # no delivery outlives the loop
            await self._shutdown()
            await self.engine.deltas.stop()
            if self._listener is not None:
                with contextlib.suppress(Exception):
                    await self._listener.close()

    async def _fill(self) -> int:
        """Claim as many runs as there are free slots; return how many were claimed."""
        free = self.concurrency - len(self._active)
        if free <= 0 or not self._alive():
            return 0
        try:
            level = await self._load.level() if self._load is not None else ShedLevel.NORMAL
            if level is not self._level:
                logger.info("cell load level changed", extra={
                    "level": level.name.lower(), "was": self._level.name.lower(),
                    "queued": self._load.depth if self._load is not None else 0})
                self._level = level
            leases = await claim(self._control, self.engine.worker, min(free, self._batch),
                                 self.engine.settings.lease_seconds, order=self._claim_order,
                                 in_flight_first=level.in_flight_first)
        except DATABASE_DOWN as exc:
            self._control.outage.failed("claim", exc)
            return 0
        except TRANSIENT as exc:  # the claim was rolled back whole: nothing was taken
            logger.warning("claim rolled back by the database, trying again: %s", exc)
            return 0
        if not self._claimed_once:  # start-up time, as operators and benchmarks see it
            self._claimed_once = True
            logger.info("first claim", extra={"worker": self.engine.worker,
                                              "claimed": len(leases)})
        for lease in leases:
            task = asyncio.create_task(RunDriver(self.engine, lease).drive(),
                                       name=f"run {lease.run}")
            self._active[lease] = task
            self._lease_of[task] = lease
            task.add_done_callback(self._finished)
        return len(leases)

    def _finished(self, task: asyncio.Task[None]) -> None:
        lease = self._lease_of.pop(task, None)
        if lease is not None:
            self._active.pop(lease, None)
        self._wake.set()  # a slot is free

    async def _idle(self, stop: asyncio.Event) -> None:
        """Sleep until new work is announced, a slot frees up, or the poll interval passes
        (expired leases and delayed runs are found by polling, not by notification)."""
        self._wake.clear()
        waiters = [asyncio.create_task(self._wake.wait()), asyncio.create_task(stop.wait())]
        try:
            await asyncio.wait(waiters, timeout=self._poll, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    def holds_session(self) -> bool:
        """For ``/readyz``: a loop without its session connection claims nothing."""
        return self._alive()

    def _alive(self) -> bool:
        """This loop's session lock is held (as far as we know: a drop noticed later only
        means what we claim meanwhile moves on, fenced by its epoch)."""
        return self._listener is not None and not self._listener.is_closed()

    async def _listen(self) -> None:
        """(Re)open the session connection: LISTEN, and the session lock registered under
        this worker's id (ADR 0018). A database restart closes it: housekeeping calls this
        again until it is back, and the worker re-takes its lock (its runs may have moved
        meanwhile; its writes to them are fenced by their epochs). It also hears which
        runs the API processes stream, and carries their model deltas (runs/deltas.py):
        nothing else runs statements on it once the lock is taken."""
        if self._alive():
            return
        if self._listener is not None:
            self.engine.deltas.detach(self._listener)
        self._listener = None
        conn: asyncpg.Connection | None = None
        try:
            conn = await asyncpg.connect(self._dsn, timeout=connect_timeout(self._dsn),
                                         server_settings=server_settings(self._role))
            session = await liveness.register(
                conn, self.engine.worker, rejoin=self._session is not None,
                new_id=lambda: worker_id(self.engine.worker.rsplit("-", 1)[0]))
            await conn.add_listener(WAKE_CHANNEL, self._on_runnable)
            await conn.add_listener(LISTENERS_CHANNEL, self.engine.deltas.on_listeners)
        except SESSION_FAILURES as exc:
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
            if isinstance(exc, DATABASE_DOWN):
                self._control.outage.failed("worker session", exc)
            else:
                logger.warning("no worker session connection, claiming nothing: %s", exc)
            return
        except BaseException:  # cancelled while connecting: leave nothing open
            if conn is not None:
                conn.terminate()
            raise
        if self._session is not None:
            logger.info("worker session lock taken again", extra={
                "worker": session.worker, "lock_key": session.key})
        # Only on a first registration may the id change (it was another worker's).
        self.engine.worker = session.worker
        self._session = session
        self._listener = conn
        self.engine.deltas.attach(conn)

    def _on_runnable(self, *_args: object) -> None:
        self._wake.set()

    async def _heartbeat(self, stop: asyncio.Event) -> None:
        interval = self.engine.settings.lease_seconds / 3
        while not stop.is_set():
            await asyncio.sleep(interval)
            held = list(self._active)
            try:
                lost = await renew(self._control, self.engine.worker, held,
                                   self.engine.settings.lease_seconds)
            except DATABASE_DOWN as exc:
                self._control.outage.failed("lease renewal", exc)
                continue
            except TRANSIENT as exc:
                logger.warning("cannot renew leases: %s", exc)
                continue
            for lease in lost:
                task = self._active.get(lease)
                if task is not None and not task.done():
                    logger.warning("lease lost; stopping the run here",
                                   extra={"run_id": str(lease.run)})
                    task.cancel()

    async def _housekeeping(self, stop: asyncio.Event) -> None:
        """Start due webhook deliveries, expire approvals nobody decided in time, requeue
        runs parked on a model whose recheck time has come, recheck runs held by their
        tenant's spend cap (ADR 0035), and forfeit budget reservations whose owner lost its
        lease. Deliveries
        run in their own tasks (never awaited here): a slow receiver must not hold up the
        rest of this loop."""
        while not stop.is_set():
            busy = 0
            await self._listen()
            try:
                if self._webhooks is not None:
                    busy += await self._webhooks.deliver_due()
                busy += await approvals.expire_due(self.engine.db, self._clock())
                busy += await wake_parked(self.engine.db, None)
                busy += await spend_cap.recheck(self.engine.db)
                busy += await budget.sweep(self.engine.db)
            except DATABASE_DOWN as exc:
                self.engine.db.outage.failed("housekeeping", exc)
            except TRANSIENT as exc:
                logger.warning("housekeeping paused: %s", exc)
            if not busy:
                await asyncio.sleep(self._poll)

    async def _shutdown(self) -> None:
        """Let in-flight steps finish briefly, then stop and hand the runs back at once
        (instead of making them wait out the lease)."""
        if not self._active:
            return
        tasks = list(self._active.values())
        leases = list(self._active)
        await asyncio.wait(tasks, timeout=self._drain)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for lease in leases:
            with contextlib.suppress(*DATABASE_DOWN):
                await release(self.engine.db, lease)
