"""The tenant's usage and cost this month (UTC), per agent, against the caps of its
policy: the month's spend against its spend cap, runs not yet ended against its queue
limit, runs holding a worker slot against its ceiling, its tokens per minute. Read with
what ``GET /v1/usage`` (the billing record) and the operator's ``…/policy`` read
(``ledger.usage``, ``scheduler.policy``): what the console shows is what decides whether
a run is admitted. For a role holding ``runs:read``, as ``GET /v1/usage`` is."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import APIRouter
from fastapi.responses import Response

from tenantry.api.tenant_console.view import RunsPage
from tenantry.ledger import usage
from tenantry.scheduler import policy

router = APIRouter()


@router.get("/usage")
async def usage_page(v: RunsPage) -> Response:
    tenant = v.member.tenant
    today = datetime.now(UTC).date()
    first = today.replace(day=1)
    start = datetime(first.year, first.month, first.day, tzinfo=UTC)
    end = datetime(today.year, today.month, today.day, tzinfo=UTC) + timedelta(days=1)
    total, agents = await usage.for_tenant(v.db, tenant, start, end, "agent")
    state = await policy.get_policy(v.db, tenant)
    return v.render("usage.html", title="Usage", first=first, today=today, total=total,
                    agents=agents, policy=state.policy, load=state.load, plan=state.plan)
