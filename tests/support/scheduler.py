"""Tenants with runs waiting, for the scheduler's and the shedding tests."""

from __future__ import annotations

from tenantry.agents import service as agents
from tenantry.agents.spec import AgentSpec
from tenantry.db import Database
from tenantry.ids import TenantId
from tenantry.jsonutil import digest
from tenantry.runs import service as runs
from tenantry.scheduler import policy
from tenantry.scheduler.policy import TenantPolicy
from tenantry.tenants import service as tenants


async def tenant_with_runs(
    db: Database, name: str, runs_: int, pol: TenantPolicy | None = None,
) -> TenantId:
    tenant = (await tenants.create_tenant(db, name)).tenant.tenant_id
    if pol is not None:
        await policy.set_policy(db, tenant, pol)
    agent = (await agents.create_agent(db, tenant, "a", AgentSpec("scripted", ""))).agent_id
    for i in range(runs_):
        await runs.create_run(db, tenant, runs.RunRequest(
            agent, None, {"i": i}, None, "interactive", None, digest({"i": i})))
    return tenant
