"""The S3 object store: one bucket of an S3-compatible service (AWS S3, SeaweedFS, MinIO,
Ceph, R2…), through ``obstore`` (Rust's ``object_store``: native async, its own threads;
ADR 0042 for the measurement that chose it).

Every failure to get an answer — a connection refused or reset, a name that does not
resolve, a timeout, a 5xx, a bucket that is not there, credentials the store refuses — is
:class:`BlobStoreUnavailable` with one line naming what failed (never a secret, never the
library's debug dump); 404 on an object is :class:`BlobNotFound`. A request is retried
twice by the library, then left to the caller (a worker's :class:`~tenantry.blobs.Blobs`
has its own patience; the API answers 503 at once)."""

from __future__ import annotations

import asyncio
import gc
import ipaddress
import re
import uuid
from collections.abc import AsyncGenerator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

import obstore
from obstore.exceptions import BaseError as ObstoreError
from obstore.store import S3Store

from tenantry.blobs.objects import CHUNK_BYTES, BlobNotFound, BlobStoreUnavailable

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig

CONNECT_TIMEOUT = timedelta(seconds=5)
#: One request, from connecting to the last byte of the answer; a big object goes up in
#: parts of 5 MiB (obstore's multipart threshold), each a request of its own.
REQUEST_TIMEOUT = timedelta(seconds=30)
#: The library's own retries of a request (5xx, connection errors, timeouts of reads),
#: with backoff, none started past RETRY_WINDOW after the first attempt.
RETRIES = 2
RETRY_WINDOW = timedelta(seconds=30)
#: Objects per page of a listing (S3's most).
LIST_PAGE = 1000

_STATUS = re.compile(r"status code: (\d{3})|status: (\d{3})")
_CODE = re.compile(r"<Code>([A-Za-z0-9.]+)</Code>")
_MESSAGE = re.compile(r"<Message>([^<]{1,200})</Message>")
_OS_MESSAGE = re.compile(r'message: "([^"]{1,120})"')
_CUSTOM = re.compile(r'error: "([^"]{1,160})"')
# S3's answers to a request signed with a key it does not know, or with the wrong secret.
_REFUSED_CREDENTIALS = frozenset({
    "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken",
    "InvalidClientTokenId", "InvalidSecurity",
})


#: What a 403 refused, by the action that got it.
_DENIED = {"write": "writes to", "read": "reads from", "delete": "deletes in",
           "listing": "listing"}


#: What a closing store gives obstore's threads to finish with it (see close).
CLOSE_SETTLE_SECONDS = 0.05


class S3Objects:
    """Objects in ``bucket``. ``endpoint``: the service's URL (``None``: AWS in ``region``);
    ``path_style``: the bucket in the path (``http://host/bucket/key``, what self-hosted
    servers expect; the default with an endpoint) or in the host name
    (``https://bucket.host/key``, AWS's default). ``http://`` is allowed only when the
    endpoint says so. No keys: the AWS credential chain (``AWS_*`` variables, web identity,
    the instance's role)."""

    def __init__(self, *, bucket: str, endpoint: str | None = None,
                 region: str = "us-east-1", access_key_id: str | None = None,
                 secret_access_key: str | None = None, path_style: bool | None = None
                 ) -> None:
        self.bucket = bucket
        self.region = region
        self.path_style = endpoint is not None if path_style is None else path_style
        self.endpoint = endpoint.rstrip("/") if endpoint else None
        if (access_key_id is None) != (secret_access_key is None):
            raise ValueError("an access key id and its secret go together (or neither: the "
                             "AWS credential chain)")
        self.access_key_id = access_key_id
        client: ClientConfig = {
            "connect_timeout": CONNECT_TIMEOUT, "timeout": REQUEST_TIMEOUT,
            "allow_http": bool(self.endpoint and self.endpoint.startswith("http://")),
        }
        retry: RetryConfig = {"max_retries": RETRIES, "retry_timeout": RETRY_WINDOW}
        config: dict[str, Any] = {"region": region,
                                  "virtual_hosted_style_request": not self.path_style}
        if self.endpoint is not None:
            config["endpoint"] = (self.endpoint if self.path_style
                                  else _bucket_host(self.endpoint, bucket))
        if access_key_id is not None:
            config["access_key_id"] = access_key_id
            config["secret_access_key"] = secret_access_key
        try:
            self._store: S3Store | None = S3Store(
                bucket, client_options=client, retry_config=retry, **config)
        except (ObstoreError, ValueError) as exc:
            raise BlobStoreUnavailable(
                f"the object store at {self.where} cannot be configured: "
                f"{_first_line(exc)}") from None

    @property
    def where(self) -> str:
        """The endpoint as an operator reads it in messages (AWS's, for no endpoint)."""
        return self.endpoint or f"https://s3.{self.region}.amazonaws.com"

    async def put(self, key: str, data: bytes) -> None:
        try:
            await obstore.put_async(self._s3, key, data)
        except (ObstoreError, OSError) as exc:
            self._fail("write", key, exc)

    async def put_file(self, key: str, path: Path) -> None:
        """From the file, in parts past 5 MiB (obstore reads it; never all in memory)."""
        try:
            await obstore.put_async(self._s3, key, path)
        except (ObstoreError, OSError) as exc:
            self._fail("write", key, exc)

    async def chunks(self, key: str) -> AsyncGenerator[bytes, None]:
        try:
            found = await obstore.get_async(self._s3, key)
        except (ObstoreError, OSError) as exc:
            if isinstance(exc, FileNotFoundError) and _code(str(exc)) in (None, "NoSuchKey"):
                raise BlobNotFound(f"no blob {key.partition('/')[2]}") from None
            self._fail("read", key, exc)
        try:
            async for piece in found.stream(min_chunk_size=CHUNK_BYTES):
                yield bytes(piece)
        except (ObstoreError, OSError) as exc:
            self._fail("read", key, exc)

    async def get(self, key: str) -> bytes:
        try:
            found = await obstore.get_async(self._s3, key)
            return bytes(await found.bytes_async())
        except (ObstoreError, OSError) as exc:
            if isinstance(exc, FileNotFoundError) and _code(str(exc)) in (None, "NoSuchKey"):
                raise BlobNotFound(f"no blob {key.partition('/')[2]}") from None
            self._fail("read", key, exc)

    async def delete(self, key: str) -> None:
        try:
            await obstore.delete_async(self._s3, key)
        except FileNotFoundError as exc:  # S3 answers 204 for a missing key; some 404
            if _code(str(exc)) not in (None, "NoSuchKey"):
                self._fail("delete", key, exc)
        except (ObstoreError, OSError) as exc:
            self._fail("delete", key, exc)

    async def keys(self, prefix: str) -> list[str]:
        # obstore matches prefixes by whole path segments: list the segments before the
        # last '/', then keep what starts with the whole prefix (as the directory store).
        folder = prefix.rpartition("/")[0] or None
        found: list[str] = []
        try:
            async for page in obstore.list(self._s3, folder, chunk_size=LIST_PAGE):
                found.extend(m["path"] for m in page if m["path"].startswith(prefix))
        except (ObstoreError, OSError) as exc:
            self._fail("listing", prefix, exc)
        return sorted(found)

    async def check(self) -> None:
        """A write of a probe object (the store answers, the bucket is there, the
        credentials are accepted and may write), then a listing and its delete.

        The write goes first: obstore 0.12's listing, failing to connect, leaves a task in
        its runtime that aborts the interpreter at exit (SIGABRT, status 134, measured), so
        an unreachable store would end the process with a core dump after its one line."""
        probe = f"tenantry-check/{uuid.uuid4().hex}"
        steps = (("write", lambda: obstore.put_async(self._s3, probe, b"")),
                 ("listing", lambda: obstore.list_with_delimiter_async(self._s3, probe)),
                 ("delete", lambda: obstore.delete_async(self._s3, probe)))
        for action, step in steps:
            try:
                await step()
            except (ObstoreError, OSError) as exc:
                self._fail(action, probe, exc)

    def describe(self) -> dict[str, Any]:
        return {"blob_store": "s3", "s3_endpoint": self.where, "s3_bucket": self.bucket,
                "s3_region": self.region, "s3_path_style": self.path_style,
                "s3_access_key_id": _short_key(self.access_key_id)}

    async def close(self) -> None:
        """Drop the store now, while the interpreter is whole. obstore's runtime is never
        shut down: a store dropped only at exit, after a failed connection, lets one of its
        threads touch a finalizing interpreter and abort the process (SIGABRT, status 134,
        measured; lancedb/lancedb#4175 is the same), after the one line a failed start
        prints. A failed call's exception and its frames form a cycle that holds the store
        too: collected here, not at exit."""
        self._store = None
        gc.collect()
        await asyncio.sleep(CLOSE_SETTLE_SECONDS)  # its threads let go of what they held

    @property
    def _s3(self) -> S3Store:
        if self._store is None:
            raise BlobStoreUnavailable(f"the object store at {self.where} was closed")
        return self._store

    def _fail(self, action: str, key: str, exc: BaseException) -> NoReturn:
        raise BlobStoreUnavailable(self._explain(action, key, str(exc))) from None

    def _explain(self, action: str, key: str, text: str) -> str:
        """One line for ``text`` (obstore's error, which ends in a debug dump)."""
        where, bucket = self.where, self.bucket
        status, code = _status(text), _code(text)
        what = f"a {action} of {key!r}" if key else f"the {action}"
        if status is None:
            if "HttpError" in text or "TimedOut" in text:
                return f"cannot reach the object store at {where}: {_reason(text)}"
            return f"the object store at {where} failed {what}: {_first_line(text)}"
        message = _MESSAGE.search(text)
        if code == "NoSuchBucket":
            return f"the bucket {bucket!r} does not exist at {where}"
        if code in _REFUSED_CREDENTIALS or status == 401:
            return (f"the object store at {where} refused the credentials (access key id "
                    f"{_short_key(self.access_key_id) or 'from the AWS credential chain'})")
        if code == "AuthorizationHeaderMalformed":  # AWS: most often the wrong region
            return (f"the object store at {where} refused requests signed for region "
                    f"{self.region!r}" + (f": {message.group(1)}" if message else ""))
        if status == 403:
            return (f"the object store at {where} denies access key id "
                    f"{_short_key(self.access_key_id) or 'from the AWS credential chain'} "
                    f"{_DENIED.get(action, action)} bucket {bucket!r} "
                    f"({code or 'AccessDenied'})")
        detail = f"{code}: {message.group(1)}" if code and message else code or ""
        return (f"the object store at {where} answered HTTP {status} to {what}"
                + (f" ({detail})" if detail else ""))


def _bucket_host(endpoint: str, bucket: str) -> str:
    """``https://host:port`` → ``https://bucket.host:port`` (obstore wants the bucket in a
    virtual-hosted endpoint). An address has no such name (and obstore panics on one)."""
    parts = urlsplit(endpoint)
    try:
        ipaddress.ip_address(parts.hostname or "")
    except ValueError:
        return parts._replace(netloc=f"{bucket}.{parts.netloc}").geturl()
    raise ValueError(f"a virtual-hosted bucket needs a host name, not the address "
                     f"{parts.hostname} (use path-style requests)")


def _status(text: str) -> int | None:
    found = _STATUS.search(text)
    return int(found.group(1) or found.group(2)) if found else None


def _code(text: str) -> str | None:
    found = _CODE.search(text)
    return found.group(1) if found else None


def _reason(text: str) -> str:
    """Why a request got no answer, in a few words."""
    if "kind: Timeout" in text or "TimedOut" in text or "timed out" in text:
        return "timed out"
    if "dns error" in text:
        custom = _CUSTOM.search(text)
        return f"cannot resolve the host ({custom.group(1)})" if custom else (
            "cannot resolve the host")
    os_message = _OS_MESSAGE.search(text)
    if os_message:
        return os_message.group(1).lower()
    if "kind: Connect" in text:
        return "cannot connect"
    return _first_line(text)


def _first_line(error: BaseException | str) -> str:
    line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return line[:200]


def _short_key(key_id: str | None) -> str | None:
    """An access key id as messages and logs show it: enough to tell which (``AKIA…WXYZ``)."""
    if key_id is None:
        return None
    return key_id if len(key_id) <= 8 else f"{key_id[:4]}…{key_id[-4:]}"
