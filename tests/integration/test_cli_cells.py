"""`tenantry cells add` and `tenantry cells list` on a real directory database, and their
one-line refusals (a bad flag, a cell that exists, no directory)."""

from __future__ import annotations

import asyncpg

from tenantry.cells import directory
from tests.support.cells import directory_database
from tests.support.cli import cli, cli_on_terminal
from tests.support.db import dsn_for


async def test_cells_add_and_list(admin_dsn: str) -> None:
    async with directory_database(admin_dsn) as dsn:
        env = {"TENANTRY_DIRECTORY_URL": dsn, "TENANTRY_CELL_OPERATOR_TOKEN": "cell-secret"}
        code, out, err = await cli("cells", "add", "eu-1", "--region", "eu", "--api-url",
                                   "http://10.0.0.5:8080", env=env)
        assert code == 0, err
        assert "cell eu-1 added: region eu, http://10.0.0.5:8080" in out
        code, out, err = await cli("cells", "add", "big-1", "--region", "us", "--api-url",
                                   "https://big.example.com/", "--dedicated", env=env)
        assert code == 0, err
        code, out, err = await cli("cells", "list", env=env)
        assert code == 0, err
        assert "eu-1" in out and "big-1" in out and "yes" in out and "cell-secret" not in out
        conn = await asyncpg.connect(dsn)
        try:
            cell = await directory.cell_named(conn, "big-1")
            assert cell is not None and cell.api_url == "https://big.example.com"
            assert cell.dedicated and cell.operator_token == "cell-secret"
            assert await directory.cell_named(conn, "nope") is None
        finally:
            await conn.close()

        for argv, says in [
            (("eu-1", "--region", "eu", "--api-url", "http://x:1"), "exists already"),
            (("EU", "--region", "eu", "--api-url", "http://x:1"), "cell: 1-64 characters"),
            (("eu-2", "--region", "e u", "--api-url", "http://x:1"), "region: 1-64"),
            (("eu-2", "--region", "eu", "--api-url", "ftp://x"), "api_url must look like"),
            (("eu-2", "--region", "eu", "--api-url", "http://x/path"), "api_url must look"),
        ]:
            code, out, err = await cli("cells", "add", *argv, env=env)
            assert code == 2 and says in err and "Traceback" not in err, (argv, err)
            assert len(err.strip().splitlines()) == 1, err


async def test_cells_without_a_directory_is_one_line(admin_dsn: str) -> None:
    code, _, err = await cli("cells", "list", env={})
    assert code == 2 and "TENANTRY_DIRECTORY_URL" in err and "Traceback" not in err
    missing = dsn_for(admin_dsn, "tenantry_no_such_directory")
    code, _, err = await cli("cells", "list", env={"TENANTRY_DIRECTORY_URL": missing})
    assert code == 2 and "has no database 'tenantry_no_such_directory'" in err
    assert "--directory-url / TENANTRY_DIRECTORY_URL" in err and "Traceback" not in err


async def test_cells_move_refusals_are_one_line_and_change_nothing(admin_dsn: str) -> None:
    async with directory_database(admin_dsn) as dsn:
        env = {"TENANTRY_DIRECTORY_URL": dsn, "TENANTRY_CELL_OPERATOR_TOKEN": "t"}
        for name, region in (("eu-1", "eu"), ("eu-2", "eu"), ("us-1", "us")):
            code, _, err = await cli("cells", "add", name, "--region", region, "--api-url",
                                     "http://10.0.0.5:8080", "--database-url",
                                     f"postgresql://u@10.0.0.5/{name}", env=env)
            assert code == 0, err
        conn = await asyncpg.connect(dsn)
        try:
            await directory.record_tenant(conn, "acme", region="eu", cell="eu-1")
        finally:
            await conn.close()
        for argv, says in [
            (("acme", "--to", "mars-1"), "No cell named 'mars-1'"),
            (("acme", "--to", "eu-1"), "already lives in cell 'eu-1'"),
            (("acme", "--to", "us-1"), "serves region 'us'"),
            (("nobody", "--to", "eu-2"), "No tenant 'nobody'"),
            (("acme",), "give TENANT --to CELL"),
            (("--resume", "not-a-uuid"), "is not a move id"),
            (("--resume", "0193a8c4-0000-7000-8000-000000000000"), "No move"),
        ]:
            code, _, err = await cli("cells", "move", *argv, env=env)
            assert code == 2 and says in err and "Traceback" not in err, (argv, err)
            assert len(err.strip().splitlines()) == 1, err
        code, out, err = await cli("cells", "add", "eu-3", "--region", "eu", "--api-url",
                                   "http://x:1", "--database-url", "mysql://x", env=env)
        assert code == 2 and "postgresql:// URL" in err, err
        code, out, err = await cli("cells", "moves", env=env)
        assert code == 0 and "no moves yet" in out, err


async def test_cells_tables_fit_80_and_120_columns_with_names_whole(admin_dsn: str) -> None:
    """`cells list` and `cells moves` print through the CLI's one table printer: a cell's
    name (what `cells move --to` takes) whole on one line, no line wider than the terminal."""
    async with directory_database(admin_dsn) as dsn:
        env = {"TENANTRY_DIRECTORY_URL": dsn, "TENANTRY_CELL_OPERATOR_TOKEN": "t"}
        name = "europe-west-frankfurt-dedicated-cell-for-big-tenants-1"
        code, _, err = await cli("cells", "add", name, "--region", "eu", "--api-url",
                                 "https://cell-1.eu.tenantry.example.com:8443", env=env)
        assert code == 0, err
        for width in (80, 120):
            for command in (("cells", "list"), ("cells", "moves")):
                code, shown = await cli_on_terminal(*command, env=env, columns=width)
                where = f"`tenantry {' '.join(command)}` at {width} columns:\n{shown}"
                assert code == 0, where
                assert all(len(line) <= width for line in shown.splitlines()), where
            code, shown = await cli_on_terminal("cells", "list", env=env, columns=width)
            assert any(name in line for line in shown.splitlines()), shown
