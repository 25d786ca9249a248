"""A tenant's retention policy, chosen by the operator (``PUT /admin/v1/tenants/{id}/
retention``). No row means the defaults below — the design's 30 days for runs, tombstones
and audit kept forever, blobs leaving with their run."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tenantry.db import Connection
from tenantry.db.queries import load
from tenantry.ids import TenantId

Q = load(__package__)

DEFAULT_RUNS_DAYS = 30
#: The longest any retention may be (100 years); past it a value is a mistake, not a policy.
MAX_DAYS = 36500


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    #: Days a terminal run or task is kept after it ended (0: deleted at the next pass).
    runs_days: int = DEFAULT_RUNS_DAYS
    #: Days a tombstone is kept after its run was deleted (None: forever).
    tombstones_days: int | None = None
    #: Days an audit row is kept (None: forever). Its own policy, set through its own
    #: endpoint: audit evidence outlives the runs it is about (ADR 0017).
    audit_days: int | None = None
    #: The run's blobs (tool outputs, sandbox saves) are deleted with it.
    blobs_follow_runs: bool = True
    #: When the operator last set it (None: the defaults were never changed).
    updated_at: datetime | None = None


async def read(conn: Connection, tenant: TenantId) -> RetentionPolicy:
    row = await conn.fetchrow(Q.policy, tenant.value)
    return RetentionPolicy() if row is None else _from_row(row)


async def write(conn: Connection, tenant: TenantId, policy: RetentionPolicy) -> RetentionPolicy:
    """Store the whole policy (the caller has validated its ranges)."""
    row = await conn.fetchrow(Q.put_policy, tenant.value, policy.runs_days,
                              policy.tombstones_days, policy.audit_days,
                              policy.blobs_follow_runs)
    assert row is not None
    return _from_row(row)


def _from_row(row: Any) -> RetentionPolicy:
    return RetentionPolicy(runs_days=row["runs_days"], tombstones_days=row["tombstones_days"],
                           audit_days=row["audit_days"],
                           blobs_follow_runs=row["blobs_follow_runs"],
                           updated_at=row["updated_at"])
