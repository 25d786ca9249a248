"""The session's real S3 engine, shared by every folder of tests that stores blobs
(tests/integration, tests/e2e, tests/chaos): one SeaweedFS per session, a fresh bucket per
test. Registered as a plugin by tests/conftest.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tenantry.blobs import S3Objects
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
