"""The session's real S3 engine, shared by every folder of tests that stores blobs
(tests/integration, tests/e2e, tests/chaos): one SeaweedFS per session, a fresh bucket per
test; and ``blob_store``, which runs a test once on each store the platform has (the
directory and S3). Registered as a plugin by tests/conftest.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tenantry.blobs import DirectoryObjects, ObjectStore
from tenantry.blobs.s3 import S3Objects
from tests.support.object_store import SeaweedFS, seaweedfs


@pytest.fixture(scope="session")
async def s3_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SeaweedFS]:
    """One real S3 engine for the session (SeaweedFS, up in about a second). A test may stop
    it and start it again (same ports, same objects); the next test finds it up anyway."""
    async with seaweedfs(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


@pytest.fixture
async def s3_bucket(s3_server: SeaweedFS) -> AsyncIterator[str]:
    """A new, empty bucket on the session's S3 engine, for this test only."""
    await s3_server.start()  # a no-op, unless a test before this one left it stopped
    bucket = await s3_server.create_bucket()
    yield bucket
    await s3_server.start()
    await s3_server.delete_bucket(bucket)


@pytest.fixture
async def s3_objects(s3_server: SeaweedFS, s3_bucket: str) -> AsyncIterator[S3Objects]:
    """The S3 object store on this test's bucket (path-style, over http, with the key)."""
    objects = S3Objects(bucket=s3_bucket, endpoint=s3_server.endpoint,
                        region=s3_server.region, access_key_id=s3_server.access_key_id,
                        secret_access_key=s3_server.secret_access_key)
    yield objects
    await objects.close()


@dataclass(frozen=True, slots=True)
class StoreUnderTest:
    """One object store, and the ``Settings`` fields that make a process open the same one
    (``serving_api(dsn, **store.settings)``)."""

    kind: str
    objects: ObjectStore
    settings: dict[str, Any]


@pytest.fixture(params=["directory", "s3"])
async def blob_store(request: pytest.FixtureRequest, tmp_path: Path,
                     s3_server: SeaweedFS) -> AsyncIterator[StoreUnderTest]:
    """The test runs once on each store: the data directory's, and a bucket of its own on
    the session's real S3 engine."""
    if request.param == "directory":
        yield StoreUnderTest("directory", DirectoryObjects(tmp_path / "blobs"),
                             {"data_dir": tmp_path})
        return
    await s3_server.start()
    bucket = await s3_server.create_bucket()
    objects = S3Objects(bucket=bucket, endpoint=s3_server.endpoint, region=s3_server.region,
                        access_key_id=s3_server.access_key_id,
                        secret_access_key=s3_server.secret_access_key)
    try:
        yield StoreUnderTest("s3", objects, {"data_dir": tmp_path,
                                             **s3_server.settings(bucket)})
    finally:
        await objects.close()
        await s3_server.start()
        await s3_server.delete_bucket(bucket)
