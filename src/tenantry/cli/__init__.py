"""The ``tenantry`` command: one module per command group, wired together in
:mod:`tenantry.cli.app` (the root imports the groups; no group imports the root). The flags
that set a setting, and their variables and help, come from the setting's one declaration
(:mod:`tenantry.config`) through :mod:`tenantry.cli.options`."""

from __future__ import annotations

from tenantry.cli.app import app, main

__all__ = ["app", "main"]
