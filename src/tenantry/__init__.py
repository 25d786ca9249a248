"""Tenantry: a self-hostable platform that runs AI agents for other companies."""

from __future__ import annotations

__version__ = "0.1.0"

from tenantry.errors import TenantryError  # noqa: E402
from tenantry.ids import AgentId, ApprovalId, RunId, TenantId  # noqa: E402

__all__ = ["AgentId", "ApprovalId", "RunId", "TenantId", "TenantryError", "__version__"]
