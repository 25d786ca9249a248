"""pgBackRest as Tenantry drives it (ADR 0036): ``info`` read into typed values, and one
``restore`` to a point in time. Everything else (``stanza-create``, ``backup``, ``check``,
``expire``) is the operator's, with pgBackRest's own CLI (docs/how-to/backup.md).

The stanza's configuration (repository, retention, the cluster's ``pg1-path``) lives in
pgBackRest's configuration file, which Tenantry only points the tool at (``--config``)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tenantry.errors import TenantryError

#: pgBackRest's stanza status codes that still describe a usable stanza: ok, and "no valid
#: backups" (a stanza created but not yet backed up; ``assess`` says so in its own words).
_USABLE_CODES = (0, 2)


class BackupError(TenantryError):
    """A backup or restore command refused, or pgBackRest failed; ``detail`` says which in
    one line."""

    type = "backup_error"
    title = "Backup or restore refused"


@dataclass(frozen=True, slots=True)
class Backup:
    """One backup in the repository, as ``pgbackrest info`` lists it."""

    label: str
    kind: str  # full, diff or incr
    started_at: datetime
    stopped_at: datetime
    size_bytes: int  # the cluster's size when it was taken
    stored_bytes: int  # what this backup's own files take in the repository
    wal_start: str
    wal_stop: str

    @property
    def restorable_from(self) -> datetime:
        """The earliest time this backup restores to. pgBackRest records whole seconds and
        the backup is consistent only at its stop, inside the second after ``stopped_at``;
        a target before that would make Postgres refuse to start, long after the restore."""
        return self.stopped_at + timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class StanzaInfo:
    name: str
    code: int  # pgBackRest's stanza status code
    status: str  # and its message
    backups: tuple[Backup, ...]  # oldest first
    wal_min: str | None  # the oldest and newest WAL segment in the archive
    wal_max: str | None

    @property
    def usable(self) -> bool:
        return self.code in _USABLE_CODES


def parse_info(stanza: str, output: str) -> StanzaInfo:
    """``stanza``'s entry of ``pgbackrest --output=json info``."""
    try:
        entries: list[dict[str, Any]] = json.loads(output)
        entry = next(e for e in entries if e.get("name") == stanza)
        backups = tuple(_backup(b) for b in entry.get("backup", []))
        archives = [a for a in entry.get("archive", []) if a.get("min")]
        status = entry["status"]
        return StanzaInfo(
            name=stanza, code=int(status["code"]), status=str(status["message"]),
            backups=tuple(sorted(backups, key=lambda b: b.stopped_at)),
            wal_min=min((str(a["min"]) for a in archives), default=None),
            wal_max=max((str(a["max"]) for a in archives), default=None))
    except StopIteration:
        raise BackupError(f"pgbackrest info does not list stanza {stanza!r}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise BackupError(f"pgbackrest info answered what Tenantry cannot read ({exc!r}); "
                          "is this pgBackRest 2.x?") from None


def _backup(data: dict[str, Any]) -> Backup:
    stamps = data["timestamp"]
    return Backup(
        label=str(data["label"]), kind=str(data["type"]),
        started_at=datetime.fromtimestamp(int(stamps["start"]), UTC),
        stopped_at=datetime.fromtimestamp(int(stamps["stop"]), UTC),
        size_bytes=int(data["info"]["size"]),
        stored_bytes=int(data["info"]["repository"]["delta"]),
        wal_start=str(data["archive"]["start"]), wal_stop=str(data["archive"]["stop"]))


def recovery_time(at: datetime) -> str:
    """``at`` as Postgres reads ``recovery_target_time``: UTC, to the microsecond."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f+00")


@dataclass(frozen=True, slots=True)
class PgBackRest:
    """The ``pgbackrest`` command for one stanza (the cell), with an optional configuration
    file (default: pgBackRest's own, ``/etc/pgbackrest/pgbackrest.conf``)."""

    stanza: str
    config: Path | None = None
    binary: str = "pgbackrest"

    def argv(self, *args: str) -> list[str]:
        found = shutil.which(self.binary)
        if found is None:
            raise BackupError(f"{self.binary} is not installed here (Debian package "
                              "pgbackrest; see docs/how-to/backup.md)")
        config = [] if self.config is None else [f"--config={self.config}"]
        return [found, *config, f"--stanza={self.stanza}", *args]

    def info(self) -> StanzaInfo:
        result = subprocess.run(self.argv("--output=json", "info"), capture_output=True,
                                text=True, check=False)
        if result.returncode != 0:
            raise BackupError(f"pgbackrest info failed: "
                              f"{_error_line(result.stdout + result.stderr)}")
        return parse_info(self.stanza, result.stdout)

    def restore(self, into: Path, target: datetime, label: str, *, archive: bool,
                on_line: Callable[[str], None]) -> None:
        """Restore backup ``label`` into the (empty) directory ``into``, set to recover to
        ``target`` and promote there when Postgres starts on it. ``archive=False`` writes
        ``archive_mode=off`` so that the restored cluster never pushes WAL into the
        repository. pgBackRest's log lines go to ``on_line`` as they come (progress)."""
        argv = self.argv(
            "--log-level-console=info", "--log-level-stderr=off", f"--pg1-path={into}",
            "--type=time", f"--target={recovery_time(target)}", "--target-action=promote",
            f"--set={label}", *([] if archive else ["--archive-mode=off"]), "restore")
        lines: list[str] = []
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, text=True) as process:
            assert process.stdout is not None
            for line in process.stdout:
                lines.append(line.rstrip())
                on_line(line.rstrip())
        if process.returncode != 0:
            raise BackupError(f"pgbackrest restore failed: {_error_line(chr(10).join(lines))}")


def _error_line(output: str) -> str:
    """pgBackRest's ``ERROR: [code]: message`` line, or the output's last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "ERROR:" in line]
    chosen = errors[-1] if errors else (lines[-1] if lines else "no output")
    return chosen[chosen.find("ERROR:"):] if "ERROR:" in chosen else chosen
