"""Second walls (ADR 0011) attacked the way a tenant who got SQL into a pooled connection
would: leave the pool's role, become someone else, call the console's cross-tenant reads,
or point a model account's key at a server of their own. Each is refused by Postgres
itself, whatever the application code above it does."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

import asyncpg
import pytest

from tenantry.db import Database
from tenantry.db.roles import login_warnings
from tests.support.api import Api
from tests.support.db import console_login_dsn, login_dsn
from tests.support.harness import tenantry_command


async def _queued_run(api: Api, name: str) -> str:
    """A tenant with one queued run (no worker drives it); the tenant's id."""
    tenant, h = await api.tenant(name)
    agent = await api.agent(h)
    await api.start(h, agent, "secret plans of " + name)
    return tenant


async def test_leaving_the_pools_role_leaves_no_way_to_other_tenants(
    api: Api, db: Database, admin_conn: asyncpg.Connection,
) -> None:
    victim = await _queued_run(api, "Victim")
    assert await admin_conn.fetchval("SELECT count(*) FROM runs WHERE tenant_id = $1",
                                     victim) == 1
    async with db.unscoped() as conn:
        # RESET ROLE returns to the startup role (still under row-level security) ...
        await conn.execute("RESET ROLE")
        assert await conn.fetch("SELECT tenant_id, input FROM runs") == []
        # ... and SET ROLE NONE to the login itself, which owns nothing.
        await conn.execute("SET ROLE NONE")
        assert await conn.fetchval("SELECT rolsuper FROM pg_roles "
                                   "WHERE rolname = current_user") is False
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetch("SELECT tenant_id, input FROM runs")
    for becoming in ("SET ROLE postgres", "SET SESSION AUTHORIZATION postgres"):
        async with db.unscoped() as conn:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(becoming)


async def test_a_connection_that_left_the_role_is_handed_on_in_the_role_again(
    database_dsn: str,
) -> None:
    one = await Database.connect(login_dsn(database_dsn), min_size=1, max_size=1)
    try:
        async with one.unscoped() as conn:
            await conn.execute("SET ROLE NONE")
        async with one.unscoped() as conn:  # the same connection, released and reacquired
            assert await conn.fetchval("SELECT current_user") == "tenantry_app"
    finally:
        await one.close()


async def test_the_tenant_pool_cannot_call_the_consoles_cross_tenant_reads(
    api: Api, db: Database, database_dsn: str,
) -> None:
    await _queued_run(api, "Victim")
    async with db.unscoped() as conn:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetch("SELECT * FROM tenantry_console_runs(NULL, NULL, NULL, NULL, 50)")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetch("SELECT * FROM tenantry_console_tenants(NULL, 50)")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetch("SELECT * FROM tenantry_console_pending_approvals(NULL, 50)")
    async with db.unscoped() as conn:
        await conn.execute("SET ROLE NONE")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("SET ROLE tenantry_console")
    # The console's own login still reads every tenant's runs through them.
    console = await Database.connect(console_login_dsn(database_dsn), role="tenantry_console",
                                     min_size=1, max_size=1)
    try:
        async with console.unscoped() as conn:
            rows = await conn.fetch(
                "SELECT * FROM tenantry_console_runs(NULL, NULL, NULL, NULL, 50)")
            assert len(rows) == 1
            # ... and nothing else: no table, no becoming the application role.
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.fetch("SELECT input FROM runs")
            await conn.execute("SET ROLE NONE")
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute("SET ROLE tenantry_app")
    finally:
        await console.close()


# The definer functions the tenant pool's role may call: what workers and admission need to
# claim, renew, wake and sweep across tenants, and each answers only ids, counts or the
# caller's own rows. Every other cross-tenant read (the console's pages, the operator's
# lists and usage) is the console role's; a new definer function must be placed here
# knowingly, or granted to tenantry_console.
TENANT_POOL_DEFINERS = {
    "tenantry_authenticate", "tenantry_authenticate_v2", "tenantry_claim_runs",
    "tenantry_claim_runs_fifo", "tenantry_renew_leases", "tenantry_claim_webhooks",
    "tenantry_spent_webhooks", "tenantry_expired_approvals", "tenantry_wake_parked",
    # Deliveries to tenants' webhook endpoints, claimed as runs' own (ADR 0045).
    "tenantry_claim_endpoint_deliveries",
    "tenantry_sweep_reservations", "tenantry_queue_depth", "tenantry_scheduler_gauges",
    "tenantry_runs_by_status", "tenantry_usage_per_account_day",
    # Parked runs past their wake-up time, by plan: the alert on a waker that stopped.
    "tenantry_parked_overdue",
    # A worker loop registers its session lock (ADR 0018): its own row only; v2 with its
    # release (migration 0041). The first, 0.1.0's, answers only with the line saying the
    # database was contracted (contract step 0001; it reads schema_releases).
    "tenantry_register_worker", "tenantry_register_worker_v2",
    # The activity dispatcher's fair claim (ids and epochs only, like tenantry_claim_runs).
    "tenantry_claim_activities",
    # A batch's next task: that tenant's and version's only, ids and epochs (ADR 0014).
    "tenantry_claim_activity_next",
    # Retention's cleaner (ADR 0017): its lease, its fenced batches (terminal runs only,
    # never a live one), the blob outbox and its gauges (v2 with the blob bytes, issue 40;
    # the first kept for a release still calling it).
    "tenantry_take_cleanup_lease", "tenantry_cleanup_due", "tenantry_keep_cleanup_lease",
    "tenantry_retention_batch", "tenantry_retention_expire", "tenantry_claim_blob_deletions",
    "tenantry_blob_deleted", "tenantry_retention_gauges", "tenantry_retention_gauges_v2",
    # The workers' recheck of runs held by their tenant's spend cap (ADR 0035): like
    # tenantry_wake_parked, it moves runs between queued and waiting and answers a count.
    "tenantry_wake_spend_capped", "tenantry_hold_spend_capped",
    # Exports (ADR 0044): the exporter's claim across tenants (ids, epochs and the
    # attempt's archive ref only), and the cleaner's fenced deletion of expired exports.
    "tenantry_claim_export", "tenantry_expire_exports",
    # The tenant console (ADR 0043 §5-6): a sign-in link's hash -> a session of its user,
    # once; a session's hash -> its tenant, user and role. Nothing else of either table.
    "tenantry_app_sign_in", "tenantry_app_sign_in_oidc", "tenantry_app_session",
    # The operator tokens in force (ADR 0043 §9): a hash -> until when; the configured
    # token recorded at start; a rotation. Never a token, never the table.
    "tenantry_operator_token_valid", "tenantry_operator_token_seed",
    "tenantry_operator_token_rotate",
}


async def test_the_tenant_pool_may_call_only_the_definer_functions_workers_need(
    api: Api, db: Database,
) -> None:
    async with db.unscoped() as conn:
        callable_ = {r["proname"] for r in await conn.fetch(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'public' AND p.prosecdef "
            "AND p.prorettype <> 'trigger'::regtype "  # triggers cannot be called

            "AND has_function_privilege(p.oid, 'EXECUTE')")}
        assert callable_ == TENANT_POOL_DEFINERS
        # The operator's lists in particular: every tenant's name and every tenant's spend.
        await _queued_run(api, "Victim")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetch("SELECT * FROM tenantry_admin_tenants(NULL, 50)")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetch("SELECT * FROM tenantry_usage_per_tenant(now() - interval '1 day',"
                             " now())")


async def test_the_serving_logins_pass_the_start_up_check_and_a_superuser_does_not(
    database_dsn: str,
) -> None:
    for dsn, console in ((login_dsn(database_dsn), False),
                         (console_login_dsn(database_dsn), True)):
        conn = await asyncpg.connect(dsn)
        try:
            assert await login_warnings(conn, console=console) == []
        finally:
            await conn.close()
    conn = await asyncpg.connect(database_dsn)  # CI's trusted superuser: warned, not refused
    try:
        assert await login_warnings(conn) == ["the database login 'postgres' is a superuser"]
    finally:
        await conn.close()


async def _worker_log_until_started(dsn: str, data_dir: Path) -> list[str]:
    """Start a real `tenantry worker` on ``dsn``; its log lines up to `worker started`.
    One process: each of several would log in, and warn, on its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENANTRY_")}
    env.update(TENANTRY_DATA_DIR=str(data_dir), TENANTRY_DATABASE_URL=dsn,
               TENANTRY_SANDBOX_BACKEND="none", TENANTRY_LOG_FORMAT="text")
    proc = await asyncio.create_subprocess_exec(
        *tenantry_command(), "worker", "--processes", "1", env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    assert proc.stderr is not None
    lines: list[str] = []
    try:
        while not any("worker started" in line for line in lines):
            line = await asyncio.wait_for(proc.stderr.readline(), 60)
            assert line, f"the worker exited: {lines}"
            lines.append(line.decode())
    finally:
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
    return lines


async def test_a_worker_warns_loudly_when_it_logs_in_as_a_superuser(
    database_dsn: str, tmp_path: Path,
) -> None:
    warned = [line for line in await _worker_log_until_started(database_dsn, tmp_path)
              if "is a superuser" in line]
    assert len(warned) == 1 and "WARNING" in warned[0] and "tenantry_login" in warned[0]
    # As the login migration 0015 makes: it starts without a word about roles.
    quiet = await _worker_log_until_started(login_dsn(database_dsn), tmp_path)
    assert not [line for line in quiet if "database login" in line]


async def test_a_connection_left_inside_a_transaction_is_closed_not_reset_with_an_error(
    db: Database, caplog: pytest.LogCaptureFixture,
) -> None:
    """A task cancelled while its transaction ended (a second cancel at shutdown) leaves the
    connection in the transaction: asyncpg would log "Resetting connection with an active
    transaction" as an ERROR on release. It is closed instead (the server rolls it back)."""
    async with db.unscoped() as conn:
        await conn.execute("BEGIN")
        await conn.execute("SELECT set_config('tenantry.tenant_id', 'left-open', true)")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    async with db.unscoped() as conn:
        assert not conn.is_in_transaction()
        assert await conn.fetchval("SELECT current_setting('tenantry.tenant_id', true)") in (
            None, "")
