"""The dev-only convenience of ``tenantry up --demo``: a demo tenant and agent, and a fresh
API key each start."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from tenantry.agents import service as agents
from tenantry.agents.spec import AgentSpec, Limits
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.errors import Conflict
from tenantry.ids import AgentId, TenantId
from tenantry.tenants import service as tenants


@dataclass(frozen=True, slots=True)
class Demo:
    """What the start-up banner shows: the tenant, this start's API key, the agent."""

    tenant: TenantId
    api_key: str
    agent_id: AgentId


DEMO_TENANT = TenantId("demo")
DEMO_AGENT = "demo-agent"
DEMO_KEY_NAME = "tenantry up --demo"


async def ensure_demo(dsn: str, settings: Settings) -> Demo:
    """The demo tenant and agent (created once), and a fresh API key for this start."""
    db = await Database.connect(dsn, role=settings.db_role or None, min_size=1, max_size=2)
    try:
        with contextlib.suppress(Conflict):  # made by an earlier start
            await tenants.create_tenant(db, "Demo tenant", tenant_id=DEMO_TENANT)
        # One live demo key at a time: each start revokes the previous start's key.
        for previous in await tenants.list_api_keys(db, DEMO_TENANT):
            if previous.name == DEMO_KEY_NAME and previous.revoked_at is None:
                await tenants.revoke_api_key(db, DEMO_TENANT, previous.key_id)
        key = await tenants.issue_api_key(db, DEMO_TENANT, DEMO_KEY_NAME)
        existing = [a for a in await agents.list_agents(db, DEMO_TENANT, limit=200)
                    if a.name == DEMO_AGENT]
        if existing:
            agent_id = existing[0].agent_id
        else:
            spec = AgentSpec(
                model="scripted",
                system_prompt="You are the Tenantry demo agent. Answer briefly.",
                limits=Limits(max_steps=10, max_tokens=20_000, max_cost_micros=100_000),
            )
            agent_id = (await agents.create_agent(db, DEMO_TENANT, DEMO_AGENT, spec)).agent_id
        return Demo(DEMO_TENANT, key.api_key, agent_id)
    finally:
        await db.close()
