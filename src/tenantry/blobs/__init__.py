"""The blob store: payloads too big for the event log (tool output, sandbox files), kept by
reference. A directory by default; anything with the same three methods (S3, GCS) fits.

Each tenant may hold at most ``quota_bytes`` (TENANTRY_BLOB_QUOTA_MIB): a write past it
is refused with :class:`BlobQuotaExceeded` and nothing is written. Usage is what the
tenant's folder holds right now, read at each write, so it needs no bookkeeping: deleting
a blob (a run's end, retention) releases its bytes at once, and every worker on the host
sees the same figure. Writers racing on one tenant can overshoot by their blobs in flight."""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tenantry.errors import QuotaExceeded
from tenantry.ids import TenantId

if TYPE_CHECKING:
    from tenantry.config import Settings

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class BlobStore(Protocol):
    async def put(self, tenant: TenantId, name: str, data: bytes) -> str: ...

    async def get(self, tenant: TenantId, ref: str) -> bytes: ...

    async def delete(self, tenant: TenantId, ref: str) -> None: ...


class BlobQuotaExceeded(QuotaExceeded):
    """The tenant's blobs would exceed its quota: the write is refused (nothing written).
    Not retryable as such: only deleting blobs (runs ending, retention) makes room."""

    type = "blob_quota_exceeded"
    title = "Blob store quota exceeded"
    retryable = False


class DirectoryBlobStore:
    """``<root>/<tenant>/<name>.<sha256 prefix>``: a tenant's blobs never share a folder with
    another tenant's, and a ref from one tenant resolves nowhere for another. One directory
    per host: several worker hosts need a shared directory or an object store.
    ``quota_bytes``: per tenant (None: no quota)."""

    def __init__(self, root: Path, *, quota_bytes: int | None = None) -> None:
        self.root = root
        self.quota_bytes = quota_bytes

    def usage(self, tenant: TenantId) -> int:
        """Bytes the tenant's blobs hold (half-written ones included: they are on disk)."""
        try:
            entries = list(os.scandir(self.root / tenant.value))
        except FileNotFoundError:
            return 0
        total = 0
        for entry in entries:
            try:
                total += entry.stat(follow_symlinks=False).st_size
            except FileNotFoundError:  # deleted or renamed in between
                continue
        return total

    def _path(self, tenant: TenantId, ref: str) -> Path:
        if "/" in ref or ref in ("", ".", "..") or _SAFE.search(ref):
            raise ValueError(f"not a blob ref: {ref!r}")
        return self.root / tenant.value / ref

    async def put(self, tenant: TenantId, name: str, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()[:16]
        ref = f"{_SAFE.sub('_', name)[:80]}.{digest}"
        path = self._path(tenant, ref)
        if self.quota_bytes is not None:
            self._check_quota(tenant, path, len(data))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)  # readers never see a half-written blob
        return ref

    def _check_quota(self, tenant: TenantId, path: Path, size: int) -> None:
        assert self.quota_bytes is not None
        try:
            replaced = path.stat().st_size  # the same ref again: its bytes are counted once
        except FileNotFoundError:
            replaced = 0
        used = self.usage(tenant) - replaced
        if used + size > self.quota_bytes:
            raise BlobQuotaExceeded(
                f"blob store quota reached: {_mib(used)} of {_mib(self.quota_bytes)} "
                f"used, this write needs {_mib(size)} more; nothing was written",
                used_bytes=used, quota_bytes=self.quota_bytes, needed_bytes=size)

    async def get(self, tenant: TenantId, ref: str) -> bytes:
        return self._path(tenant, ref).read_bytes()

    async def delete(self, tenant: TenantId, ref: str) -> None:
        self._path(tenant, ref).unlink(missing_ok=True)


def data_dir_store(settings: Settings) -> DirectoryBlobStore:
    """The data directory's blob store, as every process of one host opens it (workers
    write tool outputs and sandbox saves; the API and the retention commands read and
    delete them): one place, so they all see the same folder and quota."""
    return DirectoryBlobStore(settings.data_dir / "blobs",
                              quota_bytes=(settings.blob_quota_mib << 20) or None)


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"
