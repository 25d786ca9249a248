from __future__ import annotations

from pathlib import Path

import pytest

from tenantry.config import Settings
from tenantry.db.queries import load, parse
from tenantry.db.schema_files import available
from tenantry.errors import ConfigurationError
from tenantry.sandbox.probe import default_limits


def test_named_blocks_are_split_and_trimmed() -> None:
    blocks = parse("-- preamble\n-- name: one\nSELECT 1;\n\n-- name: two\n-- a comment\nSELECT 2\n")
    assert blocks == {"one": "SELECT 1", "two": "-- a comment\nSELECT 2"}
    with pytest.raises(ValueError, match="twice"):
        parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2")
    with pytest.raises(ValueError, match="empty"):
        parse("-- name: a\n\n-- name: b\nSELECT 1")


@pytest.mark.parametrize("package", ["tenantry.tenants", "tenantry.agents", "tenantry.runs",
                                     "tenantry.billing"])
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
    assert Settings.from_env({}).egress_flag_threshold == 20
    assert Settings.from_env({"TENANTRY_EGRESS_FLAG_THRESHOLD": "5"}).egress_flag_threshold == 5
    with pytest.raises(ConfigurationError, match="TENANTRY_EGRESS_FLAG_THRESHOLD must be at "
                                                 "least 1"):
        Settings.from_env({"TENANTRY_EGRESS_FLAG_THRESHOLD": "0"})
    assert Settings.from_env({"TENANTRY_PORT": "9000"}, port=1234).port == 1234


def test_isolation_settings_from_env() -> None:
    defaults = Settings.from_env({})
    assert (defaults.sandbox_min_boundary, defaults.sandbox_kept_max,
            defaults.sandbox_kept_per_tenant, defaults.blob_quota_mib) == ("gvisor", 32, 8, 1024)
    s = Settings.from_env({"TENANTRY_SANDBOX_MIN_BOUNDARY": "microvm",
                           "TENANTRY_SANDBOX_KEPT_MAX": "4",
                           "TENANTRY_SANDBOX_KEPT_PER_TENANT": "1",
                           "TENANTRY_BLOB_QUOTA_MIB": "0"})
    assert (s.sandbox_min_boundary, s.sandbox_kept_max, s.sandbox_kept_per_tenant,
            s.blob_quota_mib) == ("microvm", 4, 1, 0)
    with pytest.raises(ConfigurationError, match="TENANTRY_SANDBOX_MIN_BOUNDARY must be "
                                                 "microvm, gvisor or bwrap, got 'none'"):
        Settings.from_env({"TENANTRY_SANDBOX_MIN_BOUNDARY": "none"})
    with pytest.raises(ConfigurationError, match="TENANTRY_BLOB_QUOTA_MIB must be at least 0"):
        Settings.from_env({"TENANTRY_BLOB_QUOTA_MIB": "-1"})


def test_sandbox_work_size_setting() -> None:
    assert Settings.from_env({}).sandbox_work_mib == 256
    assert Settings.from_env({"TENANTRY_SANDBOX_WORK_MIB": "64"}).sandbox_work_mib == 64
    # ... and it is what every sandbox the worker makes gets (its /work, its disk).
    assert default_limits(Settings.from_env({"TENANTRY_SANDBOX_WORK_MIB": "64"})).disk_mib == 64
    with pytest.raises(ConfigurationError, match="TENANTRY_SANDBOX_WORK_MIB must be at least 8"):
        Settings.from_env({"TENANTRY_SANDBOX_WORK_MIB": "1"})


def test_browser_sandbox_memory_setting() -> None:
    assert Settings.from_env({}).sandbox_browser_memory_mib == 1536
    assert Settings.from_env({"TENANTRY_SANDBOX_BROWSER_MEMORY_MIB": "2048"}
                             ).sandbox_browser_memory_mib == 2048
    # Below it the browser image's microVM does not boot (its initramfs fills the RAM).
    with pytest.raises(ConfigurationError,
                       match="TENANTRY_SANDBOX_BROWSER_MEMORY_MIB must be at least 1024"):
        Settings.from_env({"TENANTRY_SANDBOX_BROWSER_MEMORY_MIB": "768"})
    with pytest.raises(ConfigurationError,
                       match="TENANTRY_SANDBOX_BROWSER_MEMORY_MIB must be at least 1024"):
        Settings(sandbox_browser_memory_mib=512).validate()


def test_stream_caps_and_the_secure_cookie_setting_from_env() -> None:
    s = Settings.from_env({"TENANTRY_SSE_MAX_STREAMS": "50",
                           "TENANTRY_SSE_MAX_STREAMS_PER_TENANT": "5",
                           "TENANTRY_CONSOLE_SECURE_COOKIE": "TRUE"})
    assert (s.sse_max_streams, s.sse_max_streams_per_tenant) == (50, 5)
    assert s.console_secure_cookie == "true"
    defaults = Settings.from_env({})
    assert (defaults.sse_max_streams, defaults.sse_max_streams_per_tenant) == (1000, 100)
    assert defaults.console_secure_cookie == "auto"
    for env, said in (({"TENANTRY_SSE_MAX_STREAMS": "0"}, "at least 1"),
                      ({"TENANTRY_SSE_MAX_STREAMS_PER_TENANT": "many"}, "integer"),
                      ({"TENANTRY_CONSOLE_SECURE_COOKIE": "sometimes"}, "auto, true or false")):
        with pytest.raises(ConfigurationError, match=said):
            Settings.from_env(env)


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


def test_scheduled_reconciliation_settings_from_env() -> None:
    settings = Settings.from_env({
        "TENANTRY_RECONCILE_ADMIN_KEYS": "bill-oa=sk-admin-1, bill-an=sk-ant=admin",
        "TENANTRY_OPERATOR_WEBHOOK_URL": "http://10.0.0.5:9000/hook"})
    assert settings.admin_keys == {"bill-oa": "sk-admin-1", "bill-an": "sk-ant=admin"}
    assert "sk-admin-1" not in repr(settings)
    for url in ("ftp://ops.example.com/", "https://", "not a url", "http://h:99999/"):
        with pytest.raises(ConfigurationError, match="TENANTRY_OPERATOR_WEBHOOK_URL"):
            Settings.from_env({"TENANTRY_OPERATOR_WEBHOOK_URL": url})
    # Refused without the key in the message.
    for keys, secret in (("sk-admin-no-account", "sk-admin-no-account"),
                         ("Bad Name=sk-admin-2", "sk-admin-2"), ("bill-oa=", "bill-oa=")):
        with pytest.raises(ConfigurationError, match="account=key") as refused:
            Settings.from_env({"TENANTRY_RECONCILE_ADMIN_KEYS": keys})
        assert secret not in str(refused.value)
