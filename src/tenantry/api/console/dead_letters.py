"""What the activities page reads: dead-lettered activity tasks across tenants, newest
first, one bounded page at a time, through the console role's definer function (migration
0021) — the tenant pool cannot list them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.ids import RunId, TenantId

Q = load(__package__, "dead_letters.sql")

PAGE = 50


@dataclass(frozen=True, slots=True)
class DeadLetter:
    tenant: TenantId
    tenant_name: str
    plan: str
    task_id: RunId
    activity: str
    version: int
    message: str
    sandbox_deaths: int | None
    created_at: datetime
    dead_lettered_at: datetime


def _field(error: Any, name: str) -> Any:
    return error.get(name) if isinstance(error, dict) else None


async def dead_letters(db: Database, *, tenant: TenantId | None,
                       before: RunId | None) -> list[DeadLetter]:
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.dead_letters, tenant.value if tenant else None,
                                before.uuid if before else None, PAGE)
    return [DeadLetter(
        tenant=TenantId(r["tenant_id"]), tenant_name=r["tenant_name"], plan=r["plan"],
        task_id=RunId(r["run_id"]), activity=r["activity"], version=r["version"],
        message=str(_field(r["error"], "message") or ""),
        sandbox_deaths=_field(r["error"], "sandbox_deaths"),
        created_at=r["created_at"], dead_lettered_at=r["updated_at"]) for r in rows]
