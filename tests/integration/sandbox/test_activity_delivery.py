"""How an attempt's code reaches its sandbox, on every backend: a pool warmed with the
attempt's own path (``activities.warmup``) hands out a sandbox whose work directory holds
nothing of the warm-up, and the attempt in it completes; a bundle too large for the
runner's spec line is written file by file and still arrives whole."""

from __future__ import annotations

import hashlib
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tenantry.activities import AttemptRequest, Bundle, run_attempt
from tenantry.activities.code.attempt import MAX_STDIN_BYTES
from tenantry.activities.code.warmup import warm_attempt_path
from tenantry.ids import TenantId
from tenantry.sandbox import probe as sandbox_probe
from tenantry.sandbox.pool import PooledDriver
from tests.support.sandbox import BACKENDS, TEST_LIMITS, require, sandbox_settings

pytestmark = pytest.mark.timeout(600)

TENANT = TenantId("tenant-delivery")

#: What the step finds around it when it starts: its work directory (top level), /tmp.
LOOK = """
    import os
    def handle(value, context):
        return {"work": sorted(os.listdir(".")), "tmp": sorted(os.listdir("/tmp")),
                "bundle": sorted(os.listdir("bundle")), "value": value}
"""


def request(backend: str, bundle: Bundle, value: object = None) -> AttemptRequest:
    return AttemptRequest(tenant=TENANT, task_id="tsk_d", attempt=1, activity="look",
                          version=1, bundle=bundle, input=value, timeout_s=15.0,
                          limits=TEST_LIMITS[backend])


@pytest.fixture(params=BACKENDS)
async def warmed(request: pytest.FixtureRequest, tmp_path: Path
                 ) -> AsyncIterator[PooledDriver]:
    name: str = request.param
    require(name)
    if name == "microvm":
        request.getfixturevalue("guest_image")
    pooled = PooledDriver(sandbox_probe.build_backend(name, sandbox_settings(tmp_path, name)),
                          pool_size=1, limits=TEST_LIMITS[name], warm_up=warm_attempt_path)
    pooled.start()
    try:
        yield pooled
    finally:
        await pooled.close()


async def test_a_pool_warmed_for_attempts_hands_out_a_clean_sandbox(
    warmed: PooledDriver,
) -> None:
    await warmed.pool.wait_full(600)
    assert warmed.pool.stats.launch_failures == 0  # the warm-up ran and cleaned up
    bundle = Bundle({"main.py": textwrap.dedent(LOOK).encode()}, "main.py:handle")
    outcome = await run_attempt(warmed, request(warmed.backend, bundle, {"n": 7}),
                                heartbeat=None)
    assert outcome.status == "completed", outcome
    assert warmed.pool.stats.warm == 1  # the attempt took the warmed sandbox
    assert outcome.result["work"] == ["bundle", "input.json"]
    assert outcome.result["tmp"] == []
    assert "main.py" in outcome.result["bundle"]
    assert outcome.result["value"] == {"n": 7}


async def test_a_bundle_too_large_for_the_spec_line_is_written_file_by_file(
    driver: PooledDriver,
) -> None:
    blob = bytes(range(256)) * (MAX_STDIN_BYTES // 256 + 16)  # over the line by itself
    code = """
        import hashlib
        def handle(value, context):
            with open("bundle/data.bin", "rb") as f:
                return {"sha": hashlib.sha256(f.read()).hexdigest(), "value": value}
    """
    bundle = Bundle({"main.py": textwrap.dedent(code).encode(), "data.bin": blob},
                    "main.py:handle")
    outcome = await run_attempt(driver, request(driver.backend, bundle, [1, 2]),
                                heartbeat=None)
    assert outcome.status == "completed", outcome
    assert outcome.result == {"sha": hashlib.sha256(blob).hexdigest(), "value": [1, 2]}
