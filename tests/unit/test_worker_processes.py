"""What `tenantry worker --processes N` decides without starting anything: how many
processes, what a child is told (every setting, exactly), how long a restart waits."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from tenantry.bootstrap.supervisor import (
    MAX_BACKOFF_SECONDS,
    backoff_seconds,
    decode_settings,
    encode_settings,
)
from tenantry.config import Settings
from tenantry.errors import ConfigurationError


def test_a_child_gets_every_setting_exactly() -> None:
    # Every field away from its default, paths and unset optionals included: a setting
    # added later and lost on the way to the children fails here.
    settings = Settings(
        database_url="postgresql://w@db:5432/t", data_dir=Path("/srv/tenantry"),
        sandbox_image_dir=Path("/srv/images"), operator_token="op_x", master_key=None,
        worker_concurrency=7, worker_processes=1, worker_metrics_port=9101,
        lease_seconds=12.5, retention=False, webhook_allow_private=True,
        refuse_batch_runs_at=None, delay_new_runs_at=30, max_queued_runs=40,
        model_base_url="http://m/v1", claim_order="fifo", model_no_stream=("configured",))
    decoded = decode_settings(encode_settings(settings))
    assert decoded == settings
    assert isinstance(decoded.data_dir, Path) and isinstance(decoded.sandbox_image_dir, Path)
    assert set(orjson.loads(encode_settings(settings))) == {
        f.name for f in dataclasses.fields(Settings)}


def test_settings_a_child_would_refuse_are_refused_when_decoded() -> None:
    bad = encode_settings(Settings()).replace(b'"claim_order":"fair"', b'"claim_order":"x"')
    with pytest.raises(ConfigurationError):
        decode_settings(bad)


def test_processes_default_to_the_cpus_and_take_the_environment() -> None:
    assert Settings.from_env({}).processes >= 1
    assert Settings.from_env({"TENANTRY_WORKER_PROCESSES": "3"}).processes == 3
    with pytest.raises(ConfigurationError, match="TENANTRY_WORKER_PROCESSES"):
        Settings.from_env({"TENANTRY_WORKER_PROCESSES": "0"})


def test_restarts_wait_longer_after_each_quick_exit_up_to_a_ceiling() -> None:
    waits = [backoff_seconds(n) for n in range(1, 10)]
    assert waits[:4] == [0.5, 1.0, 2.0, 4.0]
    assert waits == sorted(waits) and waits[-1] == MAX_BACKOFF_SECONDS
    assert backoff_seconds(0) == 0.5  # after a long life: the shortest wait
