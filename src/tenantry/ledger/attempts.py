"""An activity attempt's billing fact (ADR 0016): what its sandbox used, priced per sandbox
second like a built-in tool call's sandbox time, written by the dispatcher in the same
fenced transaction as the ``ActivityAttempted`` it records (a lost lease writes none)."""

from __future__ import annotations

from dataclasses import dataclass

from asyncpg import Connection

from tenantry.db.queries import load
from tenantry.ids import AgentId, RunId, TenantId

Q = load(__package__)


@dataclass(frozen=True, slots=True)
class AttemptFact:
    seq: int  # its ActivityAttempted
    agent: AgentId  # the activity version's agent (ADR 0013)
    agent_version: int
    attempt: int
    activity: str
    activity_version: int
    backend: str
    sandbox_ms: int
    cpu_us: int | None  # None: the backend could not measure it
    peak_memory_bytes: int | None
    cost_micros: int
    price_version: str


async def record(conn: Connection, tenant: TenantId, task: RunId, fact: AttemptFact) -> None:
    """The fact, and its cost into the tenant's month spend: sandbox seconds count toward
    the spend cap whether a tool call or an attempt used them."""
    await conn.execute(Q.insert_activity_usage_fact, tenant.value, task.uuid, fact.seq,
                       fact.agent.uuid, fact.agent_version, fact.backend, fact.sandbox_ms,
                       fact.cost_micros, fact.price_version, fact.attempt, fact.activity,
                       fact.activity_version, fact.cpu_us, fact.peak_memory_bytes)
    if fact.cost_micros:
        await conn.execute(Q.add_sandbox_spend, tenant.value, fact.cost_micros)
