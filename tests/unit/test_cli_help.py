"""Every command's help, as a user reads it: ``-h`` works as ``--help``, every option says
what it is for, flags are not labelled ``<bool>`` and unset options show their default."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from tenantry.cli import app

runner = CliRunner()


def _paths(group: TyperGroup, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, command in group.commands.items():
        if isinstance(command, TyperGroup):
            yield from _paths(command, (*path, name))
        else:
            yield (*path, name)


ROOT = typer.main.get_command(app)
assert isinstance(ROOT, TyperGroup)
PATHS = list(_paths(ROOT))


def _help(*args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "tenantry")
def test_h_is_help_and_flags_carry_no_type(path: tuple[str, ...]) -> None:
    text = _help(*path, "-h")
    assert text == _help(*path, "--help")
    assert "Usage: tenantry" in text and "<bool>" not in text


def test_every_option_and_argument_says_what_it_is_for() -> None:
    silent = []
    for path in PATHS:
        command = ROOT
        for name in path:
            command = command.commands[name]  # type: ignore[attr-defined]
        silent += [f"{' '.join(path)} {param.name}" for param in command.params
                   if not getattr(param, "help", None)]
    assert silent == []


def test_host_and_port_say_what_they_are_and_their_defaults() -> None:
    text = " ".join(_help("up", "-h").split())  # rich wraps lines inside the panel
    assert "--host <str> Address the API and the console listen on" in text
    assert "[default: (127.0.0.1)]" in text
    assert "--port <int> Port the API and the console listen on." in text
    assert "[default: (8080)]" in text
