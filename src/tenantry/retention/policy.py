"""A tenant's retention policy, chosen by the operator (``PUT /admin/v1/tenants/{id}/
retention``). No row means the defaults below — the design's 30 days for runs, tombstones
and audit kept forever, blobs leaving with their run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import NotFound
from tenantry.ids import TenantId

Q = load(__package__)

NO_TENANT = "No tenant with this id."
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


async def get(db: Database, tenant: TenantId) -> RetentionPolicy:
    """The tenant's policy in force (the defaults when never set); NotFound for no tenant."""
    async with db.tenant_tx(tenant) as conn:
        if await conn.fetchrow(Q.tenant_state, tenant.value) is None:
            raise NotFound(NO_TENANT)
        return await read(conn, tenant)


async def put(db: Database, tenant: TenantId, *, runs_days: int,
              tombstones_days: int | None, blobs_follow_runs: bool) -> RetentionPolicy:
    """Replace the runs, tombstones and blobs parts; the audit part stays as it is (it has
    its own endpoint)."""
    return await _change(db, tenant, lambda p: replace(
        p, runs_days=runs_days, tombstones_days=tombstones_days,
        blobs_follow_runs=blobs_follow_runs))


async def put_audit(db: Database, tenant: TenantId, days: int | None) -> RetentionPolicy:
    """Replace the audit log's own retention (None: forever); the rest stays as it is."""
    return await _change(db, tenant, lambda p: replace(p, audit_days=days))


async def _change(db: Database, tenant: TenantId,
                  change: Callable[[RetentionPolicy], RetentionPolicy]) -> RetentionPolicy:
    async with db.tenant_tx(tenant) as conn:
        # The tenant's row lock serialises the two endpoints' read-modify-writes, so
        # neither undoes the other's part (there may be no policy row to lock yet).
        if await conn.fetchrow(Q.lock_tenant, tenant.value) is None:
            raise NotFound(NO_TENANT)
        return await write(conn, tenant, change(await read(conn, tenant)))
