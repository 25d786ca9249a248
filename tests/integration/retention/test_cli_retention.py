"""``tenantry retention run|erase`` and ``tenantry replay`` on a tombstoned run, as the
operator runs them: real subprocesses on the test's database."""

from __future__ import annotations

from pathlib import Path

import asyncpg

from tenantry.db import Database
from tenantry.retention import policy as policies
from tenantry.retention import tombstones
from tests.support.cli import cli
from tests.support.db import console_login_dsn
from tests.support.retention import ended_runs, tenant_and_agent


def _env(database_dsn: str, tmp_path: Path) -> dict[str, str]:
    return {"TENANTRY_DATABASE_URL": database_dsn, "TENANTRY_DATA_DIR": str(tmp_path),
            "TENANTRY_CONSOLE_DATABASE_URL": console_login_dsn(database_dsn)}


async def test_retention_run_deletes_one_tenants_old_runs_and_sums_up(
    db: Database, admin_conn: asyncpg.Connection, database_dsn: str, tmp_path: Path,
) -> None:
    seeded = await tenant_and_agent(db, "acme")
    other = await tenant_and_agent(db, "other")
    old = await ended_runs(admin_conn, seeded, 5, events=4, ended_days_ago=40)
    await ended_runs(admin_conn, other, 2, ended_days_ago=40)
    code, out, err = await cli("retention", "run", "--tenant", seeded.tenant.value,
                               "--batch", "2", env=_env(database_dsn, tmp_path))
    assert code == 0, err
    assert "1 tenant(s): 5 runs, 20 events, 0 blobs deleted; 0 tombstones expired" in out
    assert await admin_conn.fetchval("SELECT count(*) FROM runs WHERE tenant_id = $1",
                                     seeded.tenant.value) == 0
    assert await admin_conn.fetchval("SELECT count(*) FROM runs WHERE tenant_id = $1",
                                     other.tenant.value) == 2
    assert await tombstones.find(db, seeded.tenant, old[0]) is not None

    # replay of a tombstoned run: one clear line, exit 2, no traceback.
    code, out, err = await cli("replay", "--tenant", seeded.tenant.value, "--run",
                               str(old[0]), env=_env(database_dsn, tmp_path))
    assert code == 2, (out, err)
    assert "tombstoned" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


async def test_retention_policy_shows_the_defaults_then_what_the_operator_set(
    db: Database, database_dsn: str, tmp_path: Path,
) -> None:
    seeded = await tenant_and_agent(db, "acme")
    env = _env(database_dsn, tmp_path)
    code, out, err = await cli("retention", "policy", seeded.tenant.value, env=env)
    assert code == 0, err
    assert "runs kept:         30 days after they end" in out
    assert "tombstones kept:   forever" in out and "never (the defaults)" in out
    await policies.put(db, seeded.tenant, runs_days=7, tombstones_days=400,
                       blobs_follow_runs=False)
    code, out, err = await cli("retention", "policy", seeded.tenant.value, env=env)
    assert code == 0, err
    assert "runs kept:         7 days" in out and "tombstones kept:   400 days" in out
    assert "blobs follow runs: no" in out and "never" not in out
    code, _, err = await cli("retention", "policy", "nobody-here", env=env)
    assert code == 2 and "No tenant with this id." in err and "Traceback" not in err


async def test_retention_run_refuses_bad_input_in_one_line(
    database_dsn: str, tmp_path: Path,
) -> None:
    env = _env(database_dsn, tmp_path)
    for args, expected in [
        (("--tenant", "Not A Slug"), "tenant id"),
        (("--tenant", "nobody-here"), "No tenant with this id."),
        (("--batch", "0"), "--batch"),
    ]:
        code, _, err = await cli("retention", "run", *args, env=env)
        assert code == 2, (args, err)
        assert expected in err and "Traceback" not in err, err
    code, _, err = await cli("retention", "run", env={
        **env, "TENANTRY_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"})
    assert code == 2 and "cannot reach Postgres" in err and "Traceback" not in err


async def test_retention_erase_carries_the_erase_to_its_end(
    db: Database, admin_conn: asyncpg.Connection, database_dsn: str, tmp_path: Path,
) -> None:
    seeded = await tenant_and_agent(db, "leaving")
    await ended_runs(admin_conn, seeded, 3, ended_days_ago=1)
    code, out, err = await cli("retention", "erase", seeded.tenant.value, "--yes",
                               env=_env(database_dsn, tmp_path))
    assert code == 0, err
    assert f"erased {seeded.tenant.value}: 3 runs deleted" in out
    assert await admin_conn.fetchval("SELECT count(*) FROM runs") == 0
    assert await admin_conn.fetchval(
        "SELECT status FROM erase_jobs WHERE tenant_id = $1", seeded.tenant.value) == "done"
    assert await admin_conn.fetchval(
        "SELECT count(*) FROM tombstones WHERE reason = 'erase'") == 3
    code, _, err = await cli("retention", "erase", "nobody-here", "--yes",
                             env=_env(database_dsn, tmp_path))
    assert code == 2 and "No tenant with this id." in err
