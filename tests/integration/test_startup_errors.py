"""Start-up against a database that is not there, not listening, or refuses the password:
each command (``api``, ``worker``, ``up`` with an external URL, ``migrate``) prints one line
on stderr naming the host, port and database and what to do, exits 2, shows no traceback
and never the password. Real ``tenantry`` processes; the wrong-password case uses a
cluster this module owns with scram-sha-256 authentication. Likewise a database whose
schema is of a release outside the process's window, or of a newer release than a
migrate's."""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from tenantry import __version__
from tenantry.db.release import Release
from tenantry.vault import MasterKey
from tests.support.harness import tenantry_command
from tests.support.pgcluster import PgCluster, free_port

COMMANDS = ["api", "worker", "up", "migrate"]
PASSWORD = "correct-horse-battery"
WRONG_PASSWORD = "wrong-staple-9f3a"


@pytest.fixture(scope="module")
def password_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgCluster]:
    with PgCluster(tmp_path_factory.mktemp("scram") / "pg", password=PASSWORD) as cluster:
        yield cluster


def run_command(command: str, url: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENANTRY_")}
    env.update(TENANTRY_DATA_DIR=str(data_dir), TENANTRY_DATABASE_URL=url,
               TENANTRY_SANDBOX_BACKEND="none")
    argv = [*tenantry_command(), command]
    if command in ("api", "up"):
        argv += ["--port", str(free_port())]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                          check=False)


def assert_one_line(result: subprocess.CompletedProcess[str], *, says: list[str],
                    secret: str | None = None) -> None:
    shown = f"stdout: {result.stdout!r}\nstderr: {result.stderr!r}"
    assert result.returncode == 2, shown
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, shown
    assert lines[0].startswith("error: "), shown
    assert "Traceback" not in result.stderr + result.stdout, shown
    for text in says:
        assert text in lines[0], shown
    if secret is not None:
        assert secret not in result.stderr + result.stdout, shown


@pytest.mark.parametrize("command", COMMANDS)
def test_a_database_that_does_not_exist(command: str, tmp_path: Path) -> None:
    name = f"tenantry_missing_{uuid.uuid4().hex[:8]}"
    result = run_command(command, f"postgresql://postgres@127.0.0.1:5432/{name}", tmp_path)
    assert_one_line(result, says=["127.0.0.1:5432", f"no database '{name}'", "createdb"])


@pytest.mark.parametrize("command", COMMANDS)
def test_a_host_nobody_listens_on(command: str, tmp_path: Path) -> None:
    port = free_port()  # bound and released: nothing listens there
    result = run_command(command, f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/tenantry",
                         tmp_path)
    assert_one_line(result, says=[f"127.0.0.1:{port}", "'tenantry'", "connection refused"],
                    secret=PASSWORD)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_wrong_password(command: str, password_cluster: PgCluster, tmp_path: Path) -> None:
    result = run_command(command, password_cluster.dsn(password=WRONG_PASSWORD), tmp_path)
    assert_one_line(result, says=[f"127.0.0.1:{password_cluster.port}",
                                  "refused the password of user 'postgres'"],
                    secret=WRONG_PASSWORD)


def test_the_right_password_gets_past_the_check(password_cluster: PgCluster,
                                                tmp_path: Path) -> None:
    """The same cluster with its password: migrate succeeds (so the failures above are the
    password's, not the cluster's)."""
    result = run_command("migrate", password_cluster.dsn(), tmp_path)
    assert result.returncode == 0, result.stderr
    assert "schema is current" in result.stdout
    assert PASSWORD not in result.stdout + result.stderr


@pytest.mark.parametrize("argv", [
    ["replay", "--tenant", "acme"],
    ["vault", "rotate-master-key", "--new-key", MasterKey.generate().encoded()],
])
def test_the_other_database_commands_say_the_same(argv: list[str], tmp_path: Path) -> None:
    name = f"tenantry_missing_{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENANTRY_")}
    env.update(TENANTRY_DATA_DIR=str(tmp_path), TENANTRY_MASTER_KEY=MasterKey.generate().encoded(),
               TENANTRY_DATABASE_URL=f"postgresql://postgres@127.0.0.1:5432/{name}")
    result = subprocess.run([*tenantry_command(), *argv], env=env, capture_output=True,
                            text=True, timeout=60, check=False)
    assert_one_line(result, says=["127.0.0.1:5432", f"no database '{name}'"])


@pytest.fixture(scope="module")
def read_only_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgCluster]:
    """A node that answers but takes no writes, as a standby does (cheaper than one)."""
    with PgCluster(tmp_path_factory.mktemp("ro") / "pg",
                   settings={"default_transaction_read_only": "on"}) as cluster:
        yield cluster


@pytest.mark.parametrize("command", COMMANDS)
def test_a_cell_with_no_writable_host(command: str, read_only_cluster: PgCluster,
                                      tmp_path: Path) -> None:
    """Several hosts and none is the primary: the line says what each one answered."""
    dead = free_port()
    live = read_only_cluster.port
    result = run_command(command, f"postgresql://postgres:{PASSWORD}@127.0.0.1:{dead},"
                                  f"127.0.0.1:{live}/postgres", tmp_path)
    assert_one_line(result, says=[
        f"no writable primary among Postgres at 127.0.0.1:{dead}, 127.0.0.1:{live}",
        f"127.0.0.1:{dead}: connection refused",
        f"127.0.0.1:{live}: read-only (default_transaction_read_only)"], secret=PASSWORD)


# -- a schema of a release outside the window (docs/how-to/upgrade.md) -----------------------

CODE = Release.parse(__version__)
#: Two release lines ahead: its schema serves the line after this one and its own.
TOO_NEW = f"{CODE.major}.{CODE.minor + 2}.0"
#: A release line before this one (the one that serves it until this release migrates).
OLDER = (f"{CODE.major}.{CODE.minor - 1}.9" if CODE.minor else f"{CODE.major - 1}.9.0")


#: The next release line, which (once its contract steps ran) no longer serves this one.
NEXT = f"{CODE.major}.{CODE.minor + 1}.0"


async def _recorded_release(admin: asyncpg.Connection, release: str, *,
                            contracted: bool = False) -> None:
    """The database as ``release``'s migrate (and ``--contract``) left it."""
    await admin.execute("DELETE FROM schema_releases")
    await admin.execute(
        "INSERT INTO schema_releases (release, contracted_at) "
        "VALUES ($1, CASE WHEN $2 THEN now() END)", release, contracted)


@pytest.mark.parametrize("command", ["api", "worker"])
@pytest.mark.parametrize(("schema", "says"), [
    (NEXT + " contracted",
     f"error: the database's schema is release {NEXT}'s, contracted by {NEXT}: what "
     f"releases before {CODE.major}.{CODE.minor + 1} use is gone; this is release "
     f"{__version__}: run a release the database serves"),
    (TOO_NEW, f"error: the database's schema is release {TOO_NEW}'s, which serves releases "
              f"{CODE.major}.{CODE.minor + 1} and {CODE.major}.{CODE.minor + 2}; this is "
              f"release {__version__}: run a release the database serves"),
    (OLDER, f"error: the database's schema is release {OLDER}'s, this is {__version__}: run "
            "this release's 'tenantry migrate' first (release "
            f"{Release.parse(OLDER).major}.{Release.parse(OLDER).minor}'s processes serve it "
            "until then)"),
])
async def test_a_process_refuses_a_schema_of_a_release_outside_its_window(
    command: str, schema: str, says: str, database_dsn: str, admin_conn: asyncpg.Connection,
    tmp_path: Path,
) -> None:
    """Release N runs on the schema of N and N+1 until N+1's contract steps: a newer one
    may have removed what N uses, an older one lacks what N needs. The line says which
    release the database wants; nothing is started or registered."""
    release, _, contracted = schema.partition(" ")
    await _recorded_release(admin_conn, release, contracted=bool(contracted))
    result = await asyncio.to_thread(run_command, command, database_dsn, tmp_path)
    assert_one_line(result, says=[says])
    assert result.stderr.strip() == says
    assert await admin_conn.fetchval("SELECT count(*) FROM worker_sessions") == 0


async def test_a_process_still_refuses_pending_migrations(
    database_dsn: str, admin_conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    await admin_conn.execute(
        "DELETE FROM schema_migrations WHERE version = (SELECT max(version) "
        "FROM schema_migrations)")
    result = await asyncio.to_thread(run_command, "worker", database_dsn, tmp_path)
    assert_one_line(result, says=["error: 1 migration(s) pending; run 'tenantry migrate'"])
    await _recorded_release(admin_conn, OLDER)  # and it says whose schema it is
    result = await asyncio.to_thread(run_command, "api", database_dsn, tmp_path)
    assert result.stderr.strip() == (
        "error: 1 migration(s) pending; run 'tenantry migrate' (the database's schema is "
        f"release {OLDER}'s, this is {__version__})")


async def test_migrate_refuses_a_database_of_a_newer_release(
    database_dsn: str, admin_conn: asyncpg.Connection, tmp_path: Path,
) -> None:
    """An older release's migrate would put back its own routines over the newer ones."""
    await admin_conn.execute("INSERT INTO schema_releases (release) VALUES ($1)", TOO_NEW)
    await admin_conn.execute("UPDATE schema_routines SET sha256 = 'newer' "
                             "WHERE name = 'claim_runs'")
    before = await admin_conn.fetch("SELECT * FROM schema_routines ORDER BY name")
    result = await asyncio.to_thread(run_command, "migrate", database_dsn, tmp_path)
    assert_one_line(result, says=[])
    assert result.stderr.strip() == (
        f"error: database is of a newer release than this code ({__version__}): release "
        f"{TOO_NEW} migrated it; run the newest release's 'tenantry migrate'")
    assert await admin_conn.fetch("SELECT * FROM schema_routines ORDER BY name") == before
