from __future__ import annotations

from pathlib import Path

import pytest

from tenantry.config import Settings
from tenantry.db.migrate import available
from tenantry.db.queries import load, parse
from tenantry.errors import ConfigurationError


def test_named_blocks_are_split_and_trimmed() -> None:
    blocks = parse("-- preamble\n-- name: one\nSELECT 1;\n\n-- name: two\n-- a comment\nSELECT 2\n")
    assert blocks == {"one": "SELECT 1", "two": "-- a comment\nSELECT 2"}
    with pytest.raises(ValueError, match="twice"):
        parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2")
    with pytest.raises(ValueError, match="empty"):
        parse("-- name: a\n\n-- name: b\nSELECT 1")


@pytest.mark.parametrize("package", ["tenantry.tenants", "tenantry.agents", "tenantry.runs"])
def test_every_feature_query_file_loads(package: str) -> None:
    queries = load(package)
    assert queries.names()
    with pytest.raises(AttributeError):
        _ = queries.no_such_query


def test_migrations_are_numbered_without_gaps() -> None:
    versions = [m.version for m in available()]
    assert versions == list(range(1, len(versions) + 1))


def test_settings_from_env() -> None:
    s = Settings.from_env({"TENANTRY_PORT": "9000", "TENANTRY_DATA_DIR": "/tmp/x",
                           "TENANTRY_DATABASE_URL": "postgresql://h/db"})
    assert (s.port, s.data_dir, s.database_url) == (9000, Path("/tmp/x"), "postgresql://h/db")
    assert Settings.from_env({}).database_url is None
    with pytest.raises(ConfigurationError, match="TENANTRY_PORT"):
        Settings.from_env({"TENANTRY_PORT": "eighty"})
    with pytest.raises(ConfigurationError, match="SANDBOX"):
        Settings.from_env({"TENANTRY_SANDBOX_BACKEND": "docker"})
    assert Settings.from_env({"TENANTRY_PORT": "9000"}, port=1234).port == 1234


def test_webhook_limits_from_env() -> None:
    s = Settings.from_env({"TENANTRY_WEBHOOK_DEADLINE_SECONDS": "5",
                           "TENANTRY_WEBHOOK_CONCURRENCY": "8",
                           "TENANTRY_WEBHOOK_CONCURRENCY_PER_TENANT": "2"})
    assert (s.webhook_deadline_seconds, s.webhook_concurrency,
            s.webhook_concurrency_per_tenant) == (5, 8, 2)
    with pytest.raises(ConfigurationError, match="TENANTRY_WEBHOOK_CONCURRENCY_PER_TENANT"):
        Settings.from_env({"TENANTRY_WEBHOOK_CONCURRENCY": "2",
                           "TENANTRY_WEBHOOK_CONCURRENCY_PER_TENANT": "3"})
    with pytest.raises(ConfigurationError, match="TENANTRY_WEBHOOK_DEADLINE_SECONDS"):
        Settings.from_env({"TENANTRY_WEBHOOK_DEADLINE_SECONDS": "0"})
