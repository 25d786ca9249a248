"""What every command shares: the one-line refusal (exit status 2), a platform error turned
into it, and the settings a command's flags override."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer

if TYPE_CHECKING:
    from tenantry.config import Settings

T = TypeVar("T")


def fail(message: str) -> NoReturn:
    typer.secho(f"error: {message}", fg="red", err=True)
    raise typer.Exit(2)


def run(command: Callable[[], T]) -> T:
    """``command``'s result; a refusal from it (a platform error) is its one line, exit 2."""
    from tenantry.errors import TenantryError

    try:
        return command()
    except TenantryError as exc:
        fail(exc.detail)


def settings(**overrides: Any) -> Settings:
    """The environment's settings with the flags given (``None``: not given) on top; an
    invalid value, from either, is one line and exit status 2."""
    from tenantry.config import Settings
    from tenantry.errors import ConfigurationError

    try:
        return Settings.from_env(**overrides)
    except ConfigurationError as exc:
        fail(exc.detail)
