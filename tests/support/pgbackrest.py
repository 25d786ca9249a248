"""A pgBackRest repository a test owns, for one :class:`~tests.support.pgcluster.PgCluster`:
its configuration file, repository, logs and locks all under the test's directory (the
default lock path ``/tmp/pgbackrest`` is shared by everyone on the machine), and the
settings that make the cluster archive its WAL into it (docs/how-to/backup.md shows the same
configuration for a real cell). No pytest here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.support.pgcluster import PgCluster, as_cluster_owner

STANZA = "cell"


class BackupRepo:
    """``root/pgbackrest.conf`` with one stanza, ``stanza``, for ``cluster``'s data directory."""

    def __init__(self, root: Path, cluster: PgCluster, *, stanza: str = STANZA) -> None:
        self.root = root
        self.cluster = cluster
        self.stanza = stanza
        self.config = root / "pgbackrest.conf"

    def write_config(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for sub in ("repo", "log", "lock", "spool"):
            (self.root / sub).mkdir(exist_ok=True)
        self.config.write_text(
            "[global]\n"
            f"repo1-path={self.root / 'repo'}\n"
            "repo1-retention-full=2\n"
            f"log-path={self.root / 'log'}\n"
            f"lock-path={self.root / 'lock'}\n"
            f"spool-path={self.root / 'spool'}\n"
            "start-fast=y\n"
            "compress-type=lz4\n"
            f"\n[{self.stanza}]\n"
            f"pg1-path={self.cluster.pgdata}\n"
            f"pg1-port={self.cluster.port}\n"
            f"pg1-socket-path={self.cluster.pgdata}\n"
            "pg1-user=postgres\n")

    @property
    def archive_command(self) -> str:
        return f"pgbackrest --config={self.config} --stanza={self.stanza} archive-push %p"

    def archive_settings(self) -> dict[str, str]:
        """Server settings that archive every WAL segment into this repository (quoted for
        ``PgCluster``'s ``-c name=value`` options, which a shell reads)."""
        return {"archive_mode": "on", "archive_command": f"'{self.archive_command}'"}

    def command(self, *args: str) -> list[str]:
        """``pgbackrest`` with this repository's configuration and stanza, as the cluster's
        owner."""
        return as_cluster_owner(["pgbackrest", f"--config={self.config}",
                                 f"--stanza={self.stanza}", *args])

    def run(self, *args: str) -> str:
        result = subprocess.run(self.command(*args), capture_output=True, text=True,
                                check=False)
        if result.returncode != 0:
            raise RuntimeError(f"pgbackrest {' '.join(args)} failed ({result.returncode}): "
                               f"{(result.stdout + result.stderr).strip()[-3000:]}")
        return result.stdout

    def create(self) -> None:
        """The stanza, once the cluster is running with :meth:`archive_settings`."""
        self.run("stanza-create")

    def info(self) -> dict[str, Any]:
        """This stanza's entry of ``pgbackrest info --output=json``."""
        stanzas: list[dict[str, Any]] = json.loads(self.run("--output=json", "info"))
        return stanzas[0]
