"""Every ``TENANTRY_*`` variable, each declared once (:class:`~tenantry.config.variable.
Variable`), in the order the configuration reference lists them."""

from __future__ import annotations

from tenantry.config.variable import Variable
from tenantry.config.variables.engine import ENGINE
from tenantry.config.variables.platform import PLATFORM
from tenantry.config.variables.sandbox import SANDBOX

VARIABLES: tuple[Variable, ...] = (*PLATFORM, *ENGINE, *SANDBOX)

_BY_NAME = {variable.env: variable for variable in VARIABLES}


def variable(env: str) -> Variable:
    """The declaration of ``env`` (a KeyError names an undeclared one)."""
    return _BY_NAME[env]
