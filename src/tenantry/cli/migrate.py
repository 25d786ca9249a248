"""``tenantry migrate``: the database's schema brought current (docs/how-to/upgrade.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from tenantry.cli.common import fail, run, settings
from tenantry.cli.options import DatabaseUrl, DataDir


def migrate(
    database_url: DatabaseUrl = None, data_dir: DataDir = None,
    status: Annotated[bool, typer.Option(
        "--status", help="Change nothing: print the code's release, the releases connected, "
                         "what is pending and whether applying it (or a contract step) is "
                         "safe now.")] = False,
    contract: Annotated[bool, typer.Option(
        "--contract", help="Apply the contract steps (removals of what an older release "
                           "uses); refused while a process of an older release is "
                           "connected.")] = False,
) -> None:
    """Apply pending database migrations, then the routines that changed (the embedded
    database when no URL is given); refused while a process of a release the new schema
    does not serve is connected (docs/how-to/upgrade.md)."""
    from tenantry.bootstrap import commands

    if status and contract:
        fail("--status and --contract: one or the other")
    config = settings(database_url=database_url, data_dir=data_dir)
    if status:
        for line in run(lambda: commands.migrate_status(config)).lines():
            typer.echo(line)
        return
    if contract:
        steps = run(lambda: commands.contract(config))
        typer.echo(f"applied {len(steps)} contract step(s)" if steps
                   else "no contract step due")
        return
    applied = run(lambda: commands.migrate(config))
    typer.echo(f"applied {len(applied.migrations)} migration(s) and "
               f"{len(applied.routines)} routine(s); schema is current")
    if applied.contract:  # a database migrated from empty: nothing older was connected
        typer.echo(f"applied {len(applied.contract)} contract step(s) (a new database)")
    if applied.contract_due:
        typer.echo(f"{len(applied.contract_due)} contract step(s) due: run 'tenantry migrate "
                   "--contract' once no process of an older release is connected "
                   "('tenantry migrate --status' says)")
