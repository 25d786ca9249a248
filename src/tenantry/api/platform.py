"""What every request handler needs, built once by the app factory."""

from __future__ import annotations

from dataclasses import dataclass

from tenantry.config import Settings
from tenantry.db import Database
from tenantry.runs.hub import EventHub
from tenantry.tools.mcp_client import McpToolClient


@dataclass(slots=True)
class Platform:
    settings: Settings
    db: Database
    hub: EventHub
    mcp: McpToolClient
