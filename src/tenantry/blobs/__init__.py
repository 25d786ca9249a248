"""The blob store: payloads too big for the event log (tool output over the cap, sandbox
file saves, screenshots), kept by reference, laid out by tenant.

- :mod:`.objects`: the object store protocol (keys and bytes) and its errors;
- :mod:`.directory`: the directory object store, the embedded default;
- :mod:`.s3`: the S3 object store, a bucket every host of a cell shares;
- :mod:`.store`: :class:`Blobs`, the registry in Postgres (whose run, how many bytes, the
  tenant's counted usage and quota) in front of an object store.

Every process of a cell opens the same store (:func:`open_blobs`): workers write tool
outputs, sandbox saves and screenshots; the API reads them for tenants and deletes a
deleted run's; retention drains its outbox into it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tenantry.blobs.directory import DirectoryObjects
from tenantry.blobs.objects import (
    BadBlobRef,
    BlobNotFound,
    BlobStoreUnavailable,
    ObjectStore,
    check_ref,
    object_key,
)
from tenantry.blobs.store import (
    WORKER_PATIENCE_SECONDS,
    BlobKind,
    BlobQuotaExceeded,
    BlobRecord,
    Blobs,
    BlobStore,
    blob_ref,
)

if TYPE_CHECKING:
    from tenantry.config import Settings
    from tenantry.db import Database

__all__ = [
    "WORKER_PATIENCE_SECONDS", "BadBlobRef", "BlobKind", "BlobNotFound", "BlobQuotaExceeded",
    "BlobRecord", "BlobStore", "BlobStoreUnavailable", "Blobs", "DirectoryObjects",
    "ObjectStore", "blob_ref", "check_ref", "object_key", "open_blobs", "open_objects",
]


def open_objects(settings: Settings) -> ObjectStore:
    """The configured object store (not yet checked: see :meth:`ObjectStore.check`)."""
    if settings.blob_store == "s3":
        # Only here: a process on the directory store never loads the S3 client.
        from tenantry.blobs.s3 import S3Objects

        assert settings.s3_bucket is not None  # Settings.validate requires it
        return S3Objects(bucket=settings.s3_bucket, endpoint=settings.s3_endpoint,
                         region=settings.s3_region, access_key_id=settings.s3_access_key_id,
                         secret_access_key=settings.s3_secret_access_key,
                         path_style=settings.s3_uses_path_style)
    return DirectoryObjects(settings.data_dir / "blobs")


def open_blobs(settings: Settings, db: Database, objects: ObjectStore, *,
               patience_seconds: float = 0.0) -> Blobs:
    """The blob store every process of the cell shares: one object store, one quota."""
    return Blobs(db, objects, quota_bytes=(settings.blob_quota_mib << 20) or None,
                 patience_seconds=patience_seconds)
