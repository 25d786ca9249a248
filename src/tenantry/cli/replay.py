"""``tenantry replay``: recorded runs re-driven through the current code."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tenantry.cli.common import fail, run, settings
from tenantry.cli.options import DatabaseUrl, DataDir

if TYPE_CHECKING:
    from tenantry.runs.replay import RecordedRun


def replay(
    paths: Annotated[list[Path] | None, typer.Argument(
        help="Recorded runs (JSON files, or folders of them) to replay.")] = None,
    tenant: Annotated[str | None, typer.Option(
        "--tenant", help="Replay this tenant's ended runs from the database instead.")] = None,
    runs: Annotated[list[str] | None, typer.Option(
        "--run", help="With --tenant: only these runs.")] = None,
    export: Annotated[Path | None, typer.Option(
        "--export", help="With --tenant: write the runs as recorded-run files into this "
                         "folder (a replay corpus) instead of replaying them.")] = None,
    database_url: DatabaseUrl = None, data_dir: DataDir = None,
) -> None:
    """Re-drive recorded runs through the current code; report every decision that differs.

    Exits 1 when any run differs (so it can gate a deploy or a CI job), 2 when it cannot
    replay at all (no runs, unreadable files, unknown run, unreachable database)."""
    from tenantry.runs.replay import RecordedRun

    if tenant is None and not paths:
        fail("give recorded-run files or folders, or --tenant to read from the database")
    records: list[tuple[str, RecordedRun]] = []
    for path in paths or []:
        files = sorted(path.glob("*.json")) if path.is_dir() else [path]
        for file in files:
            try:
                records.append((str(file), RecordedRun.load(file)))
            except (OSError, ValueError, KeyError) as exc:
                fail(f"{file}: not a recorded run: {exc}")
    if tenant is not None:
        from tenantry.bootstrap import commands
        from tenantry.db import DATABASE_DOWN

        config = settings(database_url=database_url, data_dir=data_dir)
        try:
            records += run(lambda: commands.recorded_runs(config, tenant, runs or []))
        except DATABASE_DOWN as exc:
            fail(f"cannot reach the database: {exc}")
    if not records:
        fail("no recorded runs found (an empty folder, or a tenant with no ended runs)")
    if export is not None:
        export.mkdir(parents=True, exist_ok=True)
        import orjson

        for _, record in records:
            (export / f"{record.run_id}.json").write_bytes(
                orjson.dumps(record.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
        typer.echo(f"exported {len(records)} run(s) to {export}")
        return
    _report(records)


def _report(records: list[tuple[str, RecordedRun]]) -> None:
    from tenantry.runs.replay import replay as replay_run

    differing = 0
    for source, record in records:
        differences = replay_run(record)
        if differences:
            differing += 1
            typer.secho(f"DIFF {source}", fg="red")
            for difference in differences:
                typer.echo(f"  {difference}")
        else:
            typer.echo(f"ok   {source} ({len(record.events)} events)")
    typer.echo(f"{len(records)} run(s) replayed, {differing} with differences")
    if differing:
        raise typer.Exit(1)
