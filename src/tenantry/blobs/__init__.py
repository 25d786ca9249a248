"""The blob store: payloads too big for the event log (tool output, sandbox files), kept by
reference. A directory by default; anything with the same three methods (S3, GCS) fits."""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from pathlib import Path
from typing import Protocol

from tenantry.ids import TenantId

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class BlobStore(Protocol):
    async def put(self, tenant: TenantId, name: str, data: bytes) -> str: ...

    async def get(self, tenant: TenantId, ref: str) -> bytes: ...

    async def delete(self, tenant: TenantId, ref: str) -> None: ...


class DirectoryBlobStore:
    """``<root>/<tenant>/<name>.<sha256 prefix>``: a tenant's blobs never share a folder with
    another tenant's, and a ref from one tenant resolves nowhere for another. One directory
    per host: several worker hosts need a shared directory or an object store."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, tenant: TenantId, ref: str) -> Path:
        if "/" in ref or ref in ("", ".", "..") or _SAFE.search(ref):
            raise ValueError(f"not a blob ref: {ref!r}")
        return self.root / tenant.value / ref

    async def put(self, tenant: TenantId, name: str, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()[:16]
        ref = f"{_SAFE.sub('_', name)[:80]}.{digest}"
        path = self._path(tenant, ref)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)  # readers never see a half-written blob
        return ref

    async def get(self, tenant: TenantId, ref: str) -> bytes:
        return self._path(tenant, ref).read_bytes()

    async def delete(self, tenant: TenantId, ref: str) -> None:
        self._path(tenant, ref).unlink(missing_ok=True)
