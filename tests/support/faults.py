"""A platform fault on demand: a tool gateway whose every use raises, naming an internal
host (what must reach our log and never a tenant)."""

from __future__ import annotations

from typing import Any

from tenantry.agents.spec import AgentSpec
from tenantry.ids import TenantId
from tenantry.tools.gateway import ToolGateway

INTERNAL = "llm-gw-7.corp.internal:8443"


class BrokenTools(ToolGateway):
    """A platform fault: what our code raised names our database host."""

    async def definitions(self, tenant: TenantId, spec: AgentSpec) -> list[dict[str, Any]]:
        raise RuntimeError(f"could not connect to postgres://tenantry@{INTERNAL}/cell-eu-2")
