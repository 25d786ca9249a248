"""``python -m tenantry.cli``: the ``tenantry`` command."""

from __future__ import annotations

from tenantry.cli.app import main

main()
