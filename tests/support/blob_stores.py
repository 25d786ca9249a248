"""Blob stores for the retention tests: a real directory store whose deletes fail until
told otherwise (a disk or object store refusing), to show the outbox keeps and retries."""

from __future__ import annotations

from tenantry.blobs import DirectoryBlobStore
from tenantry.ids import TenantId


class FailingDeletes(DirectoryBlobStore):
    failing: bool = True
    attempts: int = 0

    async def delete(self, tenant: TenantId, ref: str) -> None:
        self.attempts += 1
        if self.failing:
            raise OSError(5, "Input/output error (test: the store refuses deletes)")
        await super().delete(tenant, ref)
