"""Configuration: the ``Settings`` a process runs with, read once from ``TENANTRY_*``
variables (each declared once in :mod:`tenantry.config.variables`) and flags."""

from __future__ import annotations

from tenantry.config.settings import (
    ANY_REGION,
    CELL_NAME_RE,
    MAX_RETENTION_BATCH,
    Settings,
    default_data_dir,
    default_text,
)
from tenantry.config.variable import Parse, Variable
from tenantry.config.variables import VARIABLES, variable

__all__ = ["ANY_REGION", "CELL_NAME_RE", "MAX_RETENTION_BATCH", "VARIABLES", "Parse",
           "Settings", "Variable", "default_data_dir", "default_text", "variable"]
