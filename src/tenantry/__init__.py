"""Tenantry: a self-hostable platform that runs AI agents for other companies."""

from __future__ import annotations

__version__ = "0.3.0.dev0"

from tenantry.errors import TenantryError
from tenantry.ids import AgentId, ApprovalId, RunId, TenantId

__all__ = ["AgentId", "ApprovalId", "RunId", "TenantId", "TenantryError", "__version__"]
