"""The object stores blobs live in, on real storage: the S3 store on a real SeaweedFS (a
bucket of its own per test) and the directory store, through one body each where both must
behave alike — bytes back as written, a tenant's listing holding only its own keys, a
missing key an error a caller can branch on. Then what only S3 has: a bucket that is not
there, credentials refused, an endpoint nobody answers, a server that stops mid-way and
comes back — each one line an operator can act on, returned promptly, never a hang."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import pytest

from tenantry.blobs import (
    BlobNotFound,
    BlobStoreUnavailable,
    DirectoryObjects,
    ObjectStore,
    object_key,
    open_objects,
)
from tenantry.blobs.s3 import S3Objects
from tenantry.config import Settings
from tenantry.ids import TenantId
from tests.support.object_store import READ_ONLY_KEY_ID, READ_ONLY_SECRET, SeaweedFS


@pytest.fixture(params=["directory", "s3"])
def objects(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "s3":
        s3: S3Objects = request.getfixturevalue("s3_objects")
        return s3
    return DirectoryObjects(tmp_path / "blobs")


def s3_store(server: SeaweedFS, bucket: str, *, endpoint: str | None = None,
             access_key_id: str | None = None, secret_access_key: str | None = None
             ) -> S3Objects:
    """An S3 store on ``server``'s bucket as configuration would give it, or with another
    endpoint or credentials."""
    return S3Objects(bucket=bucket, endpoint=endpoint or server.endpoint, region=server.region,
                     access_key_id=access_key_id or server.access_key_id,
                     secret_access_key=secret_access_key or server.secret_access_key)


async def refusal(action: Awaitable[object]) -> str:
    """The one line a failed call gives (checked: one line, no debug dump, retryable)."""
    with pytest.raises(BlobStoreUnavailable) as failed:
        await action
    line = failed.value.detail
    assert "\n" not in line and "Debug" not in line and "Traceback" not in line
    assert failed.value.retryable and failed.value.status == 503
    return line


# -- both stores ------------------------------------------------------------------------------


async def test_bytes_come_back_as_written_and_leave_when_deleted(objects: ObjectStore) -> None:
    tenant = TenantId.new()
    first, second = object_key(tenant, "out.0123abcd"), object_key(tenant, "shot.4567ef01")
    await objects.put(first, b"first version")
    await objects.put(first, b"\x00\xffbinary, replaced whole")  # a retried write replaces
    await objects.put(second, b"")
    assert await objects.get(first) == b"\x00\xffbinary, replaced whole"
    assert await objects.get(second) == b""
    assert await objects.keys(f"{tenant.value}/") == sorted([first, second])

    await objects.delete(first)
    with pytest.raises(BlobNotFound):
        await objects.get(first)
    assert await objects.keys(f"{tenant.value}/") == [second]
    await objects.delete(first)  # deleting what is gone is no error
    await objects.delete(object_key(tenant, "never-written.00"))


@pytest.mark.parametrize("mib", [5, 11], ids=["5MiB", "11MiB-in-parts"])
async def test_a_big_object_comes_back_whole(objects: ObjectStore, mib: int) -> None:
    # 11 MiB goes up to S3 in three parts (obstore's parts are 5 MiB).
    key = object_key(TenantId.new(), f"sandbox-files.{mib:02d}")
    data = os.urandom(1 << 20) * mib + b"tail"
    await objects.put(key, data)
    assert await objects.get(key) == data


async def test_reading_a_missing_key_says_no_such_blob(objects: ObjectStore) -> None:
    tenant = TenantId.new()
    await objects.put(object_key(tenant, "there.01"), b"x")
    with pytest.raises(BlobNotFound) as missing:
        await objects.get(object_key(tenant, "not-there.02"))
    assert missing.value.detail == "no blob not-there.02"
    assert missing.value.status == 404


async def test_a_tenants_listing_holds_none_of_another_tenants_keys(
    objects: ObjectStore,
) -> None:
    tenant = TenantId.new()
    # Another tenant whose id starts with this one's: a prefix match by string alone would
    # hand this tenant the other's blobs.
    neighbour = TenantId(tenant.value + "x")
    mine = object_key(tenant, "mine.01")
    theirs = object_key(neighbour, "theirs.02")
    await objects.put(mine, b"mine")
    await objects.put(theirs, b"theirs")
    assert await objects.keys(f"{tenant.value}/") == [mine]
    assert await objects.keys(f"{neighbour.value}/") == [theirs]
    assert await objects.keys(f"{tenant.value}/mi") == [mine]
    assert await objects.keys(f"{tenant.value}/th") == []


async def test_a_working_store_passes_its_start_up_check(objects: ObjectStore) -> None:
    await objects.check()
    assert await objects.keys("") == []  # the check leaves nothing behind


# -- S3 only ----------------------------------------------------------------------------------


async def test_a_listing_past_one_page_is_complete(s3_objects: S3Objects) -> None:
    tenant = TenantId.new()
    keys = [object_key(tenant, f"out.{i:04d}") for i in range(1005)]
    await asyncio.gather(*(s3_objects.put(k, b"") for k in keys[:500]))
    await asyncio.gather(*(s3_objects.put(k, b"") for k in keys[500:]))
    assert await s3_objects.keys(f"{tenant.value}/") == keys


async def test_the_configured_store_is_the_s3_bucket(s3_server: SeaweedFS, s3_bucket: str,
                                                     tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, **s3_server.settings(s3_bucket))
    settings.validate()
    objects = open_objects(settings)
    assert isinstance(objects, S3Objects)
    await objects.check()
    key = object_key(TenantId.new(), "via-settings.01")
    await objects.put(key, b"shared by every host")
    # Another process's store on the same bucket (another host of the cell) sees it.
    assert await s3_store(s3_server, s3_bucket).get(key) == b"shared by every host"
    assert not (tmp_path / "blobs").exists()
    described = objects.describe()
    assert described == {"blob_store": "s3", "s3_endpoint": s3_server.endpoint,
                         "s3_bucket": s3_bucket, "s3_region": "us-east-1",
                         "s3_path_style": True, "s3_access_key_id": "AKIA…0001"}
    assert s3_server.secret_access_key not in repr(described) + repr(settings)


async def test_start_up_check_names_a_missing_bucket(s3_server: SeaweedFS) -> None:
    objects = s3_store(s3_server, "no-such-bucket")
    assert await refusal(objects.check()) == (
        f"the bucket 'no-such-bucket' does not exist at {s3_server.endpoint}")
    # Nor does a write create it.
    assert await refusal(objects.put(object_key(TenantId.new(), "x.01"), b"x")) == (
        f"the bucket 'no-such-bucket' does not exist at {s3_server.endpoint}")


@pytest.mark.parametrize("wrong", ["secret_access_key", "access_key_id"])
async def test_start_up_check_names_refused_credentials(
    s3_server: SeaweedFS, s3_bucket: str, wrong: str,
) -> None:
    objects = (s3_store(s3_server, s3_bucket, access_key_id="AKIAWRONGWRONGWRONG9")
               if wrong == "access_key_id" else
               s3_store(s3_server, s3_bucket, secret_access_key="AKIAWRONGWRONGWRONG9"))
    shown = "AKIA…ONG9" if wrong == "access_key_id" else "AKIA…0001"
    line = await refusal(objects.check())
    assert line == (f"the object store at {s3_server.endpoint} refused the credentials "
                    f"(access key id {shown})")
    assert s3_server.secret_access_key not in line


async def test_start_up_check_names_a_key_that_may_not_write(
    s3_server: SeaweedFS, s3_bucket: str,
) -> None:
    reader = s3_store(s3_server, s3_bucket, access_key_id=READ_ONLY_KEY_ID,
                      secret_access_key=READ_ONLY_SECRET)
    assert await reader.keys("") == []  # it may list
    assert await refusal(reader.check()) == (
        f"the object store at {s3_server.endpoint} denies access key id AKIA…0002 writes to "
        f"bucket {s3_bucket!r} (AccessDenied)")


async def test_start_up_check_names_an_endpoint_nobody_answers(s3_bucket: str,
                                                               s3_server: SeaweedFS) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        closed = f"http://127.0.0.1:{held.getsockname()[1]}"
        line = await refusal(s3_store(s3_server, s3_bucket, endpoint=closed).check())
    assert line == f"cannot reach the object store at {closed}: connection refused"


@pytest.mark.timeout(90)
async def test_a_stopped_server_is_unavailable_at_once_and_everything_is_back_after(
    s3_server: SeaweedFS, s3_objects: S3Objects,
) -> None:
    tenant = TenantId.new()
    kept = object_key(tenant, "kept.01")
    await s3_objects.put(kept, b"written before the outage")
    await s3_server.stop(kill=True)
    try:
        unreachable = f"cannot reach the object store at {s3_server.endpoint}: "
        for action in (s3_objects.get(kept), s3_objects.put(object_key(tenant, "new.02"), b"n"),
                       s3_objects.delete(kept), s3_objects.keys(f"{tenant.value}/"),
                       s3_objects.check()):
            assert (await refusal(action)).startswith(unreachable)
    finally:
        await s3_server.start()
    assert await s3_objects.get(kept) == b"written before the outage"
    assert await s3_objects.keys(f"{tenant.value}/") == [kept]


class _Answering:
    """A loopback HTTP server that answers every request with one fixed response."""

    def __init__(self, response: bytes) -> None:
        self.response = response
        self.requests = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                self.requests += 1
                writer.write(self.response)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def overloaded() -> AsyncIterator[tuple[str, _Answering]]:
    body = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>"
            b"<Message>Please reduce your request rate.</Message></Error>")
    answering = _Answering(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml"
                           b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    server = await asyncio.start_server(answering.serve, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", answering


async def test_a_server_error_is_unavailable_after_the_librarys_retries(
    overloaded: tuple[str, _Answering], s3_server: SeaweedFS,
) -> None:
    endpoint, answering = overloaded
    objects = s3_store(s3_server, "any-bucket", endpoint=endpoint)
    line = await refusal(objects.get(object_key(TenantId.new(), "out.01")))
    assert line.startswith(f"the object store at {endpoint} answered HTTP 503 to a read of ")
    assert line.endswith("(SlowDown: Please reduce your request rate.)")
    assert answering.requests == 3  # the request and the library's two retries


def test_path_style_off_needs_a_host_name(s3_server: SeaweedFS) -> None:
    with pytest.raises(ValueError, match=r"needs a host name, not the address 127\.0\.0\.1"):
        S3Objects(bucket="b-1", endpoint=s3_server.endpoint, path_style=False)
