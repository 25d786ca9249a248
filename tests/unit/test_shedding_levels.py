"""The levels of shedding (ADR 0008): thresholds derived from TENANTRY_MAX_QUEUED_RUNS, kept
in order with any level an operator sets, and what each level refuses."""

from __future__ import annotations

import pytest

from tenantry.config import Settings
from tenantry.errors import ConfigurationError
from tenantry.scheduler.shedding import ShedLevel, ShedThresholds


def test_unset_levels_derive_from_the_cells_limit() -> None:
    assert ShedThresholds.of(Settings()) == ShedThresholds(50_000, 80_000, 100_000)
    assert ShedThresholds.derive(2) == ShedThresholds(1, 1, 2)
    assert ShedThresholds.derive(1) == ShedThresholds(1, 1, 1)
    # A level that is given moves the derived ones so the order holds.
    assert ShedThresholds.derive(100, delay_new_at=90) == ShedThresholds(90, 90, 100)
    assert ShedThresholds.derive(100, refuse_batch_at=10) == ShedThresholds(10, 10, 100)


def test_each_level_starts_at_its_threshold() -> None:
    t = ShedThresholds(2, 4, 6)
    assert [t.level(d) for d in range(7)] == [
        ShedLevel.NORMAL, ShedLevel.NORMAL, ShedLevel.DELAY_NEW, ShedLevel.DELAY_NEW,
        ShedLevel.REFUSE_BATCH, ShedLevel.REFUSE_BATCH, ShedLevel.REFUSE_ALL]


def test_what_each_level_refuses() -> None:
    refused = {level: [p for p in ("interactive", "batch") if level.refuses(p)]
               for level in ShedLevel}
    assert refused == {ShedLevel.NORMAL: [], ShedLevel.DELAY_NEW: [],
                       ShedLevel.REFUSE_BATCH: ["batch"],
                       ShedLevel.REFUSE_ALL: ["interactive", "batch"]}
    assert [level.in_flight_first for level in ShedLevel] == [False, True, True, True]
    assert ShedLevel.REFUSE_BATCH.shed_priorities == ("batch",)


def test_levels_come_from_the_environment_and_out_of_order_ones_are_refused() -> None:
    settings = Settings.from_env({"TENANTRY_MAX_QUEUED_RUNS": "1000",
                                  "TENANTRY_REFUSE_BATCH_RUNS_AT": "900",
                                  "TENANTRY_DELAY_NEW_RUNS_AT": "100",
                                  "TENANTRY_LOAD_READ_SECONDS": "0"})
    assert ShedThresholds.of(settings) == ShedThresholds(100, 900, 1000)
    assert settings.load_read_seconds == 0
    with pytest.raises(ConfigurationError, match=r"TENANTRY_REFUSE_BATCH_RUNS_AT .* must not "
                                                  r"exceed TENANTRY_MAX_QUEUED_RUNS"):
        Settings.from_env({"TENANTRY_MAX_QUEUED_RUNS": "10",
                           "TENANTRY_REFUSE_BATCH_RUNS_AT": "20"})
    with pytest.raises(ConfigurationError, match="TENANTRY_DELAY_NEW_RUNS_AT"):
        Settings.from_env({}, max_queued_runs=10, delay_new_runs_at=11)  # the flags
    with pytest.raises(ConfigurationError, match="at least 1"):
        Settings.from_env({}, refuse_batch_runs_at=0)
    with pytest.raises(ConfigurationError, match="TENANTRY_DELAY_NEW_RUNS_AT must be an "
                                                 "integer"):
        Settings.from_env({"TENANTRY_DELAY_NEW_RUNS_AT": "half"})
