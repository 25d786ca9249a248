"""Where blob bytes live: an object store of keys and bytes, and nothing else (no tenants,
no quota, no runs — :mod:`tenantry.blobs.store` adds those). A directory for the embedded
default (:mod:`.directory`), an S3-compatible bucket in production (:mod:`.s3`).

Keys are ``<tenant>/<ref>``: a bucket policy or lifecycle rule can act per tenant by prefix.
A ref is one path segment of ``[A-Za-z0-9_.-]``, never ``.`` or ``..``, checked here for
every store, so no ref reaches another tenant's prefix or a file outside the root."""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, Protocol

from tenantry.errors import NotFound, TenantryError, ValidationFailed
from tenantry.ids import TenantId

#: What a ref is (the OpenAPI document publishes it as the path parameter's pattern).
REF_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$"
_REF = re.compile(REF_PATTERN.strip("^$"))
#: Seconds a refused read tells its caller to wait (Retry-After): an object store's
#: restart or a network blip.
UNAVAILABLE_RETRY_AFTER = 5
#: The pieces an object is streamed in (``ObjectStore.chunks``).
CHUNK_BYTES = 1 << 20


class ObjectStore(Protocol):
    """Bytes by key. ``put`` replaces whole (a reader never sees half an object); ``get``
    raises :class:`BlobNotFound` for a key that holds nothing; ``delete`` of a missing key
    is no error. Any failure to reach the store is :class:`BlobStoreUnavailable`."""

    async def put(self, key: str, data: bytes) -> None: ...

    async def get(self, key: str) -> bytes: ...

    async def put_file(self, key: str, path: Path) -> None:
        """``put`` of a local file's bytes, never all in memory (an export's archive)."""
        ...

    def chunks(self, key: str) -> AsyncGenerator[bytes, None]:
        """The object's bytes in pieces of about :data:`CHUNK_BYTES` (:class:`BlobNotFound`
        from the first step for a key that holds nothing)."""
        ...

    async def delete(self, key: str) -> None: ...

    async def keys(self, prefix: str) -> list[str]: ...

    async def check(self) -> None:
        """At start-up: the store is there and answers to these credentials; a clear
        :class:`BlobStoreUnavailable` (one line naming what failed) if not."""
        ...

    def describe(self) -> dict[str, Any]:
        """What an operator reads in logs: the kind of store and where (no secrets)."""
        ...

    async def close(self) -> None: ...


class BlobNotFound(NotFound):
    type = "blob_not_found"
    title = "Blob not found"


class BadBlobRef(ValidationFailed):
    type = "bad_blob_ref"
    title = "Not a blob ref"


class BlobStoreUnavailable(TenantryError):
    """The object store did not answer (down, unreachable, refusing our credentials).
    Retryable: nothing was lost; writes a step needs are tried again (the run waits),
    reads are answered 503 with Retry-After."""

    type = "blob_store_unavailable"
    status = 503
    title = "Blob store unavailable"
    retryable = True

    def __init__(self, detail: str = "", **extra: Any) -> None:
        extra.setdefault("retry_after", UNAVAILABLE_RETRY_AFTER)
        super().__init__(detail, **extra)


def check_ref(ref: str) -> str:
    """``ref`` if it is one (:class:`BadBlobRef` otherwise: a slash, ``..``, a leading
    dot, NUL, anything past the charset or 200 characters)."""
    if not isinstance(ref, str) or _REF.fullmatch(ref) is None:
        raise BadBlobRef(f"not a blob ref: {ref[:80]!r}" if isinstance(ref, str)
                         else "not a blob ref")
    return ref


def object_key(tenant: TenantId, ref: str) -> str:
    return f"{tenant.value}/{check_ref(ref)}"
