"""Is the cell restorable, and to which times: pgBackRest's view of the repository and, when
the cell's database is given, Postgres's view of its WAL archiving (``pg_stat_archiver``),
weighed into a list of problems a monitor can alert on (``tenantry backup status``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from tenantry.backup.pgbackrest import Backup, StanzaInfo
from tenantry.db.dsn import for_cluster

_ARCHIVER = """
SELECT current_setting('archive_mode') AS mode, archived_count, last_archived_wal,
       last_archived_time, failed_count, last_failed_wal, last_failed_time
FROM pg_stat_archiver"""


@dataclass(frozen=True, slots=True)
class Archiver:
    """``pg_stat_archiver`` on the cell's primary (counts since its statistics were reset)."""

    mode: str  # archive_mode: on, always or off
    archived: int
    last_archived_wal: str | None
    last_archived_at: datetime | None
    failed: int
    last_failed_wal: str | None
    last_failed_at: datetime | None

    @property
    def failing(self) -> bool:
        """The last attempt failed: WAL piles up on the primary and the newest point in time
        that can be restored stays where it is."""
        return self.last_failed_at is not None and (
            self.last_archived_at is None or self.last_failed_at > self.last_archived_at)


async def read_archiver(url: str) -> Archiver:
    conn = await asyncpg.connect(for_cluster(url), timeout=10)
    try:
        row = await conn.fetchrow(_ARCHIVER)
    finally:
        await conn.close()
    assert row is not None
    return Archiver(mode=row["mode"], archived=row["archived_count"],
                    last_archived_wal=row["last_archived_wal"],
                    last_archived_at=row["last_archived_time"], failed=row["failed_count"],
                    last_failed_wal=row["last_failed_wal"], last_failed_at=row["last_failed_time"])


@dataclass(frozen=True, slots=True)
class Status:
    info: StanzaInfo
    archiver: Archiver | None  # None: the database was not asked
    problems: tuple[str, ...]

    @property
    def newest(self) -> Backup | None:
        return self.info.backups[-1] if self.info.backups else None

    @property
    def restorable_from(self) -> datetime | None:
        """The earliest time a restore can reach (the oldest backup's end)."""
        return self.info.backups[0].restorable_from if self.info.backups else None


def assess(info: StanzaInfo, archiver: Archiver | None, *, now: datetime,
           max_age: timedelta) -> Status:
    """What stands between the cell and a restore to any time since its oldest backup."""
    problems = []
    if not info.usable:
        problems.append(f"stanza {info.name}: {info.status}")
    if not info.backups:
        problems.append(f"no backup yet: run `pgbackrest --stanza={info.name} --type=full "
                        "backup`")
    elif now - info.backups[-1].stopped_at > max_age:
        age = _hours(now - info.backups[-1].stopped_at)
        problems.append(f"the newest backup ended {age} ago, more than {_hours(max_age)}: "
                        "is the backup schedule running?")
    if archiver is not None:
        if archiver.mode == "off":
            problems.append("archive_mode is off: no WAL is archived, so no point in time "
                            "after a backup can be restored")
        elif archiver.failing:
            problems.append(f"WAL archiving is failing: {archiver.failed} failure(s), the "
                            f"last at {archiver.last_failed_at:%Y-%m-%d %H:%M:%S%z} on "
                            f"{archiver.last_failed_wal} (Postgres's log says why)")
    return Status(info, archiver, tuple(problems))


def _hours(span: timedelta) -> str:
    hours = span.total_seconds() / 3600
    return f"{hours:.1f} h"
