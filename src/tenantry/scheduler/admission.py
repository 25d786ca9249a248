"""Admission on ``POST /v1/runs`` (invariant 8): a run that cannot be durably represented
within the tenant's policy and the cell's capacity is refused with a typed answer — never
silently queued and hoped for. A tenant merely at its running ceiling is *queued*: the
fair claim serves it when a slot frees."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import BudgetExhausted, Overloaded, QuotaExceeded
from tenantry.ids import TenantId

Q = load(__package__)


async def admit(conn: Connection, tenant: TenantId) -> None:
    """Check the tenant's own limits, in the transaction that will insert the run (the row
    lock taken here makes ``max_queued`` exact under concurrent requests)."""
    row = await conn.fetchrow(Q.lock_for_admission, tenant.value)
    if row is None:  # a tenant always has a load row; be explicit if it ever does not
        raise QuotaExceeded("This tenant has no policy; ask the operator to set one.",
                            limit="max_queued", limit_value=0, current=0)
    if row["live"] >= row["max_queued"]:
        raise QuotaExceeded(
            f"This tenant has {row['live']} runs not yet ended, its limit is "
            f"{row['max_queued']}; start more when some have ended.",
            limit="max_queued", limit_value=row["max_queued"], current=row["live"],
        )
    cap = row["monthly_spend_cap_micros"]
    if cap is not None and row["month_spend_micros"] >= cap:
        raise BudgetExhausted(
            f"This tenant has spent {row['month_spend_micros']} of its monthly cap of "
            f"{cap} micro-dollars.",
            limit="monthly_spend_cap_micros", limit_value=cap,
            current=row["month_spend_micros"],
        )


@dataclass(slots=True)
class CellCapacity:
    """The whole cell's queue, as one API process sees it: read at most once a second (a
    soft limit does not need an exact count, and this keeps admission to one query)."""

    db: Database
    max_queued: int
    ttl_seconds: float = 1.0
    retry_after_seconds: int = 5
    _depth: int = 0
    _read_at: float = field(default=-1e9)

    async def refusal(self) -> Overloaded | None:
        """The error to answer new runs with while the cell's queue is full, else None."""
        now = time.monotonic()
        if now - self._read_at > self.ttl_seconds:
            async with self.db.unscoped() as conn:
                self._depth = int(await conn.fetchval(Q.queue_depth))
            self._read_at = now
        if self._depth < self.max_queued:
            return None
        return Overloaded(
                f"The platform has {self._depth} runs queued (its limit is "
                f"{self.max_queued}); retry later.",
                retry_after=self.retry_after_seconds, queued=self._depth,
                limit_value=self.max_queued,
            )
