"""``tenantry backup`` as an operator runs it (ADR 0036): real processes, real pgBackRest, a
cluster this module owns that archives into a repository this module owns (never the shared
server). A refusal is one ``error:`` line, exit 2, and nothing written; ``status`` lists the
backups and exits 1 with a ``problem:`` line when archiving fails. The restore itself, under
load, is tests/chaos/test_point_in_time_restore.py."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from tests.support.harness import tenantry_command
from tests.support.pgbackrest import BackupRepo
from tests.support.pgcluster import PgCluster, as_cluster_owner
from tests.support.waiting import until


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackupRepo]:
    """A cluster with one full backup. Its archive_command is set with ALTER SYSTEM (not on
    the command line, which would win over it) so that a test can break it."""
    root = tmp_path_factory.mktemp("backups")
    cluster = PgCluster(root / "cell", settings={"archive_mode": "on"})
    backups = BackupRepo(root / "repo", cluster)
    cluster.init()
    backups.write_config()
    (cluster.pgdata / "postgresql.auto.conf").write_text(
        f"archive_command = '{backups.archive_command}'\n")
    cluster.start()
    try:
        backups.create()
        backups.run("--type=full", "backup")
        yield backups
    finally:
        cluster.stop()


@pytest.fixture
async def cell(repo: BackupRepo) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(repo.cluster.dsn())
    try:
        yield conn
    finally:
        await conn.close()


def backup(repo: BackupRepo, *args: str,
           stanza: str | None = None) -> subprocess.CompletedProcess[str]:
    """``tenantry backup ARGS`` for ``repo``'s stanza, as the cluster's owner."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENANTRY_")}
    argv = [*tenantry_command(), "backup", *args, "--stanza", stanza or repo.stanza,
            "--config", str(repo.config)]
    return subprocess.run(as_cluster_owner(argv), env={**env, "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=60, check=False)


def tree(root: Path) -> list[tuple[str, int, int]]:
    return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in root.rglob("*"))


def test_a_restore_into_a_directory_that_is_not_empty_is_refused_and_changes_nothing(
    repo: BackupRepo, tmp_path: Path,
) -> None:
    target = tmp_path / "pgdata"
    target.mkdir()
    (target / "PG_VERSION").write_text("15\n")
    (target / "base").mkdir()
    before = tree(target)
    done = backup(repo, "restore", "--to", datetime.now(UTC).isoformat(), "--into",
                  str(target))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"error: {target} is not empty: restore into a new or empty "
                           "directory (nothing was changed)\n")
    assert tree(target) == before


@pytest.mark.parametrize(("to", "says"), [
    ("2026-03-01 12:00:00", "error: --to '2026-03-01 12:00:00' has no time zone: add one"),
    ("noon", "error: --to 'noon' is not a time"),
    (None, "error: no backup of stanza cell ended before "),
])
def test_a_restore_to_a_time_it_cannot_reach_is_refused_before_anything_is_written(
    repo: BackupRepo, tmp_path: Path, to: str | None, says: str,
) -> None:
    # None: an hour before the only backup, which Postgres would refuse at its first start.
    at = to or (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    done = backup(repo, "restore", "--to", at, "--into", str(tmp_path / "pgdata"))
    assert done.returncode == 2
    assert done.stderr.startswith(says) and done.stderr.count("\n") == 1, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_restore_from_a_stanza_that_does_not_exist_is_one_line(
    repo: BackupRepo, tmp_path: Path,
) -> None:
    done = backup(repo, "restore", "--to", datetime.now(UTC).isoformat(), "--into",
                  str(tmp_path / "pgdata"), stanza="nope")
    assert (done.returncode, done.stderr) == (2, "error: stanza nope: missing stanza path\n")
    assert list(tmp_path.iterdir()) == []


async def test_status_lists_the_backups_and_says_when_archiving_fails(
    repo: BackupRepo, cell: asyncpg.Connection,
) -> None:
    (full,) = repo.info()["backup"]
    healthy = backup(repo, "status", "--database-url", repo.cluster.dsn())
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    lines = healthy.stdout.splitlines()
    assert lines[0] == "stanza cell: ok"
    assert lines[1].startswith(f"backup {full['label']} (full): ")
    assert lines[2].startswith("restorable: from ")
    assert lines[3].startswith("archiving: archive_mode=on; last archived ")
    assert "problem:" not in healthy.stdout

    # The archive command starts failing (a full repository disk, a lost mount, ...).
    await cell.execute("ALTER SYSTEM SET archive_command = 'false'")
    await cell.execute("SELECT pg_reload_conf()")
    try:
        await cell.execute("CREATE TABLE written AS SELECT 1 AS x")
        await cell.execute("SELECT pg_switch_wal()")

        async def failed() -> bool:
            return bool(await cell.fetchval("SELECT failed_count > 0 FROM pg_stat_archiver"))
        await until(failed, "the archiver fails", 30)
        broken = backup(repo, "status", "--database-url", repo.cluster.dsn())
    finally:
        await cell.execute(f"ALTER SYSTEM SET archive_command = '{repo.archive_command}'")
        await cell.execute("SELECT pg_reload_conf()")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert broken.stdout.splitlines()[-1].startswith(
        "problem: WAL archiving is failing: "), broken.stdout
    # Without the database, status sees only pgBackRest's side: the backup is there.
    alone = backup(repo, "status")
    assert alone.returncode == 0
    assert "archiving: not checked (give --database-url)" in alone.stdout
