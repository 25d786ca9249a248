"""A tenant's policy: its share of contended slots, hard ceilings, and budgets.

Every tenant has one from the moment it is created (a database trigger writes the
defaults), so admission and the fair claim never meet a tenant without limits. Operators
change it with ``PUT /admin/v1/tenants/{id}/policy``; it applies to the next admission and
the next claim."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.errors import NotFound
from tenantry.ids import TenantId

Q = load(__package__)

DEFAULT_APPROVAL_TTL_SECONDS = 7 * 24 * 3600
#: As migration 0020's column default.
DEFAULT_ACTIVITY_SLOTS = 2


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    """``max_running``: runs holding a worker slot at once, a hard ceiling even when the
    tenant borrows idle slots (the library API calls it ``max_leases``). ``max_queued``: runs
    not yet ended — queued, running or waiting — beyond which new runs are refused (the
    library API calls it ``max_non_terminal``). ``weight``: its share when slots are
    contended. ``tokens_per_minute`` and ``monthly_spend_cap_micros``: None is no limit.
    ``max_activity_slots``: its activity attempts at once, across every dispatcher."""

    weight: int = 1
    max_running: int = 100
    max_queued: int = 10_000
    tokens_per_minute: int | None = None
    monthly_spend_cap_micros: int | None = None
    approval_ttl_seconds: int = DEFAULT_APPROVAL_TTL_SECONDS
    max_activity_slots: int = DEFAULT_ACTIVITY_SLOTS

    @property
    def max_leases(self) -> int:
        return self.max_running

    @property
    def max_non_terminal(self) -> int:
        return self.max_queued


@dataclass(frozen=True, slots=True)
class TenantLoad:
    """What the tenant holds now (projections kept by triggers, in Postgres)."""

    queued: int
    running: int
    waiting: int
    month_spend_micros: int  # settled this month plus reserved for calls in flight
    reserved_micros: int
    bucket_tokens: float | None  # tokens in its bucket now (None: no bucket)


@dataclass(frozen=True, slots=True)
class PolicyState:
    tenant: TenantId
    plan: str
    policy: TenantPolicy
    load: TenantLoad
    updated_at: datetime


async def get_policy(db: Database, tenant: TenantId) -> PolicyState:
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.get_policy, tenant.value)
        if row is None:
            raise NotFound("No tenant with this id.")
        load_row = await conn.fetchrow(Q.get_load, tenant.value)
    assert load_row is not None
    policy = TenantPolicy(
        weight=row["weight"], max_running=row["max_running"], max_queued=row["max_queued"],
        tokens_per_minute=row["tokens_per_minute"],
        monthly_spend_cap_micros=row["monthly_spend_cap_micros"],
        approval_ttl_seconds=row["approval_ttl_seconds"],
        max_activity_slots=row["max_activity_slots"],
    )
    bucket = load_row["bucket_tokens"]
    return PolicyState(
        tenant=tenant, plan=row["plan"], policy=policy, updated_at=row["updated_at"],
        load=TenantLoad(
            queued=load_row["queued"], running=load_row["running"],
            waiting=load_row["waiting"], month_spend_micros=load_row["month_spend_micros"],
            reserved_micros=load_row["reserved_micros"],
            bucket_tokens=None if bucket is None else float(bucket),
        ),
    )


async def set_policy(db: Database, tenant: TenantId, policy: TenantPolicy) -> PolicyState:
    async with db.tenant_tx(tenant) as conn:
        done = await conn.execute(
            Q.set_policy, tenant.value, policy.weight, policy.max_running, policy.max_queued,
            policy.tokens_per_minute, policy.monthly_spend_cap_micros,
            policy.max_activity_slots)
        if not done.endswith(" 1"):
            raise NotFound("No tenant with this id.")
        await conn.execute(Q.set_approval_ttl, tenant.value, policy.approval_ttl_seconds)
    return await get_policy(db, tenant)
