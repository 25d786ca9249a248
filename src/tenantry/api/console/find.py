"""What the console's search reads, and the names it shows beside tenant and agent ids.

Until a console-role function searches across tenants (docs/decisions/pending-0025-search.sql),
a search walks the tenants through the operator list (bounded: `SCANNED_TENANTS`) and asks
each, in its own transaction, for the run, task, idempotency key or agents the query can
be: one statement per tenant on one connection, never one per row."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

import asyncpg

from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.ids import AgentId, RunId, TenantId

Q = load(__package__, "find.sql")

MAX_QUERY = 255  # the longest idempotency key; anything longer can match nothing
EACH = 20  # results shown per kind
TENANTS_PAGE = 200  # tenantry_admin_tenants' own cap
SCANNED_TENANTS = 2000  # a search reads at most this many tenants (by id) and says so


@dataclass(frozen=True, slots=True)
class Names:
    """Tenant and agent names by id, for the ids a page shows; None when not known (an
    agent deleted, a tenant erased): the page shows the id alone then."""

    tenants: dict[str, str] = field(default_factory=dict)
    agents: dict[tuple[str, UUID], str] = field(default_factory=dict)

    def tenant(self, tenant: TenantId | str) -> str | None:
        return self.tenants.get(str(tenant))

    def agent(self, tenant: TenantId | str, agent: AgentId) -> str | None:
        return self.agents.get((str(tenant), agent.uuid))


async def in_tenant(conn: Connection, tenant: str, query: str,
                     *args: object) -> list[asyncpg.Record]:
    """``query`` in ``tenant``'s transaction on ``conn`` (as Database.tenant_tx does)."""
    async with conn.transaction():
        await conn.execute("SELECT set_config('tenantry.tenant_id', $1, true)", tenant)
        return await conn.fetch(query, tenant, *args)


async def names_of(db: Database,
                   wanted: Iterable[tuple[TenantId, AgentId | None]]) -> Names:
    """The names of the tenants and agents in ``wanted``: one statement per distinct tenant
    (a page shows at most a page of them), all on one connection."""
    by_tenant: dict[str, set[UUID]] = {}
    for tenant, agent in wanted:
        agents = by_tenant.setdefault(tenant.value, set())
        if agent is not None:
            agents.add(agent.uuid)
    names = Names()
    if not by_tenant:
        return names
    async with db.unscoped() as conn:
        for tenant_id, uuids in by_tenant.items():
            for r in await in_tenant(conn, tenant_id, Q.names_in_tenant, list(uuids)):
                if r["agent_id"] is None:
                    names.tenants[tenant_id] = r["name"]
                else:
                    names.agents[(tenant_id, r["agent_id"])] = r["name"]
    return names


@dataclass(frozen=True, slots=True)
class Hit:
    kind: str  # tenant, run, task, key, agent
    tenant: TenantId
    tenant_name: str
    id: str  # the run's, task's or agent's id; the tenant's for a tenant
    label: str | None = None  # the key, or the agent's name
    agent_id: AgentId | None = None
    agent_name: str | None = None
    status: str | None = None
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Found:
    hits: dict[str, list[Hit]]  # by kind, each at most EACH
    scanned: int  # tenants read
    more_tenants: bool  # the cell has more tenants than a search reads

    @property
    def empty(self) -> bool:
        return not any(self.hits.values())


KINDS = ("tenant", "run", "task", "key", "agent")


def problem(text: str) -> str | None:
    """Why ``text`` can match nothing (shown as a note), or None when it may."""
    if len(text) > MAX_QUERY:
        return f"The query is longer than {MAX_QUERY} characters, so nothing can match it."
    if not text.isprintable():
        return "The query holds control characters (or a NUL), so nothing can match it."
    return None


def _parsed(kind: type[RunId] | type[AgentId], text: str) -> UUID | None:
    try:
        return kind.parse(text).uuid
    except ValueError:
        return None


async def search(console_db: Database, db: Database, text: str) -> Found:
    """Every tenant whose id or name starts with ``text`` (case-insensitive), the run or
    task with that id, the runs with that idempotency key, and the agents with that id or
    whose name starts with it; ``text`` is stripped and passed through `problem` first."""
    hits: dict[str, list[Hit]] = {kind: [] for kind in KINDS}
    lowered = text.lower()
    run, agent = _parsed(RunId, text), _parsed(AgentId, text)
    tenants: list[tuple[str, str]] = []
    after: str | None = None
    async with console_db.unscoped() as conn:
        while len(tenants) < SCANNED_TENANTS:
            page = await conn.fetch(Q.tenants_after, after, TENANTS_PAGE)
            tenants.extend((r["tenant_id"], r["name"]) for r in page)
            if len(page) < TENANTS_PAGE:
                break
            after = page[-1]["tenant_id"]
        more = len(tenants) >= SCANNED_TENANTS and bool(
            await conn.fetch(Q.tenants_after, tenants[-1][0], 1))
    tenants = tenants[:SCANNED_TENANTS]
    for tenant_id, name in tenants:
        if tenant_id.startswith(lowered) or name.lower().startswith(lowered):
            hits["tenant"].append(Hit("tenant", TenantId(tenant_id), name, tenant_id))
    hits["tenant"] = hits["tenant"][:EACH]
    async with db.unscoped() as conn:
        for tenant_id, name in tenants:
            rows = await in_tenant(conn, tenant_id, Q.find_in_tenant, run, text, agent,
                                    lowered, EACH)
            for r in rows:
                shown = hits[r["kind"]]
                if len(shown) >= EACH:
                    continue
                agent_id = AgentId(r["agent_id"]) if r["agent_id"] else None
                shown.append(Hit(
                    r["kind"], TenantId(tenant_id), name,
                    str(agent_id) if r["kind"] == "agent" else str(RunId(r["id"])),
                    label=r["label"], agent_id=agent_id, agent_name=r["agent_name"],
                    status=r["status"], created_at=r["created_at"]))
    return Found(hits, len(tenants), more)
