"""The blob store as the platform uses it: a tenant's payloads of one run, kept by ref in an
object store (:mod:`.objects`), each written as a row of the registry first (migration 0048,
ADR 0042).

- **Refs** are ``<name>.<sha256 prefix>``; every name names its run (a call's key,
  ``sandbox-<run>``, ``screenshot-<run>``), so two runs never share a ref, and a retried
  write of the same content is the same blob, counted once.
- **The row first, then the object**: a crash between leaves a row without an object
  (deleted with its run, harmlessly), never an object that no deletion would find.
- **Usage** is the tenant's counted bytes (``blob_usage``), changed in the transaction that
  adds or forgets a row; a write past ``quota_bytes`` is :class:`BlobQuotaExceeded` and
  writes nothing. A row and its bytes are forgotten once the object is gone
  (:meth:`Blobs.delete`, which the retention outbox's drain and a run's end call).
- **An object store that does not answer** (:class:`BlobStoreUnavailable`): a worker's
  store (``patience_seconds`` > 0) tries again, backing off, while the step that needs the
  blob waits with its lease held; past that the error reaches the run's driver, which leaves
  the run to be resumed from its log (no event ever names a blob that was not written). The
  API's store has no patience: its reads answer 503 with Retry-After at once."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from tenantry.backoff import backoff
from tenantry.blobs.objects import (
    BlobNotFound,
    BlobStoreUnavailable,
    ObjectStore,
    check_ref,
    object_key,
)
from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.errors import QuotaExceeded
from tenantry.ids import RunId, TenantId

Q = load(__package__)
logger = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
#: Seconds a worker's write or read waits for an object store that does not answer.
WORKER_PATIENCE_SECONDS = 120.0
_RETRY_FIRST, _RETRY_MAX = 0.5, 5.0


class BlobKind(StrEnum):
    TOOL_OUTPUT = "tool_output"  # a tool's output over the event cap
    SANDBOX_FILES = "sandbox_files"  # a run's work directory, saved at a park
    SCREENSHOT = "screenshot"  # a browser's screenshot


@dataclass(frozen=True, slots=True)
class BlobRecord:
    ref: str
    run: RunId
    kind: BlobKind
    bytes: int
    created_at: datetime


class BlobQuotaExceeded(QuotaExceeded):
    """The tenant's blobs would exceed its quota: the write is refused (nothing written).
    Not retryable as such: only deleting blobs (runs ending, retention) makes room."""

    type = "blob_quota_exceeded"
    title = "Blob store quota exceeded"
    retryable = False


class BlobStore(Protocol):
    """What the gateways, the sandboxes and retention need of :class:`Blobs`."""

    async def put(self, tenant: TenantId, run: RunId, kind: BlobKind, name: str,
                  data: bytes) -> str: ...

    async def get(self, tenant: TenantId, ref: str) -> bytes: ...

    async def delete(self, tenant: TenantId, ref: str) -> None: ...


def blob_ref(name: str, data: bytes) -> str:
    return f"{_UNSAFE.sub('_', name)[:80]}.{hashlib.sha256(data).hexdigest()[:16]}"


class Blobs:
    def __init__(self, db: Database, objects: ObjectStore, *, quota_bytes: int | None = None,
                 patience_seconds: float = 0.0) -> None:
        self.db = db
        self.objects = objects
        self.quota_bytes = quota_bytes
        self.patience_seconds = patience_seconds
        #: Object store calls that failed unavailable, by operation (write, read, delete):
        #: every attempt, retried ones included. Read by /metrics at scrape time.
        self.failures: dict[str, int] = {}

    async def put(self, tenant: TenantId, run: RunId, kind: BlobKind, name: str,
                  data: bytes) -> str:
        ref = blob_ref(name, data)
        row = await self.db.statement(Q.add_blob, tenant.value, ref, run.uuid, kind.value,
                                      len(data), self.quota_bytes)
        assert row is not None  # one row, always
        if not row["stored"]:
            used = int(row["used"])
            assert self.quota_bytes is not None
            raise BlobQuotaExceeded(
                f"blob store quota reached: {_mib(used)} of {_mib(self.quota_bytes)} used, "
                f"this write needs {_mib(len(data))} more; nothing was written",
                used_bytes=used, quota_bytes=self.quota_bytes, needed_bytes=len(data))
        key = object_key(tenant, ref)
        await self._patiently("write", lambda: self.objects.put(key, data))
        return ref

    async def get(self, tenant: TenantId, ref: str) -> bytes:
        """The blob's bytes (:class:`BlobNotFound` if the store holds none under ``ref``)."""
        key = object_key(tenant, ref)
        data: bytes = await self._patiently("read", lambda: self.objects.get(key))
        return data

    async def delete(self, tenant: TenantId, ref: str) -> None:
        """The object, then its row and its bytes (a crash between leaves the row, which
        the run's deletion forgets). Deleting what is gone is no error. Tried once: its
        callers (the retention outbox, a run's end) keep what failed and try it later."""
        await self._counted("delete", lambda: self.objects.delete(object_key(tenant, ref)))
        async with self.db.tenant_tx(tenant) as conn:
            await conn.execute(Q.forget_blob, tenant.value, ref)

    async def record(self, tenant: TenantId, run: RunId, ref: str) -> BlobRecord:
        """The registry's row of the run's blob ``ref`` (:class:`BlobNotFound` if the run
        has none by that ref, as for another tenant's or run's)."""
        check_ref(ref)
        async with self.db.tenant_tx(tenant) as conn:
            row = await conn.fetchrow(Q.run_blob, tenant.value, run.uuid, ref)
        if row is None:
            raise BlobNotFound(f"run {run} has no blob {ref}")
        return _record(row)

    async def of_run(self, tenant: TenantId, run: RunId) -> list[BlobRecord]:
        async with self.db.tenant_tx(tenant) as conn:
            rows = await conn.fetch(Q.run_blobs, tenant.value, run.uuid)
        return [_record(r) for r in rows]

    async def usage(self, tenant: TenantId) -> int:
        """The tenant's counted bytes."""
        async with self.db.tenant_tx(tenant) as conn:
            return int(await conn.fetchval(Q.usage, tenant.value))

    async def _patiently(self, what: str, attempt: Any) -> Any:
        deadline = time.monotonic() + self.patience_seconds
        tries = 0
        while True:
            try:
                return await self._counted(what, attempt)
            except BlobStoreUnavailable as exc:
                tries += 1
                wait = backoff(tries, first=_RETRY_FIRST, cap=_RETRY_MAX)
                if time.monotonic() + wait > deadline:
                    raise
                if tries == 1:
                    logger.warning("blob store unavailable; the %s waits for it: %s",
                                   what, exc.detail)
                await asyncio.sleep(wait)

    async def _counted(self, what: str, attempt: Any) -> Any:
        try:
            return await attempt()
        except BlobStoreUnavailable:
            self.failures[what] = self.failures.get(what, 0) + 1
            raise


def _record(row: Any) -> BlobRecord:
    return BlobRecord(row["ref"], RunId(row["run_id"]), BlobKind(row["kind"]),
                      int(row["bytes"]), row["created_at"])


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"
