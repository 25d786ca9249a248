"""Tenant policy (operator) and usage (tenant and operator): the scheduler's and the
ledger's faces in the API."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from tenantry.activities.tasks.store import MAX_ACTIVITY_SLOTS
from tenantry.api.admin import TENANT_NOT_FOUND
from tenantry.api.auth import PlatformDep, RunsReader, operator
from tenantry.api.fields import Body
from tenantry.api.params import parse_or_404
from tenantry.errors import ValidationFailed
from tenantry.ids import TenantId
from tenantry.ledger import usage
from tenantry.ledger.prices import PriceBook
from tenantry.scheduler import policy
from tenantry.scheduler.policy import DEFAULT_ACTIVITY_SLOTS, TenantPolicy

admin_router = APIRouter(prefix="/admin/v1", tags=["operator"],
                         dependencies=[Depends(operator)])
router = APIRouter(prefix="/v1", tags=["usage"])


class PolicyIn(Body):
    """The whole policy; fields left out take their defaults."""

    weight: int = Field(default=1, ge=1, le=1000,
                        description="Share of contended worker slots relative to others.")
    max_running: int = Field(default=100, ge=1, le=100_000,
                             description="Runs holding a worker slot at once: a hard "
                                         "ceiling, even when borrowing idle slots.")
    max_queued: int = Field(default=10_000, ge=1, le=10_000_000,
                            description="Runs not yet ended (queued, running, waiting); "
                                        "more are refused with 429 quota_exceeded.")
    tokens_per_minute: int | None = Field(default=None, ge=1, le=10**12,
                                          description="Model tokens per minute; null: "
                                                      "unlimited.")
    monthly_spend_cap_micros: int | None = Field(default=None, ge=0, le=10**15,
                                                 description="Model spend per calendar "
                                                             "month (UTC); null: none.")
    approval_ttl_seconds: int = Field(default=7 * 24 * 3600, ge=60, le=90 * 24 * 3600,
                                      description="How long an approval waits for a "
                                                  "decision.")
    max_activity_slots: int = Field(default=DEFAULT_ACTIVITY_SLOTS, ge=1,
                                    le=MAX_ACTIVITY_SLOTS,
                                    description="Activity attempts running at once, across "
                                                "every dispatcher.")


class LoadOut(BaseModel):
    queued: int
    running: int
    waiting: int
    month_spend_micros: int = Field(description="Settled this month plus reserved for "
                                                "calls in flight.")
    reserved_micros: int
    bucket_tokens: float | None


class PolicyOut(PolicyIn):
    tenant_id: str
    plan: str
    load: LoadOut
    updated_at: datetime


def _policy_out(state: policy.PolicyState) -> PolicyOut:
    p, load = state.policy, state.load
    return PolicyOut(
        tenant_id=state.tenant.value, plan=state.plan, updated_at=state.updated_at,
        weight=p.weight, max_running=p.max_running, max_queued=p.max_queued,
        tokens_per_minute=p.tokens_per_minute,
        monthly_spend_cap_micros=p.monthly_spend_cap_micros,
        approval_ttl_seconds=p.approval_ttl_seconds, max_activity_slots=p.max_activity_slots,
        load=LoadOut(queued=load.queued, running=load.running, waiting=load.waiting,
                     month_spend_micros=load.month_spend_micros,
                     reserved_micros=load.reserved_micros, bucket_tokens=load.bucket_tokens),
    )


@admin_router.put("/tenants/{tenant_id}/policy", response_model=PolicyOut)
async def put_policy(tenant_id: str, body: PolicyIn, p: PlatformDep) -> PolicyOut:
    """Replace the tenant's policy. It applies to the next admission and the next claim;
    runs already admitted are not refused retroactively."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    new = TenantPolicy(**body.model_dump())
    return _policy_out(await policy.set_policy(p.db, tenant, new))


@admin_router.get("/tenants/{tenant_id}/policy", response_model=PolicyOut)
async def get_policy(tenant_id: str, p: PlatformDep) -> PolicyOut:
    """The tenant's policy and what it holds now: runs by state, this month's spend, its
    token bucket."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    return _policy_out(await policy.get_policy(p.db, tenant))


class ActivityUsage(BaseModel):
    """Activity attempts' part of the sandbox facts (ADR 0016): one fact per attempt that
    ran, failed and killed ones included, measured by the host from the sandbox's cgroup
    (or QEMU's own process)."""

    attempts: int
    sandbox_ms: int = Field(description="Sandbox time the attempts were billed for (part of "
                                        "sandbox_ms above).")
    cpu_seconds: float | None = Field(description="CPU time (user + system) of the attempts' "
                                                  "sandboxes, summed; null: no attempt here "
                                                  "had it measured.")
    peak_memory_bytes: int | None = Field(description="The highest memory any one attempt's "
                                                      "sandbox had charged (its whole "
                                                      "sandbox: for a microVM, guest RAM it "
                                                      "touched and QEMU's own); null: none "
                                                      "measured.")
    cost_micros: int = Field(description="What their sandbox time cost (part of "
                                         "sandbox_cost_micros above).")


class SandboxPriceOut(BaseModel):
    per_second_micros: int = Field(description="Micro-dollars per sandbox second, in force "
                                               "now (sandbox time is billed by the "
                                               "millisecond, rounded up).")
    version: str = Field(description="The price's identity, as each fact records it.")


class OwnAccountUsage(BaseModel):
    """The part of the model calls above that went through the tenant's own provider
    accounts (bring your own key: `/v1/model-accounts`); the rest went through the
    platform's. Budgets and prices apply to both alike."""

    calls: int
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    cost_micros: int


class UsageRow(BaseModel):
    key: str = Field(description="The agent id or the day (YYYY-MM-DD, UTC).")
    runs: int
    calls: int
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    cost_micros: int = Field(description="What the model calls cost (micro-dollars).")
    sandbox_ms: int = Field(description="Time built-in tool calls and activity attempts "
                                        "spent in sandboxes (billed per sandbox second).")
    sandbox_cost_micros: int = Field(description="What that sandbox time cost, at the "
                                                 "sandbox price in force at each call or "
                                                 "attempt; spend is cost_micros + this.")
    activities: ActivityUsage
    own_accounts: OwnAccountUsage = Field(description="Of the model calls, those through "
                                                      "the tenant's own accounts.")


class UsageOut(BaseModel):
    tenant_id: str
    from_: date = Field(alias="from")
    to: date
    group_by: str | None
    total: UsageRow
    groups: list[UsageRow]
    sandbox_price: SandboxPriceOut

    model_config = ConfigDict(populate_by_name=True)


def _window(from_: date | None, to: date | None) -> tuple[date, date, datetime, datetime]:
    today = datetime.now(UTC).date()
    start = from_ or today.replace(day=1)
    end = to or today
    if end < start:
        raise ValidationFailed("to: must not be before from")
    if end >= date.max:  # the window ends the day after `to`
        raise ValidationFailed(f"to: must be before {date.max.isoformat()}")
    if (end - start).days > 366:
        raise ValidationFailed("from/to: at most 366 days at a time")
    lo = datetime(start.year, start.month, start.day, tzinfo=UTC)
    hi = datetime(end.year, end.month, end.day, tzinfo=UTC) + timedelta(days=1)
    return start, end, lo, hi


@router.get("/usage", response_model=UsageOut, response_model_by_alias=True)
async def get_usage(
    tenant: RunsReader, p: PlatformDep,
    from_: date | None = Query(None, alias="from", description="First day (UTC), inclusive; "
                                                               "default: the 1st of this month."),
    to: date | None = Query(None, description="Last day (UTC), inclusive; default: today."),
    group_by: Literal["agent", "day"] | None = Query(None),
) -> UsageOut:
    """Usage and cost from the billing record: one fact per model reply, per built-in tool
    call that used a sandbox and per activity attempt; and the sandbox price now."""
    start, end, lo, hi = _window(from_, to)
    total, groups = await usage.for_tenant(p.db, tenant, lo, hi, group_by)
    quote = await PriceBook(p.db).sandbox()
    return UsageOut(tenant_id=tenant.value, from_=start, to=end, group_by=group_by,
                    total=UsageRow(key="total", **total),
                    groups=[UsageRow(**g) for g in groups],
                    sandbox_price=SandboxPriceOut(
                        per_second_micros=quote.price.per_second_micros,
                        version=quote.version))


class TenantUsageRow(UsageRow):
    tenant_id: str


@admin_router.get("/usage", response_model=list[TenantUsageRow])
async def get_all_usage(
    p: PlatformDep, from_: date | None = Query(None, alias="from"), to: date | None = Query(None),
) -> list[TenantUsageRow]:
    """Totals per tenant for the window (default: this month)."""
    _, _, lo, hi = _window(from_, to)
    return [TenantUsageRow(**row) for row in await usage.per_tenant(p.cross_tenant_db, lo, hi)]
