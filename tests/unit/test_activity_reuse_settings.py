"""Batch and warm settings of an activity version (ADR 0014): bad values are refused with
the field named, the default reuses nothing, and a reuse key names tenant and version."""

from __future__ import annotations

import math

import pytest

from tenantry.activities.code import warm
from tenantry.activities.code.versions import ActivitySettings, BatchSettings, WarmSettings
from tenantry.errors import ValidationFailed
from tenantry.ids import AgentId, TenantId


def test_the_default_is_a_fresh_sandbox_per_attempt() -> None:
    settings = ActivitySettings()
    assert settings.batch is None and settings.warm is None
    assert not settings.reuses_sandboxes
    assert ActivitySettings(batch=BatchSettings(2, 1.0)).reuses_sandboxes
    assert ActivitySettings(warm=WarmSettings(1.0)).reuses_sandboxes


@pytest.mark.parametrize(("make", "field"), [
    (lambda: BatchSettings(0, 10.0), "batch.max_tasks"),
    (lambda: BatchSettings(1001, 10.0), "batch.max_tasks"),
    (lambda: BatchSettings(True, 10.0), "batch.max_tasks"),
    (lambda: BatchSettings(5, 0.0), "batch.max_seconds"),
    (lambda: BatchSettings(5, math.inf), "batch.max_seconds"),
    (lambda: BatchSettings(5, 86401.0), "batch.max_seconds"),
    (lambda: WarmSettings(0.0), "warm.idle_seconds"),
    (lambda: WarmSettings(-1.0), "warm.idle_seconds"),
    (lambda: WarmSettings(math.nan), "warm.idle_seconds"),
    (lambda: WarmSettings(3601.0), "warm.idle_seconds"),
    (lambda: ActivitySettings(batch=(5, 10.0)), "batch"),  # type: ignore[arg-type]
    (lambda: ActivitySettings(warm=60.0), "warm"),  # type: ignore[arg-type]
])
def test_bad_values_are_refused_naming_the_field(make: object, field: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        make()  # type: ignore[operator]
    assert caught.value.extra.get("field") == field


def test_a_reuse_key_is_the_tenant_and_the_version() -> None:
    agent = AgentId.new()
    acme, globex = TenantId.parse("tenant-acme"), TenantId.parse("tenant-globex")
    key = warm.reuse_key(acme, agent, 3)
    assert key == ("tenant-acme", str(agent), 3)
    assert key != warm.reuse_key(globex, agent, 3) != warm.reuse_key(acme, agent, 4)
    assert warm.serves(key) == f"{agent}@3"
