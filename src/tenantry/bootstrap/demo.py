"""The dev-only convenience of ``tenantry up --demo``: a demo tenant, agent and API key.

The key is kept in the data dir (mode 0600, beside the operator token), so a restart on the
same data dir keeps the key a user pasted into their shell working; it is replaced (and the
banner says so) only when it no longer authenticates — revoked, or a fresh database."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Literal

from tenantry.agents import service as agents
from tenantry.agents.spec import AgentSpec, Limits
from tenantry.bootstrap.secrets import write_private
from tenantry.config import Settings
from tenantry.db import Database
from tenantry.errors import Conflict, Unauthorized
from tenantry.ids import AgentId, TenantId
from tenantry.tenants import service as tenants


@dataclass(frozen=True, slots=True)
class Demo:
    """What the start-up banner shows: the tenant, its API key, the agent. ``key_is``:
    ``new`` (first start), ``kept`` (the previous start's, still valid) or ``rotated``
    (the kept one no longer worked: this one replaces it)."""

    tenant: TenantId
    api_key: str
    agent_id: AgentId
    key_is: Literal["new", "kept", "rotated"] = "new"


DEMO_TENANT = TenantId("demo")
DEMO_AGENT = "demo-agent"
DEMO_KEY_NAME = "tenantry up --demo"
KEY_FILE = "demo_api_key"


async def ensure_demo(dsn: str, settings: Settings) -> Demo:
    """The demo tenant and agent (created once), and its API key (kept across starts)."""
    db = await Database.connect(dsn, role=settings.db_role or None, min_size=1, max_size=2)
    try:
        with contextlib.suppress(Conflict):  # made by an earlier start
            await tenants.create_tenant(db, "Demo tenant", tenant_id=DEMO_TENANT,
                                        region=settings.region, home_cell=settings.cell)
        api_key, key_is = await _demo_key(db, settings)
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
        return Demo(DEMO_TENANT, api_key, agent_id, key_is)
    finally:
        await db.close()


async def _demo_key(db: Database, settings: Settings) -> tuple[str, Literal["new", "kept",
                                                                            "rotated"]]:
    path = settings.data_dir / KEY_FILE
    kept = path.read_text().strip() if path.exists() else None
    if kept:
        with contextlib.suppress(Unauthorized):
            if (await tenants.authenticate(db, kept)).tenant == DEMO_TENANT:
                return kept, "kept"
    # One live demo key at a time: one this data dir no longer knows is revoked.
    for previous in await tenants.list_api_keys(db, DEMO_TENANT):
        if previous.name == DEMO_KEY_NAME and previous.revoked_at is None:
            await tenants.revoke_api_key(db, DEMO_TENANT, previous.key_id)
    key = await tenants.issue_api_key(db, DEMO_TENANT, tenants.NewKey(DEMO_KEY_NAME))
    write_private(path, key.api_key)
    return key.api_key, "rotated" if kept else "new"
