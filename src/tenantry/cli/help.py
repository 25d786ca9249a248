"""The Typer app every ``tenantry`` command and sub-command is built on, so that help reads
the same everywhere: ``-h`` as well as ``--help``, and flags without a type label.

Typer 0.29's rich help prints each option's type beside it, flags included (``--demo
<bool>``, even ``--help <bool>``), though a flag takes no value; its plain help leaves the
type out. An empty metavar makes the rich help leave it out too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

F = TypeVar("F", bound=Callable[..., Any])

HELP_NAMES = {"help_option_names": ["-h", "--help"]}


class _FlagsUntyped:
    def format_help(self, ctx: Any, formatter: Any) -> None:
        # The help option is made on first use, so it is among get_params only now.
        for param in self.get_params(ctx):  # type: ignore[attr-defined]
            if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
                param.metavar = ""
        super().format_help(ctx, formatter)  # type: ignore[misc]


class Command(_FlagsUntyped, TyperCommand):
    pass


class Group(_FlagsUntyped, TyperGroup):
    pass


class App(typer.Typer):
    """A ``typer.Typer`` whose groups and commands take ``-h`` and list flags untyped."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", Group)
        kwargs.setdefault("context_settings", HELP_NAMES)
        kwargs.setdefault("no_args_is_help", True)
        kwargs.setdefault("rich_markup_mode", "markdown")
        super().__init__(**kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Callable[[F], F]:
        kwargs.setdefault("cls", Command)
        kwargs.setdefault("context_settings", HELP_NAMES)
        return super().command(*args, **kwargs)
