"""``tenantry backup restore``: a cell's Postgres restored to a point in time into a new data
directory (ADR 0036). Every check that can refuse runs before anything is written, so a
refusal is one line and leaves the machine as it was:

- the time has a zone and is not in the future (a zone-less time would be read in the
  server's zone, which is how restores land hours off);
- the directory is new or empty (never restore over a cluster: pgBackRest's ``--delta``
  exists for that, on purpose, and is not what this command is for);
- a backup ended before the time (else Postgres refuses at its first start, after the
  whole restore: "requested recovery stop point is before consistent recovery point").

Then pgBackRest restores the newest such backup, with ``recovery_target_time`` set and
``promote`` at the target: the first start of Postgres on the directory replays the
archived WAL up to the time and opens for writes there."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tenantry.backup.pgbackrest import Backup, BackupError, PgBackRest, StanzaInfo

_EXAMPLE = "e.g. 2025-03-01T12:00:00Z or 2025-03-01T13:00:00+01:00"


@dataclass(frozen=True, slots=True)
class Restored:
    backup: Backup
    into: Path
    target: datetime
    seconds: float


def parse_target(text: str, *, now: datetime) -> datetime:
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BackupError(f"--to {text!r} is not a time ({_EXAMPLE})") from None
    if at.tzinfo is None:
        raise BackupError(f"--to {text!r} has no time zone: add one ({_EXAMPLE})")
    if at > now:
        raise BackupError(f"--to {text!r} is in the future: the newest time a restore can "
                          "reach is the newest WAL archived")
    return at.astimezone(UTC)


def check_empty(into: Path) -> None:
    """``into`` may be created, or is an empty directory."""
    if into.is_dir():
        if any(into.iterdir()):
            raise BackupError(f"{into} is not empty: restore into a new or empty directory "
                              "(nothing was changed)")
    elif into.exists():
        raise BackupError(f"{into} is not a directory: restore into a new or empty "
                          "directory (nothing was changed)")
    elif not into.parent.is_dir():
        raise BackupError(f"{into.parent} does not exist: create it, or choose another "
                          "directory (nothing was changed)")


def choose_backup(info: StanzaInfo, target: datetime) -> Backup:
    """The newest backup that ended before ``target``: the least WAL to replay."""
    if not info.usable:
        raise BackupError(f"stanza {info.name}: {info.status}")
    if not info.backups:
        raise BackupError(f"stanza {info.name} has no backup to restore from")
    usable = [b for b in info.backups if b.restorable_from <= target]
    if not usable:
        earliest = info.backups[0].restorable_from
        raise BackupError(f"no backup of stanza {info.name} ended before "
                          f"{target:%Y-%m-%dT%H:%M:%S.%fZ}: the earliest time it can be "
                          f"restored to is {earliest:%Y-%m-%dT%H:%M:%SZ}")
    return usable[-1]


def restore(tool: PgBackRest, *, into: Path, to: str, archive: bool, now: datetime,
            on_line: Callable[[str], None]) -> Restored:
    target = parse_target(to, now=now)
    into = into.absolute()
    check_empty(into)
    backup = choose_backup(tool.info(), target)
    into.mkdir(mode=0o700, exist_ok=True)
    started = time.monotonic()
    tool.restore(into, target, backup.label, archive=archive, on_line=on_line)
    return Restored(backup, into, target, time.monotonic() - started)
