"""The one-line start-up errors (tenantry.db.reach) and the once-per-outage log
(tenantry.db.outage)."""

from __future__ import annotations

import asyncio
import logging

import asyncpg
import pytest

from tenantry.db.outage import Outage
from tenantry.db.reach import describe_failure, target

DSN = "postgresql://bob:s3cr3t-pw@db.example:6543/tenantry"


@pytest.mark.parametrize(("error", "says"), [
    (asyncpg.InvalidCatalogNameError('database "tenantry" does not exist'),
     ["has no database 'tenantry'", "createdb -h db.example -p 6543 -U bob tenantry"]),
    (asyncpg.InvalidPasswordError('password authentication failed for user "bob"'),
     ["refused the password of user 'bob'", "correct the password"]),
    (asyncpg.InvalidAuthorizationSpecificationError('no pg_hba.conf entry for host "1.2.3.4"'),
     ["refused user 'bob'", "no pg_hba.conf entry", "pg_hba.conf"]),
    (ConnectionRefusedError(111, "Connect call failed ('10.0.0.9', 6543)"),
     ["cannot reach", "connection refused", "is the server running"]),
    (TimeoutError(), ["cannot reach", "no answer within 5 s"]),
    (OSError("Multiple exceptions: [Errno 111] Connect call failed ('::1', 6543), "
             "[Errno 111] Connect call failed ('127.0.0.1', 6543)"),
     ["cannot reach", "Multiple exceptions"]),
    (asyncpg.CannotConnectNowError("the database system is starting up"),
     ["not accepting connections yet", "starting up"]),
    (asyncpg.TooManyConnectionsError("sorry, too many clients already"),
     ["no free connection slots", "TENANTRY_DB_POOL_MAX"]),
])
def test_each_failure_is_one_line_naming_where_and_what_to_do(
    error: Exception, says: list[str]
) -> None:
    line = describe_failure(DSN, error)
    assert "\n" not in line
    assert "db.example:6543" in line
    assert "s3cr3t-pw" not in line
    for text in says:
        assert text in line


def test_the_password_is_never_shown_even_if_the_server_echoes_it() -> None:
    line = describe_failure(DSN, asyncpg.PostgresError("rejected s3cr3t-pw\nDETAIL: more"))
    assert "s3cr3t-pw" not in line and "***" in line
    assert "\n" not in line


def test_targets_fill_in_libpq_defaults_and_unix_sockets() -> None:
    bare, full = target("postgresql://db.example/app"), target(
        "postgresql://postgres@db.example:5432/app")
    assert (bare.hosts, bare.database, bare.login) == (full.hosts, full.database, full.login)
    socket = target("postgresql://postgres@/postgres?host=/run/tenantry&port=5433")
    [host] = socket.hosts
    assert (host.name, host.port, socket.database) == ("/run/tenantry", 5433, "postgres")
    assert "Postgres at /run/tenantry " in describe_failure(
        "postgresql://postgres@/postgres?host=/run/tenantry", ConnectionRefusedError(111, "x"))
    assert target("postgresql://alice@h").database == "alice"  # libpq: database = user


def test_a_cells_failure_names_every_host() -> None:
    url = "postgresql://bob:pw@a.example:5432,b.example:5433/tenantry"
    line = describe_failure(url, asyncpg.exceptions.TargetServerAttributeNotMatched("x"))
    assert "a.example:5432, b.example:5433" in line and "read-write" not in line
    assert "standby or read-only" in line and "failover" in line
    line = describe_failure(url + "?target_session_attrs=read-write",
                            ConnectionRefusedError(111, "x"))
    assert "Postgres at a.example:5432, b.example:5433" in line


def test_an_outage_is_logged_when_it_starts_and_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    outage = Outage(clock=lambda: now[0])
    outage.answered()  # no outage yet: nothing to say
    with caplog.at_level(logging.DEBUG, logger="tenantry.db"):
        for where in ("claim", "lease renewal", "housekeeping", "claim", "event hub"):
            outage.failed(where, ConnectionRefusedError(111, "Connect call failed"))
            now[0] += 1.0
        assert outage.down
        outage.answered()
        outage.answered()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "database unavailable (claim): ConnectionRefusedError: [Errno 111] Connect call "
        "failed; retrying, and saying nothing more until it answers",
        "database answering again after 5.0 s (5 failed attempts)",
    ]
    assert all(r.exc_info is None for r in caplog.records)  # never a traceback
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 4
    assert not outage.down
    # A second outage is reported on its own.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tenantry.db"):
        outage.failed("claim", TimeoutError())
    assert [r.getMessage() for r in caplog.records] == [
        "database unavailable (claim): TimeoutError; retrying, and saying nothing more "
        "until it answers"]


def test_a_call_begun_before_the_outage_does_not_end_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """In a crash, a statement already running on another pooled connection can still
    succeed just after the first failure: that is no recovery, and must not be said as one
    (the next failure would then announce a second outage)."""
    now = [10.0]
    outage = Outage(clock=lambda: now[0])
    started_before = outage.now()
    now[0] += 0.5
    with caplog.at_level(logging.WARNING, logger="tenantry.db"):
        outage.failed("run step", ConnectionResetError("closed"))
        now[0] += 0.001
        outage.answered(started_before)
        assert outage.down
        outage.failed("claim", ConnectionResetError("closed"))
        now[0] += 3.0
        outage.answered(outage.now())
    assert [r.getMessage() for r in caplog.records] == [
        "database unavailable (run step): ConnectionResetError: closed; retrying, and saying "
        "nothing more until it answers",
        "database answering again after 3.0 s (2 failed attempts)",
    ]
    assert not outage.down


async def test_runs_waiting_out_an_outage_share_one_probe() -> None:
    """Fifty runs wait for the database: one probes at a time, all resume on its answer."""
    outage = Outage()
    outage.failed("run step", ConnectionRefusedError(111, "refused"))
    probes: list[str] = []

    async def probe() -> None:
        probes.append("probe")
        if len(probes) < 3:  # the database answers the third probe
            raise ConnectionRefusedError(111, "refused")
        outage.answered(outage.now())

    waits = [outage.until_back(probe, every=0.01, within=30, failures=(OSError,))
             for _ in range(50)]
    assert await asyncio.gather(*waits) == [True] * 50
    assert probes == ["probe"] * 3
    assert not outage.down


async def test_an_outage_longer_than_the_wait_gives_up() -> None:
    outage = Outage()
    outage.failed("run step", ConnectionRefusedError(111, "refused"))

    async def probe() -> None:
        raise ConnectionRefusedError(111, "still refused")

    assert await outage.until_back(probe, every=0.01, within=0.05, failures=(OSError,)) is False
    assert outage.down
