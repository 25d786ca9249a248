"""The CLI's refusals say what to do in one line, exit status 2, and leave nothing behind:
a data dir with no database (a forgotten TENANTRY_DATA_DIR) is neither created nor left
with a Postgres running; an unknown tenant is named; a busy port is named; a platform that
answers 503 is said to be retried, on standard error."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tenantry.db.embedded import EmbeddedPostgres
from tenantry.models.loopback import LoopbackServer
from tests.support.cli import cli
from tests.support.db import login_dsn

# Commands that open the data dir's database (every other one goes the same way).
OPENING_THE_DATABASE = pytest.mark.parametrize(
    "command", [("replay", "--tenant", "acme"), ("retention", "policy", "acme")],
    ids=lambda c: c[0])


def _postgres_of(path: Path) -> list[int]:
    """The processes whose command line names ``path`` (a Postgres started for it)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(path) in line:
            found.append(int(proc.name))
    return found


@OPENING_THE_DATABASE
async def test_a_data_dir_without_a_database_is_refused_and_nothing_is_made(
    command: tuple[str, ...], tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    data = home / "data"  # XDG_DATA_HOME: the default data dir is data/tenantry
    code, out, err = await cli(*command, env={"HOME": str(home),
                                              "XDG_DATA_HOME": str(data)})
    assert (code, out) == (2, ""), err
    assert err.strip().splitlines() == [
        f"error: {data / 'tenantry'} holds no Tenantry database (is TENANTRY_DATA_DIR "
        "right? `tenantry up` or `tenantry migrate` makes one)"]
    assert not data.exists() and list(home.iterdir()) == []
    assert _postgres_of(home) == []


@OPENING_THE_DATABASE
async def test_a_database_never_migrated_is_refused_and_left_stopped(
    command: tuple[str, ...], tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    EmbeddedPostgres(data).start(create=True)  # a cluster, as an interrupted setup leaves it
    EmbeddedPostgres(data).stop()
    code, out, err = await cli(*command, env={"HOME": str(tmp_path),
                                              "TENANTRY_DATA_DIR": str(data)})
    assert (code, out) == (2, ""), err
    [line] = err.strip().splitlines()
    assert line.startswith("error: ") and "run 'tenantry migrate'" in line
    assert _postgres_of(data) == []


async def test_replay_names_a_tenant_that_does_not_exist(
    database_dsn: str, tmp_path: Path,
) -> None:
    code, out, err = await cli("replay", "--tenant", "nosuchtenant", env={
        "HOME": str(tmp_path), "TENANTRY_DATABASE_URL": login_dsn(database_dsn)})
    assert (code, out) == (2, "")
    assert err.strip().splitlines() == ["error: tenant nosuchtenant does not exist"]


async def test_a_busy_port_is_named(database_dsn: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = await cli("api", "--port", str(port), env={
            "HOME": str(tmp_path), "TENANTRY_DATA_DIR": str(tmp_path / "data"),
            "TENANTRY_DATABASE_URL": login_dsn(database_dsn)})
    assert code == 2, err
    assert err.strip().splitlines()[-1] == f"error: port {port} on 127.0.0.1 is in use"
    assert "Traceback" not in err and "database unreachable" not in err


class Unavailable:
    """A platform that answers every request 503 with a problem saying why."""

    def __init__(self) -> None:
        self.requests = 0
        self.server = LoopbackServer(Starlette(routes=[Route("/{path:path}", self.answer)]))

    async def answer(self, request: Request) -> JSONResponse:
        self.requests += 1
        return JSONResponse({"type": "about:blank", "title": "Unavailable", "status": 503,
                             "detail": "the database is failing over"}, status_code=503,
                            headers={"Retry-After": "0"},
                            media_type="application/problem+json")


@pytest.fixture
async def unavailable() -> AsyncIterator[Unavailable]:
    made = Unavailable()
    await made.server.start()
    yield made
    await made.server.stop()


async def test_a_503_is_said_to_be_retried_on_stderr(unavailable: Unavailable) -> None:
    code, out, err = await cli("api-keys", "list", "--json", env={
        "TENANTRY_URL": f"http://127.0.0.1:{unavailable.server.port}",
        "TENANTRY_API_KEY": "tk_test"})
    assert (code, out) == (2, "")  # --json's standard output stays clean
    notice, refusal = err.strip().splitlines()
    assert notice.startswith("the platform answered 503 (the database is failing over); "
                             "retrying for up to ") and notice.endswith(" s")
    assert refusal == "error: 503: the database is failing over"
    assert unavailable.requests > 1
