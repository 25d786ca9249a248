"""Admission on ``POST /v1/runs`` (invariant 8): a run that cannot be durably represented
within the tenant's policy and the cell's capacity is refused with a typed answer — never
silently queued and hoped for. A tenant merely at its running ceiling is *queued*: the
fair claim serves it when a slot frees."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tenantry.db import Connection
from tenantry.db.queries import load
from tenantry.errors import (
    AdmissionsPaused,
    BudgetExhausted,
    Overloaded,
    QuotaExceeded,
    TenantErased,
)
from tenantry.ids import TenantId
from tenantry.scheduler.shedding import CellLoad, ShedLevel

Q = load(__package__)


async def admit(conn: Connection, tenant: TenantId, *, child: bool = False) -> None:
    """Check the tenant's own limits, in the transaction that will insert the run (the row
    lock taken here makes ``max_queued`` exact under concurrent requests). ``child``: the
    task of an admitted run's tool call, which a pause of admissions lets through (the run
    was admitted before the pause and goes on, as shedding lets it)."""
    row = await conn.fetchrow(Q.lock_for_admission, tenant.value)
    if row is None:  # a tenant always has a load row; be explicit if it ever does not
        raise no_policy()
    if row["erased_at"] is not None:
        raise erased()
    if row["admissions_paused_at"] is not None and not child:
        raise paused(row["admissions_paused_at"])
    if row["live"] >= row["max_queued"]:
        raise quota_exceeded(row["live"], row["max_queued"])
    cap = row["monthly_spend_cap_micros"]
    if cap is not None and row["month_spend_micros"] >= cap:
        raise budget_exhausted(row["month_spend_micros"], cap)


# The refusals, one constructor each: admit() raises them, and so does the API's batched
# intake (tenantry.runs.intake), whose SQL function makes the same checks for many runs.

def erased() -> TenantErased:
    return TenantErased("This tenant is being erased: it admits no new runs or tasks.")


def paused(at: datetime) -> AdmissionsPaused:
    return AdmissionsPaused(
        "An operator paused this tenant's admissions: no new runs or tasks until they "
        "resume them; runs already admitted go on.", paused_at=at.isoformat())


def no_policy() -> QuotaExceeded:
    return QuotaExceeded("This tenant has no policy; ask the operator to set one.",
                         limit="max_queued", limit_value=0, current=0)


def quota_exceeded(live: int, max_queued: int) -> QuotaExceeded:
    return QuotaExceeded(
        f"This tenant has {live} runs not yet ended, its limit is {max_queued}; start more "
        "when some have ended.", limit="max_queued", limit_value=max_queued, current=live)


def budget_exhausted(spend: int, cap: int) -> BudgetExhausted:
    return BudgetExhausted(
        f"This tenant has spent {spend} of its monthly cap of {cap} micro-dollars.",
        limit="monthly_spend_cap_micros", limit_value=cap, current=spend)


@dataclass(slots=True)
class CellCapacity:
    """Admission's side of shedding (ADR 0008): past the cell's second level new batch runs
    are refused, past its third every new run. The refusal names what is shed, never how
    deep the cell's queue is (that is other tenants' business)."""

    load: CellLoad
    retry_after_seconds: int = 5

    async def refusal(self, priority: str) -> Overloaded | None:
        """The error to answer a new run of this priority with now, else None."""
        level = await self.load.level()
        if not level.refuses(priority):
            return None
        if level is ShedLevel.REFUSE_ALL:
            detail = ("The platform is overloaded: new runs are refused for now; runs "
                      "already accepted go on. Retry later.")
        else:
            detail = ("The platform is shedding load: new batch runs are refused for now "
                      "(interactive runs are still accepted). Retry later.")
        return Overloaded(
            detail, retry_after=self.retry_after_seconds, shed=list(level.shed_priorities),
            queued=self.load.depth, limit_value=self._threshold(level),
        )

    def _threshold(self, level: ShedLevel) -> int:
        t = self.load.thresholds
        return t.refuse_all_at if level is ShedLevel.REFUSE_ALL else t.refuse_batch_at
