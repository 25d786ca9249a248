"""``python -m tenantry``: the ``tenantry`` command."""

from __future__ import annotations

from tenantry.cli import main

main()
