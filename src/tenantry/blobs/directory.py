"""The directory object store: ``<root>/<tenant>/<ref>``, the embedded default of ``tenantry
up``. One directory per host: hosts of a cell that share no filesystem need the S3 store.
Every file operation runs in a thread: a 64 MiB sandbox save never stalls the event loop."""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from tenantry.blobs.objects import CHUNK_BYTES, BlobNotFound, BlobStoreUnavailable


class DirectoryObjects:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        tenant, _, ref = key.partition("/")
        # Keys come from objects.object_key (checked refs); this is the last line anyway.
        if not tenant or not ref or "/" in ref or ref.startswith(".") or tenant.startswith("."):
            raise ValueError(f"not an object key: {key!r}")
        return self.root / tenant / ref

    async def put(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(self._write, self._path(key), data)

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)  # readers never see a half-written blob
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise BlobStoreUnavailable(f"the blob directory refused a write: {exc}") from exc

    async def put_file(self, key: str, path: Path) -> None:
        await asyncio.to_thread(self._copy, self._path(key), path)

    @staticmethod
    def _copy(target: Path, source: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
        try:
            shutil.copyfile(source, tmp)
            os.replace(tmp, target)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise BlobStoreUnavailable(f"the blob directory refused a write: {exc}") from exc

    async def chunks(self, key: str) -> AsyncGenerator[bytes, None]:
        path = self._path(key)
        try:
            handle = await asyncio.to_thread(path.open, "rb")
        except FileNotFoundError:
            raise BlobNotFound(f"no blob {key.partition('/')[2]}") from None
        except OSError as exc:
            raise BlobStoreUnavailable(f"the blob directory refused a read: {exc}") from exc
        try:
            while piece := await asyncio.to_thread(handle.read, CHUNK_BYTES):
                yield piece
        except OSError as exc:
            raise BlobStoreUnavailable(f"the blob directory refused a read: {exc}") from exc
        finally:
            # Not in a thread: a reader cancelled here (its client went away after the
            # last byte) would leave the file open. Closing a file opened to read is quick.
            handle.close()

    async def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return await asyncio.to_thread(path.read_bytes)
        except FileNotFoundError:
            raise BlobNotFound(f"no blob {key.partition('/')[2]}") from None
        except OSError as exc:
            raise BlobStoreUnavailable(f"the blob directory refused a read: {exc}") from exc

    async def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            await asyncio.to_thread(path.unlink, missing_ok=True)
        except OSError as exc:
            raise BlobStoreUnavailable(f"the blob directory refused a delete: {exc}") from exc

    async def keys(self, prefix: str) -> list[str]:
        return await asyncio.to_thread(self._keys, prefix)

    def _keys(self, prefix: str) -> list[str]:
        found = []
        for folder in sorted(self.root.iterdir()) if self.root.is_dir() else []:
            for entry in sorted(os.scandir(folder), key=lambda e: e.name):
                key = f"{folder.name}/{entry.name}"
                if not entry.name.startswith(".") and key.startswith(prefix):
                    found.append(key)
        return found

    async def check(self) -> None:
        def probe() -> None:
            self.root.mkdir(parents=True, exist_ok=True)
            if not os.access(self.root, os.W_OK | os.X_OK):
                raise BlobStoreUnavailable(f"the blob directory {self.root} is not writable")
        try:
            await asyncio.to_thread(probe)
        except OSError as exc:
            raise BlobStoreUnavailable(
                f"the blob directory {self.root} cannot be created: {exc.strerror}") from exc

    def describe(self) -> dict[str, Any]:
        return {"blob_store": "directory", "blob_root": str(self.root)}

    async def close(self) -> None:
        return None
