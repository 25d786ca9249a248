"""Carrying out exports: a leased, fenced loop beside the worker (ADR 0044), shaped like
retention's cleaner (ADR 0017).

A claim (``tenantry_claim_export``) takes one queued export, or one whose lease lapsed, and
bumps its epoch; the attempt writes the archive to a work directory (reading every row in
the tenant's transactions, :mod:`.archive`), renewing its lease between pages, then puts it
in the object store under the key its claim named, then marks the export ready in one
fenced statement with the archive's size and counts. So:

- a process that dies mid-export leaves a row whose lease lapses: the next claim takes it
  (and queues what the dead attempt may have written for deletion) and writes it again
  whole; an export is never ready with half an archive;
- a stale attempt (paused past its lease) finds its renewal or its finish refused: it stops,
  and deletes the object it wrote — its key is its epoch's, never the archive of record;
- an export whose row went meanwhile (the tenant erased) is refused the same way;
- an attempt that fails (the store or the database not answering, a bug) keeps a
  tenant-readable error and is tried again after ``retry_seconds``, up to ``max_attempts``
  claims, after which the claim marks it failed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tenantry.blobs import Blobs, BlobStoreUnavailable, object_key
from tenantry.db import DATABASE_DOWN, TRANSIENT, Database
from tenantry.db.queries import load
from tenantry.errors import NotFound, TenantryError
from tenantry.exports import jobs
from tenantry.exports.archive import write_archive
from tenantry.ids import ExportId, TenantId

logger = logging.getLogger(__name__)
Q = load(__package__)


@dataclass(frozen=True, slots=True)
class ExportSettings:
    #: The export's lease; renewed once a third of it has passed, between pages.
    lease_seconds: float = 60.0
    #: How often the loop looks for work when it found none.
    poll_seconds: float = 5.0
    #: Claims an export gets before it is failed (each after a crash, a lost lease or an
    #: error), and how long a failed attempt waits before the next.
    max_attempts: int = 3
    retry_seconds: float = 30.0
    #: Days a finished export (its archive, or its failure) is kept; the cleaner deletes it
    #: (and its row) after that.
    keep_days: int = 7
    #: Where archives are written before they go to the object store (None: the system's
    #: temporary directory).
    work_dir: Path | None = None


class ExportLeaseLost(TenantryError):
    """This attempt's lease is no longer held (expired, taken over, or the export gone)."""


@dataclass(frozen=True, slots=True)
class Claim:
    tenant: TenantId
    export: ExportId
    epoch: int
    archive_ref: str


@dataclass(slots=True)
class Exporter:
    db: Database
    blobs: Blobs
    settings: ExportSettings = field(default_factory=ExportSettings)
    owner: str = field(default_factory=lambda: f"exporter-{uuid.uuid4().hex[:12]}")
    #: Exports this process finished (what its log and tests count).
    done_total: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        """The worker's loop: one export after another, until ``stop``."""
        while not stop.is_set():
            found = False
            try:
                found = await self.run_once()
            except DATABASE_DOWN as exc:
                self.db.outage.failed("exports", exc)
            except TRANSIENT as exc:
                logger.warning("export claim rolled back by the database: %s", exc)
            except Exception:  # ours: said loudly, tried again at the next poll
                logger.exception("export loop failed")
            if not found:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.settings.poll_seconds)

    async def run_once(self) -> bool:
        """Claim one export and carry it out; False when there was none to claim."""
        claim = await self.claim()
        if claim is None:
            return False
        await self.export(claim)
        return True

    async def claim(self) -> Claim | None:
        async with self.db.unscoped() as conn:
            row = await conn.fetchrow(Q.claim, self.owner, self.settings.lease_seconds,
                                      self.settings.max_attempts, self.settings.keep_days)
        if row is None:
            return None
        return Claim(TenantId(row["tenant_id"]), ExportId(row["export_id"]), row["epoch"],
                     row["archive_ref"])

    async def export(self, claim: Claim) -> bool:
        """One attempt at ``claim``; True when it made the export ready."""
        fence = (claim.tenant.value, claim.export.uuid, self.owner, claim.epoch)
        renewed = time.monotonic()

        async def keep(force: bool = False) -> None:
            nonlocal renewed
            if not force and time.monotonic() - renewed < self.settings.lease_seconds / 3:
                return
            async with self.db.tenant_tx(claim.tenant) as conn:
                held = await conn.fetchval(Q.renew, *fence, self.settings.lease_seconds)
            if held is None:
                raise ExportLeaseLost(f"the lease of export {claim.export} epoch "
                                      f"{claim.epoch} is no longer held")
            renewed = time.monotonic()

        key = object_key(claim.tenant, claim.archive_ref)
        work = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="tenantry-export-",
                                            dir=self.settings.work_dir))
        stored = False
        try:
            try:
                export = await jobs.get(self.db, claim.tenant, claim.export)
            except NotFound:  # gone since the claim (the tenant erased)
                raise ExportLeaseLost(f"export {claim.export} was deleted") from None
            archive, written = await write_archive(self.db, self.blobs.objects, claim.tenant,
                                                   claim.export, export.created_at, work, keep)
            await keep(force=True)  # no object for an attempt already known to be stale
            await self.blobs.objects.put_file(key, archive)
            stored = True
            async with self.db.tenant_tx(claim.tenant) as conn:
                finished = await conn.fetchval(
                    Q.finish, *fence, written.archive_bytes, written.summary(),
                    self.settings.keep_days)
            if finished is None:
                raise ExportLeaseLost(f"export {claim.export} epoch {claim.epoch} was taken "
                                      "over or deleted before it finished")
        except ExportLeaseLost as exc:
            logger.warning("export attempt stopped: %s", exc.detail,
                           extra={"tenant": claim.tenant.value})
            if stored:  # its key is this epoch's alone: nobody else reads or writes it
                with contextlib.suppress(BlobStoreUnavailable):
                    await self.blobs.objects.delete(key)
            return False
        except Exception as exc:  # the attempt failed: said, kept, and tried again later
            logger.exception("export attempt failed", extra={"tenant": claim.tenant.value,
                                                             "export": str(claim.export)})
            with contextlib.suppress(Exception):
                async with self.db.tenant_tx(claim.tenant) as conn:
                    await conn.execute(Q.attempt_failed, *fence, _tenant_error(exc),
                                       self.settings.retry_seconds)
            return False
        finally:
            await asyncio.to_thread(shutil.rmtree, work, True)
        self.done_total += 1
        logger.info("export ready", extra={
            "tenant": claim.tenant.value, "export": str(claim.export),
            "bytes": written.archive_bytes, "runs": written.counts["runs.ndjson"]})
        return True


def _tenant_error(exc: BaseException) -> str:
    """What the tenant reads of a failed attempt: the kind of failure, never an endpoint
    or a trace (the operator's log has those)."""
    if isinstance(exc, BlobStoreUnavailable):
        return "the blob store did not answer"
    if isinstance(exc, DATABASE_DOWN + TRANSIENT):
        return "the database did not answer"
    return "internal error"
