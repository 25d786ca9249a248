"""``tenantry backup``: is the cell restorable (``status``), and a restore of its Postgres to
a point in time into a new data directory (``restore``). Backups themselves are taken with
pgBackRest's own CLI on a schedule (ADR 0036, docs/how-to/backup.md).

Exit codes: 0 done (``status``: nothing wrong); 1 ``status`` found problems, each on its
own ``problem:`` line; 2 refused or failed, one ``error:`` line, nothing changed."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tenantry.cli.common import fail, run
from tenantry.cli.help import App
from tenantry.cli.options import BackupConfig, DatabaseUrl, Stanza

if TYPE_CHECKING:
    from tenantry.backup import Backup

backup_app = App(help="Backups of the cell's Postgres (pgBackRest): status, and a restore to "
                      "a point in time.")

@backup_app.command("status")
def status(
    stanza: Stanza, config: BackupConfig = None, database_url: DatabaseUrl = None,
    max_age_hours: Annotated[float, typer.Option(
        "--max-age-hours", min=0.1,
        help="A newest backup older than this is a problem.")] = 26.0,
) -> None:
    """Whether the cell can be restored, and to which times.

    Lists the stanza's backups and the span a restore can reach; with the cell's database
    (--database-url), also whether Postgres is archiving its WAL. Each problem is a
    `problem:` line and the exit status is 1: run it from a monitor."""
    import asyncio
    from datetime import UTC, datetime

    import asyncpg

    from tenantry.backup import PgBackRest
    from tenantry.backup.status import Archiver, assess, read_archiver

    info = run(lambda: PgBackRest(stanza, config).info())
    archiver: Archiver | None = None
    if database_url:
        try:
            archiver = asyncio.run(read_archiver(database_url))
        # Unreachable, refused, or a URL that cannot be read (MalformedDsn is a ValueError).
        except (OSError, TimeoutError, ValueError, asyncpg.PostgresError,
                asyncpg.InterfaceError) as exc:
            fail(f"cannot read the cell's archiving state: {type(exc).__name__}: {exc}")
    now = datetime.now(UTC)
    found = assess(info, archiver, now=now, max_age=timedelta(hours=max_age_hours))
    typer.echo(f"stanza {info.name}: {info.status}")
    for backup in info.backups:
        typer.echo(f"backup {_describe(backup)}")
    if found.restorable_from is not None:
        # The archiver knows when the newest segment was archived; the repository does not.
        until = ("" if archiver is None or archiver.last_archived_at is None else
                 f" (archived at {archiver.last_archived_at:%Y-%m-%dT%H:%M:%S%z})")
        typer.echo(f"restorable: from {found.restorable_from:%Y-%m-%dT%H:%M:%SZ} to the "
                   f"newest archived WAL, {info.wal_max}{until}")
    if archiver is None:
        typer.echo("archiving: not checked (give --database-url)")
    else:
        last = ("never" if archiver.last_archived_at is None else
                f"{archiver.last_archived_wal} at {archiver.last_archived_at:%Y-%m-%dT%H:%M:%S%z}")
        typer.echo(f"archiving: archive_mode={archiver.mode}; last archived {last}; "
                   f"{archiver.failed} failure(s)")
    for problem in found.problems:
        typer.secho(f"problem: {problem}", fg="red")
    if found.problems:
        raise typer.Exit(1)


@backup_app.command("restore")
def restore(
    to: Annotated[str, typer.Option(
        "--to", help="The point in time, with its zone (2025-03-01T12:00:00Z): every "
                     "transaction committed until then is restored, none after.")],
    into: Annotated[Path, typer.Option(
        "--into", help="A new or empty directory: the restored cluster's data directory.")],
    stanza: Stanza, config: BackupConfig = None,
    archive: Annotated[bool, typer.Option(
        "--archive", help="Keep archive_mode as it was backed up, for a cluster that "
                          "becomes the cell; default off, so that a trial restore never "
                          "pushes WAL into the cell's repository.")] = False,
) -> None:
    """Restore the cell's Postgres to a point in time into a new data directory.

    Nothing is written unless the time has a zone and is past, the directory is new or
    empty, and a backup ended before the time. The newest such backup is restored; the
    first start of Postgres on the directory replays the archived WAL up to the time and
    then opens for writes (docs/how-to/backup.md says what to do next)."""
    from datetime import UTC, datetime

    from tenantry.backup import PgBackRest
    from tenantry.backup.restore import restore as run_restore

    def show(line: str) -> None:
        typer.echo(line, err=True)

    done = run(lambda: run_restore(PgBackRest(stanza, config), into=into, to=to,
                                    archive=archive, now=datetime.now(UTC), on_line=show))
    typer.echo(f"restored backup {_describe(done.backup)} into {done.into} in "
               f"{done.seconds:.1f} s")
    typer.echo(f"start Postgres on it: it replays the archived WAL to "
               f"{done.target:%Y-%m-%dT%H:%M:%S.%fZ} and opens for writes there "
               f"(archiving {'as backed up' if archive else 'off'})")


def _describe(backup: Backup) -> str:
    return (f"{backup.label} ({backup.kind}): {backup.started_at:%Y-%m-%dT%H:%M:%SZ} to "
            f"{backup.stopped_at:%Y-%m-%dT%H:%M:%SZ}, {backup.size_bytes / 2**20:.1f} MiB, "
            f"{backup.stored_bytes / 2**20:.1f} MiB stored")
