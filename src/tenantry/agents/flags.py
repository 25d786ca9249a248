"""Agent versions flagged for review: a version whose sandboxes keep trying to
reach what its allow-list does not allow (internal or metadata addresses, hosts off the
list) is counted, and once the count reaches the operator's threshold
(``TENANTRY_EGRESS_FLAG_THRESHOLD``) flagged. The flag is information for the tenant and
the operator (the API's ``flagged_for_review``, the console): it stops nothing by itself,
since every attempt was already refused."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from tenantry.agents.service import Q
from tenantry.db import Connection, Database
from tenantry.ids import AgentId, TenantId

EGRESS_REFUSED = "egress_refused"


@dataclass(frozen=True, slots=True)
class ReviewFlag:
    reason: str
    since: datetime
    refused_egress: int

    def to_json(self) -> dict[str, object]:
        return {"reason": self.reason, "since": self.since.isoformat(),
                "refused_egress": self.refused_egress}


async def count_refused_egress(
    conn: Connection, tenant: TenantId, agent: AgentId, version: int, refused: int, *,
    threshold: int,
) -> ReviewFlag | None:
    """Add ``refused`` attempts to the version's count, inside the caller's transaction
    (the tool step's, under the run's lease); the flag if the version is now flagged."""
    row = await conn.fetchrow(Q.count_refused_egress, tenant.value, agent.uuid, version,
                              refused, threshold)
    return _flag(row)


async def version_flag(
    conn: Connection, tenant: TenantId, agent: AgentId, version: int
) -> ReviewFlag | None:
    return _flag(await conn.fetchrow(Q.version_flag, tenant.value, agent.uuid, version))


async def review_flag(
    db: Database, tenant: TenantId, agent: AgentId, version: int
) -> ReviewFlag | None:
    async with db.tenant_tx(tenant) as conn:
        return await version_flag(conn, tenant, agent, version)


def _flag(row: asyncpg.Record | None) -> ReviewFlag | None:
    if row is None or row["flagged_at"] is None:
        return None
    return ReviewFlag(row["reason"], row["flagged_at"], row["refused_egress"])
