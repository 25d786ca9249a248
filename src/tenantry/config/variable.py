"""One configuration variable, declared once: its name, the setting it fills, how its text
is read, its flag and the flag's help, and its documentation. The settings loader, the
flags (:mod:`tenantry.cli.options`) and docs/reference/configuration.md all come from it."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tenantry.errors import ConfigurationError


class Parse(enum.Enum):
    """How a variable's text becomes its setting's value. Empty counts as unset, except
    for ``AS_IS``."""

    TEXT = "text"
    INTEGER = "integer"  # checked against ``minimum``
    PATH = "path"  # ``~`` expanded
    LOWER = "lower"  # a word, any case
    NAMES = "names"  # comma-separated
    SWITCH = "switch"  # true/1/yes or false/0/no
    ON_OFF = "on_off"
    AS_IS = "as_is"  # set but empty is a value too


@dataclass(frozen=True, slots=True)
class Variable:
    env: str
    #: What it does, for the configuration reference (Markdown, links relative to it).
    doc: str
    #: The ``Settings`` attribute it fills; ``None``: a command (or the tests) reads it.
    field: str | None = None
    parse: Parse = Parse.TEXT
    minimum: int | None = None
    #: The flag that sets it too (the flag wins), and the flag's one-line help.
    flag: str | None = None
    help: str | None = None
    #: How the default reads where it is not simply the setting's default value.
    default: str | None = None

    @property
    def label(self) -> str:
        """How an error names it: the variable, and the flag when there is one."""
        return f"{self.env} / {self.flag}" if self.flag else self.env


def read(variables: Iterable[Variable], env: Mapping[str, str]) -> dict[str, Any]:
    """The settings ``env`` sets, by field name; a value that cannot be read is refused."""
    values: dict[str, Any] = {}
    for variable in variables:
        if variable.field is None:
            continue
        raw = env.get(variable.env)
        if raw is None or (raw == "" and variable.parse is not Parse.AS_IS):
            continue
        values[variable.field] = _parse(variable, raw)
    return values


def _parse(variable: Variable, raw: str) -> Any:
    name = variable.env
    match variable.parse:
        case Parse.INTEGER:
            try:
                number = int(raw)
            except ValueError:
                raise ConfigurationError(f"{name} must be an integer, got {raw!r}") from None
            if variable.minimum is not None and number < variable.minimum:
                raise ConfigurationError(
                    f"{name} must be at least {variable.minimum}, got {number}")
            return number
        case Parse.PATH:
            return Path(raw).expanduser()
        case Parse.LOWER:
            return raw.lower()
        case Parse.NAMES:
            return tuple(part.strip() for part in raw.split(",") if part.strip())
        case Parse.SWITCH:
            if raw.lower() not in ("1", "true", "yes", "0", "false", "no"):
                raise ConfigurationError(f"{name} must be true or false")
            return raw.lower() in ("1", "true", "yes")
        case Parse.ON_OFF:
            if raw.lower() not in ("on", "off"):
                raise ConfigurationError(f"{name} must be on or off, got {raw!r}")
            return raw.lower() == "on"
    return raw
