"""The operator console: server-rendered pages at ``/console`` (docs/how-to/console.md)."""

from __future__ import annotations

from tenantry.api.console.views import build_router

__all__ = ["build_router"]
