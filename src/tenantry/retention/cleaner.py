"""Leased, fenced cleanup per tenant (ADR 0017).

A pass takes the tenant's cleanup lease (its epoch bumped), then deletes candidates in
bounded batches — each one statement, so one transaction the server runs start to end:
``tenantry_retention_batch`` checks the lease at the batch's start and again at its end,
inserts a tombstone per run, queues the run's blobs in the outbox, and deletes the run
with everything that depends on it. A cleaner paused past its lease writes nothing: its
next batch finds the epoch moved on, or the clock past the lease, and rolls back. Then the
pass expires tombstones and audit rows past their own policies and drains the blob outbox
(after commit: a crash leaves an outbox row, never a dangling reference).

``tenantry worker`` runs :meth:`Cleaner.run`; ``tenantry retention run`` one
:meth:`Cleaner.run_once`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import asyncpg

from tenantry.blobs import BadBlobRef, BlobStore, BlobStoreUnavailable
from tenantry.db import DATABASE_DOWN, TRANSIENT, Database
from tenantry.db.queries import load
from tenantry.ids import RunId, TenantId
from tenantry.retention import policy as policies
from tenantry.retention.policy import RetentionPolicy

logger = logging.getLogger(__name__)
Q = load(__package__)

#: The SQLSTATE the batch functions raise when the lease is no longer this cleaner's.
LEASE_LOST = "TR001"
#: "Every run that ended, whenever": an erased tenant's cutoff, and one run's on request.
ANY_END = datetime(9999, 1, 1, tzinfo=UTC)
#: The run id of an audit row that is not about a run (the record of an audit expiry).
NO_RUN = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class CleanupSettings:
    #: Runs per batch (one transaction): bounds how long a batch holds its row locks.
    batch: int = 500
    #: The cleanup lease; renewed after every batch.
    lease_seconds: float = 30.0
    #: How often each tenant's pass comes round (an erased tenant's: every time).
    every_seconds: float = 60.0
    #: How often the worker's loop looks for due tenants and blobs.
    poll_seconds: float = 5.0
    #: Blob deletions per claim, and how long a claimed one waits before it is retried.
    blob_batch: int = 200
    blob_retry_seconds: float = 60.0
    #: After each full batch a pass rests this many times the batch's own time: a backlog
    #: is background work, and a pass flat out takes a Postgres backend's whole core from
    #: the runs beside it (benchmarks/retention.py). 1: at most half of one backend; 0: no
    #: rest. The steady state needs little: 500k runs a day is 6 deletions a second.
    rest_ratio: float = 1.0


@dataclass(slots=True)
class PassResult:
    """What one pass over one tenant did."""

    tenant: TenantId
    reason: str
    runs: int = 0
    events: int = 0
    blobs_queued: int = 0
    batches: int = 0
    tombstones_expired: int = 0
    audit_expired: int = 0
    #: Exports deleted (past their expiry; every one of an erased tenant), ADR 0044.
    exports_deleted: int = 0
    #: The lease was taken over (this cleaner was too slow or paused): it stopped there.
    lease_lost: bool = False
    erase_done: bool = False
    seconds: float = 0.0


Progress = Callable[[PassResult], None]


@dataclass(slots=True)
class Cleaner:
    db: Database
    blobs: BlobStore | None
    settings: CleanupSettings = field(default_factory=CleanupSettings)
    owner: str = field(default_factory=lambda: f"cleaner-{uuid.uuid4().hex[:12]}")
    #: Totals since this cleaner started (what the worker's metrics count).
    deleted_total: int = 0
    blobs_deleted_total: int = 0
    #: The worker's stop (set by :meth:`run`): a pass ends after the batch in flight, so a
    #: stopping worker is not held for the rest of a large backlog.
    _stop: asyncio.Event | None = field(default=None, init=False, repr=False)

    async def run(self, stop: asyncio.Event) -> None:
        """The worker's loop: due tenants' passes, then the blob outbox, until ``stop``."""
        self._stop = stop
        while not stop.is_set():
            try:
                await self.run_once()
            except DATABASE_DOWN as exc:
                # Said once for the whole process by its outage record (db/outage.py), not
                # a traceback per poll; the pass is tried again at the next one.
                self.db.outage.failed("retention", exc)
            except TRANSIENT as exc:  # a batch rolled back whole: nothing was deleted
                logger.warning("retention batch rolled back by the database: %s", exc)
            except Exception:  # ours: a bug, said loudly, and tried again at the next poll
                logger.exception("retention pass failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.poll_seconds)

    async def run_once(self, tenants: list[TenantId] | None = None, *,
                       progress: Progress | None = None) -> list[PassResult]:
        """One pass over each due tenant (or over ``tenants``, due or not), then the blob
        outbox. A tenant another cleaner holds is left to it."""
        if tenants is None:
            async with self.db.unscoped() as conn:
                rows = await conn.fetch(Q.due_tenants, self.settings.every_seconds, 1000)
            tenants = [TenantId(r["tenant_id"]) for r in rows]
        results = []
        for tenant in tenants:
            if self._stopping():
                break
            result = await self.clean(tenant, progress=progress)
            if result is not None:
                results.append(result)
        await self.drain_blobs()
        return results

    async def clean(self, tenant: TenantId, *,
                    progress: Progress | None = None) -> PassResult | None:
        """One pass over ``tenant``; None when another cleaner holds its lease."""
        started = asyncio.get_running_loop().time()
        async with self.db.unscoped() as conn:
            epoch = await conn.fetchval(Q.take_lease, tenant.value, self.owner,
                                        self.settings.lease_seconds)
        if epoch is None:
            return None
        async with self.db.tenant_tx(tenant) as conn:
            policy = await policies.read(conn, tenant)
            erased = await conn.fetchval(Q.tenant_state, tenant.value) is not None
        result = PassResult(tenant, "erase" if erased else "retention")
        try:
            cutoff = ANY_END if erased else \
                datetime.now(UTC) - timedelta(days=policy.runs_days)
            await self._delete(tenant, epoch, cutoff, policy, erased, result, progress)
            if not result.lease_lost:
                await self._expire(tenant, epoch, policy, result)
            if not result.lease_lost:
                await self._expire_exports(tenant, epoch, erased, result)
            if erased and not result.lease_lost:
                async with self.db.tenant_tx(tenant) as conn:
                    result.erase_done = await conn.fetchval(Q.finish_erase,
                                                            tenant.value) is not None
        finally:
            if not result.lease_lost:
                with contextlib.suppress(Exception):
                    async with self.db.unscoped() as conn:
                        await conn.fetchval(Q.keep_lease, tenant.value, self.owner, epoch,
                                            None, result.runs)
        result.seconds = round(asyncio.get_running_loop().time() - started, 3)
        if (result.runs or result.tombstones_expired or result.audit_expired
                or result.exports_deleted):
            logger.info("retention pass", extra={
                "tenant": tenant.value, "reason": result.reason, "runs": result.runs,
                "events": result.events, "blobs_queued": result.blobs_queued,
                "tombstones_expired": result.tombstones_expired,
                "audit_expired": result.audit_expired,
                "exports_deleted": result.exports_deleted, "seconds": result.seconds})
        return result

    async def _delete(self, tenant: TenantId, epoch: int, cutoff: datetime,
                      policy: RetentionPolicy, erased: bool, result: PassResult,
                      progress: Progress | None) -> None:
        blobs = policy.blobs_follow_runs or erased
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            row = await self._fenced(result, Q.batch, tenant.value, self.owner, epoch, cutoff,
                                     self.settings.batch, result.reason, None, blobs)
            if row is None:
                return
            result.batches += 1
            result.runs += row["runs"]
            result.events += row["events"]
            result.blobs_queued += row["blobs"]
            self.deleted_total += row["runs"]
            if erased and row["runs"]:
                async with self.db.tenant_tx(tenant) as conn:
                    await conn.execute(Q.erase_progress, tenant.value, row["runs"], 0, 0, 0,
                                       row["blobs"])
            if progress is not None:
                progress(result)
            if row["runs"] < self.settings.batch or self._stopping():
                return
            async with self.db.unscoped() as conn:
                kept = await conn.fetchval(Q.keep_lease, tenant.value, self.owner, epoch,
                                           self.settings.lease_seconds, 0)
            if not kept:
                result.lease_lost = True
                return
            # The blobs of what this batch deleted leave now, not after the whole pass.
            await self.drain_blobs()
            await self._rest((loop.time() - started) * self.settings.rest_ratio)

    def _stopping(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    async def _rest(self, seconds: float) -> None:
        if seconds <= 0:
            return
        if self._stop is None:
            await asyncio.sleep(seconds)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def _expire(self, tenant: TenantId, epoch: int, policy: RetentionPolicy,
                      result: PassResult) -> None:
        now = datetime.now(UTC)
        stones = None if policy.tombstones_days is None else \
            now - timedelta(days=policy.tombstones_days)
        audit = None if policy.audit_days is None else now - timedelta(days=policy.audit_days)
        if stones is None and audit is None:
            return
        while True:
            row = await self._fenced(result, Q.expire, tenant.value, self.owner, epoch,
                                     stones, audit, self.settings.batch)
            if row is None:
                return
            result.tombstones_expired += row["tombstones"]
            result.audit_expired += row["audit"]
            if row["audit"]:
                async with self.db.tenant_tx(tenant) as conn:
                    await conn.execute(
                        Q.record_audit_expiry, tenant.value, uuid.uuid4(), self.owner,
                        f"{row['audit']} audit rows older than {policy.audit_days} days "
                        f"deleted by the tenant's audit retention")
            if max(row["tombstones"], row["audit"]) < self.settings.batch:
                return

    async def _expire_exports(self, tenant: TenantId, epoch: int, erased: bool,
                              result: PassResult) -> None:
        """The tenant's exports past their expiry, or all of an erased tenant's; their
        archives go through the blob outbox (ADR 0044)."""
        while True:
            row = await self._fenced(result, Q.expire_exports, tenant.value, self.owner,
                                     epoch, erased, self.settings.batch)
            if row is None:
                return
            result.exports_deleted += row["gone"]
            if row["gone"] < self.settings.batch:
                return

    async def _fenced(self, result: PassResult, query: str, *args: object,
                      ) -> asyncpg.Record | None:
        """One fenced statement; None (and ``lease_lost``) when the lease was lost."""
        try:
            async with self.db.unscoped() as conn:
                row: asyncpg.Record | None = await conn.fetchrow(query, *args)
        except asyncpg.PostgresError as exc:
            if exc.sqlstate != LEASE_LOST:
                raise
            logger.warning("cleanup lease lost", extra={"tenant": result.tenant.value,
                                                        "detail": str(exc)})
            result.lease_lost = True
            return None
        return row

    async def delete_run(self, tenant: TenantId, run: RunId) -> bool:
        """Delete one terminal run now (``DELETE /v1/runs/{id}``); False when it was not
        deletable (the caller says why) or a cleaner is deleting it at this moment."""
        async with self.db.tenant_tx(tenant) as conn:
            policy = await policies.read(conn, tenant)
        async with self.db.unscoped() as conn:
            row = await conn.fetchrow(Q.batch, tenant.value, self.owner, None, ANY_END, 1,
                                      "request", run.uuid, policy.blobs_follow_runs)
        deleted = row is not None and row["runs"] == 1
        if deleted:
            self.deleted_total += 1
            await self.drain_blobs()
        return deleted

    async def drain_blobs(self) -> int:
        """Carry out the blob deletions that are due; how many blobs went. Idempotent: a
        blob already gone counts as deleted; a failure is retried later."""
        if self.blobs is None:
            return 0
        done = 0
        while True:
            async with self.db.unscoped() as conn:
                rows = await conn.fetch(Q.claim_blob_deletions, self.settings.blob_batch,
                                        self.settings.blob_retry_seconds)
            for r in rows:
                tenant = TenantId(r["tenant_id"])
                error: str | None = None
                try:
                    await self.blobs.delete(tenant, r["ref"])
                except (BlobStoreUnavailable, BadBlobRef) as exc:
                    error = f"{type(exc).__name__}: {exc.detail}"[:500]
                async with self.db.unscoped() as conn:
                    await conn.execute(Q.blob_deleted, tenant.value, r["ref"], error)
                done += error is None
            if len(rows) < self.settings.blob_batch:
                break
        self.blobs_deleted_total += done
        return done
