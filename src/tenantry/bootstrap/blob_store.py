"""The object store a process opens, checked before anything is served: a missing bucket,
refused credentials or an unreachable endpoint is one line (:class:`StartupFailed`), not a
traceback and not a worker that fails its first run."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tenantry.blobs import BlobStoreUnavailable, ObjectStore, open_objects
from tenantry.bootstrap import StartupFailed
from tenantry.config import Settings

logger = logging.getLogger(__name__)


@asynccontextmanager
async def object_store(settings: Settings) -> AsyncIterator[ObjectStore]:
    objects = open_objects(settings)
    try:
        try:
            await objects.check()
        except BlobStoreUnavailable as exc:
            raise StartupFailed(f"blob store: {exc.detail}") from None
        logger.info("blob store ready", extra=objects.describe())
        yield objects
    finally:
        await objects.close()


async def check_object_store(settings: Settings) -> None:
    """Before serving: the configured store answers (:class:`StartupFailed` if not)."""
    async with object_store(settings):
        pass
