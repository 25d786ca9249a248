"""``tenantry vault``: the secrets vault's master key."""

from __future__ import annotations

import typer

from tenantry.cli.common import run, settings
from tenantry.cli.help import App
from tenantry.cli.options import DatabaseUrl, DataDir, NewMasterKey

vault_app = App(help="The secrets vault.")


@vault_app.command("rotate-master-key")
def rotate_master_key(
    new_key: NewMasterKey,
    database_url: DatabaseUrl = None, data_dir: DataDir = None,
) -> None:
    """Re-wrap every tenant's data key under a new master key (secrets are not re-encrypted).

    The current key comes from TENANTRY_MASTER_KEY (or the data dir's dev key). Safe to run
    again after an interruption. Afterwards, start the platform with the new key."""
    from tenantry.bootstrap import commands

    config = settings(database_url=database_url, data_dir=data_dir)
    rotation = run(lambda: commands.rotate_master_key(config, new_key))
    if rotation.dev_key_replaced:
        typer.echo("updated the development key in the data dir")
    typer.echo(f"re-wrapped {rotation.rewrapped} tenant key(s) under master key "
               f"{rotation.key_id}")
