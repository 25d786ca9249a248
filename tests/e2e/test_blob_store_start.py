"""A process whose object store is not right stops before it serves, with one line naming
what failed — never a traceback, never a worker that fails its first run: a bucket that is
not there, credentials the store refuses, an endpoint nobody answers. `tenantry worker`,
`tenantry api` and `tenantry retention run` as an operator starts them, on a real S3
engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import cli
from tests.support.db import login_dsn
from tests.support.object_store import SeaweedFS, _free_port

pytestmark = pytest.mark.e2e

COMMANDS = (("worker", "--processes", "1"), ("api", "--port", "0"), ("retention", "run"))


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
async def test_a_wrong_object_store_is_one_line_at_start(
    command: tuple[str, ...], database_dsn: str, s3_server: SeaweedFS, s3_bucket: str,
    tmp_path: Path,
) -> None:
    base = {"TENANTRY_DATA_DIR": str(tmp_path), "TENANTRY_DATABASE_URL":
            login_dsn(database_dsn), "TENANTRY_SANDBOX_BACKEND": "bwrap",
            "TENANTRY_SANDBOX_MIN_BOUNDARY": "bwrap"}
    wrong = {
        "no such bucket": ({"TENANTRY_S3_BUCKET": "no-such-bucket"},
                           "error: blob store: the bucket 'no-such-bucket' does not exist at "
                           f"{s3_server.endpoint}"),
        "a wrong secret": ({"TENANTRY_S3_SECRET_ACCESS_KEY": "not-the-secret"},
                           f"error: blob store: the object store at {s3_server.endpoint} "
                           "refused the credentials"),
        "nobody there": ({"TENANTRY_S3_ENDPOINT": f"http://127.0.0.1:{_free_port()}"},
                         "error: blob store: cannot reach the object store at"),
    }
    for what, (change, line) in wrong.items():
        env = {**base, **s3_server.env(s3_bucket), **change}
        code, out, err = await cli(*command, env=env)
        lines = err.strip().splitlines()
        assert code == 2, (what, code, err)
        assert len(lines) == 1 and lines[0].startswith(line), (what, err)
        assert "Traceback" not in err + out
        assert s3_server.secret_access_key not in err + out
