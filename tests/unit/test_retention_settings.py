"""The retention settings a worker's cleaner runs with (TENANTRY_RETENTION*)."""

from __future__ import annotations

import pytest

from tenantry.bootstrap.worker import cleanup_settings
from tenantry.config import Settings
from tenantry.errors import ConfigurationError


def test_retention_settings_from_env() -> None:
    defaults = Settings.from_env({})
    assert (defaults.retention, defaults.retention_batch,
            defaults.retention_every_seconds) == (True, 500, 60)
    s = Settings.from_env({"TENANTRY_RETENTION": "OFF", "TENANTRY_RETENTION_BATCH": "10000",
                           "TENANTRY_RETENTION_EVERY_SECONDS": "1"})
    assert (s.retention, s.retention_batch, s.retention_every_seconds) == (False, 10000, 1)
    assert Settings.from_env({"TENANTRY_RETENTION": "on"}).retention is True
    # What the worker's cleaner gets: a due tenant is looked for at least that often.
    cleanup = cleanup_settings(s)
    assert (cleanup.batch, cleanup.every_seconds, cleanup.poll_seconds) == (10000, 1.0, 1.0)
    assert cleanup_settings(defaults).poll_seconds == 5.0


@pytest.mark.parametrize(("env", "said"), [
    ({"TENANTRY_RETENTION_BATCH": "0"}, "TENANTRY_RETENTION_BATCH must be at least 1, got 0"),
    ({"TENANTRY_RETENTION_BATCH": "10001"},
     "TENANTRY_RETENTION_BATCH must be 1..10000, got 10001"),
    ({"TENANTRY_RETENTION_BATCH": "lots"}, "TENANTRY_RETENTION_BATCH must be an integer"),
    ({"TENANTRY_RETENTION_EVERY_SECONDS": "0"},
     "TENANTRY_RETENTION_EVERY_SECONDS must be at least 1, got 0"),
    ({"TENANTRY_RETENTION": "maybe"}, "TENANTRY_RETENTION must be on or off, got 'maybe'"),
])
def test_bad_retention_settings_are_one_line_errors(env: dict[str, str], said: str) -> None:
    with pytest.raises(ConfigurationError, match=said):
        Settings.from_env(env)


def test_overrides_are_validated_too() -> None:
    with pytest.raises(ConfigurationError, match="TENANTRY_RETENTION_EVERY_SECONDS"):
        Settings.from_env({}, retention_every_seconds=0)
