"""What ``tenantry backup`` makes of pgBackRest's ``info`` and of an operator's input
(ADR 0036): the backup a restore to a time starts from, the earliest time it can reach,
the problems ``status`` reports, and the times a restore refuses before writing anything."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tenantry.backup import BackupError, StanzaInfo
from tenantry.backup.pgbackrest import parse_info, recovery_time
from tenantry.backup.restore import choose_backup, parse_target
from tenantry.backup.status import Archiver, assess

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _backup(label: str, kind: str, start: datetime, stop: datetime) -> dict[str, Any]:
    # The shape of `pgbackrest --output=json info` (2.45), trimmed to what is read.
    return {"label": label, "type": kind, "error": False,
            "timestamp": {"start": int(start.timestamp()), "stop": int(stop.timestamp())},
            "info": {"size": 29_000_000, "delta": 29_000_000,
                     "repository": {"size": 4_500_000, "delta": 1_000_000}},
            "archive": {"start": "000000010000000000000002",
                        "stop": "000000010000000000000003"}}


def _info(*backups: dict[str, Any], code: int = 0, message: str = "ok") -> StanzaInfo:
    return parse_info("cell", json.dumps([
        {"name": "other", "status": {"code": 1, "message": "missing stanza path"}},
        {"name": "cell", "status": {"code": code, "message": message},
         "archive": [{"id": "15-1", "min": "000000010000000000000001",
                      "max": "000000010000000000000009"}],
         "backup": list(backups)}]))


FULL = _backup("20260301-090000F", "full", NOW - timedelta(hours=3),
               NOW - timedelta(hours=2, minutes=58))
INCR = _backup("20260301-090000F_20260301-110000I", "incr", NOW - timedelta(hours=1),
               NOW - timedelta(minutes=59))


def test_info_is_read_oldest_backup_first_with_the_archive_span() -> None:
    info = _info(INCR, FULL)
    assert [b.label for b in info.backups] == [FULL["label"], INCR["label"]]
    assert info.backups[1].kind == "incr"
    assert info.backups[1].stored_bytes == 1_000_000
    assert (info.wal_min, info.wal_max) == ("000000010000000000000001",
                                            "000000010000000000000009")


def test_info_that_does_not_list_the_stanza_is_one_line() -> None:
    with pytest.raises(BackupError, match="does not list stanza 'cell'"):
        parse_info("cell", "[]")


def test_a_restore_starts_from_the_newest_backup_that_ended_before_the_time() -> None:
    info = _info(FULL, INCR)
    assert choose_backup(info, NOW - timedelta(minutes=30)).label == INCR["label"]
    assert choose_backup(info, NOW - timedelta(hours=2)).label == FULL["label"]


def test_a_time_before_every_backup_is_refused_with_the_earliest_one_there_is() -> None:
    # pgBackRest would take the newest backup, and Postgres refuse at its first start.
    with pytest.raises(BackupError) as refused:
        choose_backup(_info(FULL, INCR), NOW - timedelta(hours=2, minutes=58, seconds=30))
    # The backup's end, recorded in whole seconds, plus the second it may have run into.
    assert refused.value.detail.endswith("the earliest time it can be restored to is "
                                         "2026-03-01T09:02:01Z")


def test_a_stanza_without_backups_or_in_trouble_restores_nothing() -> None:
    with pytest.raises(BackupError, match="stanza cell has no backup to restore from"):
        choose_backup(_info(code=2, message="no valid backups"), NOW)
    with pytest.raises(BackupError, match="stanza cell: missing stanza path"):
        choose_backup(_info(code=1, message="missing stanza path"), NOW)


@pytest.mark.parametrize(("text", "says"), [
    ("2026-03-01T11:00:00", "has no time zone"),
    ("yesterday", "is not a time"),
    ("2026-03-01T12:00:01Z", "is in the future"),
])
def test_a_target_time_without_a_zone_unreadable_or_ahead_is_refused(text: str,
                                                                      says: str) -> None:
    with pytest.raises(BackupError, match=says):
        parse_target(text, now=NOW)


def test_a_target_time_is_read_in_its_own_zone_and_given_to_postgres_in_utc() -> None:
    at = parse_target("2026-03-01T12:30:00.25+02:00", now=NOW)
    assert at == datetime(2026, 3, 1, 10, 30, 0, 250000, tzinfo=UTC)
    assert recovery_time(at) == "2026-03-01 10:30:00.250000+00"


def _archiver(**changes: Any) -> Archiver:
    healthy: dict[str, Any] = dict(
        mode="on", archived=120, last_archived_wal="000000010000000000000009",
        last_archived_at=NOW - timedelta(minutes=1), failed=0, last_failed_wal=None,
        last_failed_at=None)
    return Archiver(**{**healthy, **changes})


def test_status_of_a_healthy_cell_has_no_problem_and_says_from_when_it_restores() -> None:
    found = assess(_info(FULL, INCR), _archiver(), now=NOW, max_age=timedelta(hours=26))
    assert found.problems == ()
    assert found.restorable_from == datetime(2026, 3, 1, 9, 2, 1, tzinfo=UTC)


def test_status_says_what_stands_between_the_cell_and_a_restore() -> None:
    failing = _archiver(failed=3, last_failed_wal="00000001000000000000000A",
                        last_failed_at=NOW - timedelta(seconds=10))
    found = assess(_info(FULL), failing, now=NOW, max_age=timedelta(hours=2))
    assert len(found.problems) == 2
    assert found.problems[0].startswith("the newest backup ended 3.0 h ago, more than 2.0 h")
    assert found.problems[1].startswith("WAL archiving is failing: 3 failure(s)")
    # A failure followed by a success is history, not a problem.
    recovered = _archiver(failed=3, last_failed_at=NOW - timedelta(minutes=5))
    assert assess(_info(FULL), recovered, now=NOW, max_age=timedelta(hours=26)).problems == ()


def test_status_of_a_cell_never_backed_up_or_not_archiving() -> None:
    found = assess(_info(code=2, message="no valid backups"), _archiver(mode="off"),
                   now=NOW, max_age=timedelta(hours=26))
    assert found.problems == (
        "no backup yet: run `pgbackrest --stanza=cell --type=full backup`",
        "archive_mode is off: no WAL is archived, so no point in time after a backup can "
        "be restored")
