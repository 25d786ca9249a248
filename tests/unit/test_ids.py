from __future__ import annotations

import time

import pytest

from tenantry.ids import AgentId, RunId, TenantId, uuid7


def test_prefixed_ids_round_trip_and_reject_other_prefixes() -> None:
    run = RunId.new()
    assert RunId.parse(str(run)) == run
    assert str(run).startswith("run_") and len(str(run)) == 36
    with pytest.raises(ValueError, match="run id"):
        RunId.parse(str(AgentId.new()))
    for bad in ("", "run_", "run_xyz", "run-" + "0" * 32, "RUN_" + "0" * 32, "run_" + "0" * 33):
        with pytest.raises(ValueError, match="run id must look like"):
            RunId.parse(bad)


def test_uuid7_is_time_ordered_and_versioned() -> None:
    first = uuid7()
    time.sleep(0.002)
    second = uuid7()
    assert first.version == 7 and second.version == 7
    assert first < second


def test_tenant_ids_are_slugs() -> None:
    assert TenantId.parse("tenant-acme").value == "tenant-acme"
    assert TenantId.new().value.startswith("ten_")
    for bad in ("ab", "Acme", "-acme", "a" * 65, "acme corp", "acme/1"):
        with pytest.raises(ValueError, match="tenant id must be"):
            TenantId.parse(bad)
