"""Blob stores for tests: the real registry (the test's database) over a real object store
— a directory here; the S3 engine's in tests/support/object_store.py — and a directory
store whose deletes fail until told otherwise (a disk or object store refusing), to show
the retention outbox keeps and retries."""

from __future__ import annotations

from pathlib import Path

from tenantry.blobs import BlobKind, Blobs, BlobStoreUnavailable, DirectoryObjects, ObjectStore
from tenantry.db import Database
from tenantry.ids import RunId, TenantId


def directory_blobs(db: Database, root: Path, *, quota_bytes: int | None = None,
                    patience_seconds: float = 0.0) -> Blobs:
    return Blobs(db, DirectoryObjects(root), quota_bytes=quota_bytes,
                 patience_seconds=patience_seconds)


async def put(blobs: Blobs, tenant: TenantId, run: RunId, name: str, data: bytes,
              kind: BlobKind = BlobKind.TOOL_OUTPUT) -> str:
    """A blob of ``run`` as the gateway writes a large output (the default kind)."""
    return await blobs.put(tenant, run, kind, name, data)


async def stored(objects: ObjectStore, tenant: TenantId | str) -> set[str]:
    """The refs the object store holds under the tenant's prefix (the bucket, listed)."""
    prefix = f"{tenant}/"
    return {key.removeprefix(prefix) for key in await objects.keys(prefix)}


class FailingDeletes(DirectoryObjects):
    failing: bool = True
    attempts: int = 0

    async def delete(self, key: str) -> None:
        self.attempts += 1
        if self.failing:
            raise BlobStoreUnavailable("the blob directory refused a delete: Input/output "
                                       "error (test: the store refuses deletes)")
        await super().delete(key)
