"""The shared table printer at any width: ids whole on one line, nothing wider than the
terminal, for tables that declare nothing (plain header and rows, as a new command gives
them); counts plain into a pipe; a value's brackets shown as they are."""

from __future__ import annotations

import re

import pytest

from tenantry.cli.remote import show_table
from tenantry.cli.tables import Cell

RUN, ENDPOINT = "run_01a25328dc9372fda5aee59c92071d88", "whe_01a25328dc1678ab9d2bffcf1ee906d5"
TENANT = "ten_agrfgjthmv4u7kn2kbdpylqkha"
TABLES: dict[str, tuple[list[str], list[list[Cell]]]] = {
    "a list of tenants": (["tenant_id", "name", "region", "cells", "created (UTC)"],
                          [[TENANT, "Acme Corporation Europe", "eu-west", 2,
                            "2026-12-08T01:02:15"]]),
    "a history": (["at (UTC)", "run", "endpoint", "url", "attempt", "outcome", "status",
                   "error"],
                  [["2026-12-08T00:59:07", RUN, ENDPOINT, "http://127.0.0.1:38499/v1/hook",
                    "5", "retrying", "404", "HTTP 404 " * 8]]),
    "fields": (["field", "value"], [["export_id", RUN], ["url", "https://example.com/" +
                                                         "very/long/path/" * 8]]),
}
ESCAPES = re.compile(r"\x1b\[[0-9;]*m")


@pytest.mark.parametrize("width", [40, 60, 80, 120, 200])
@pytest.mark.parametrize("name", list(TABLES))
def test_ids_are_whole_and_tables_fit_at_any_width(
    name: str, width: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich prints as on a terminal
    monkeypatch.setenv("COLUMNS", str(width))
    header, rows = TABLES[name]
    show_table(header, rows)
    lines = ESCAPES.sub("", capsys.readouterr().out).splitlines()
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    for cell in {str(c) for row in rows for c in row} & {RUN, ENDPOINT, TENANT}:
        assert any(cell in line for line in lines), f"{cell} not whole:\n" + "\n".join(lines)


def test_counts_are_plain_in_a_pipe_and_grouped_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    show_table(["day", "input tokens"], [["2026-12-08", 1234567]])
    assert capsys.readouterr().out == "day\tinput tokens\n2026-12-08\t1234567\n"
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("COLUMNS", "80")
    show_table(["day", "input tokens", "note"], [["2026-12-08", 1234567, "[red]as is[/red]"]])
    shown = ESCAPES.sub("", capsys.readouterr().out)
    assert "1,234,567" in shown and "[red]as is[/red]" in shown
