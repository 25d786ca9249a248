"""Agents and their immutable versions (invariant 7). Publishing changes create a new
version; a run is pinned to the version it started with."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg

from tenantry.agents.spec import AgentSpec
from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound
from tenantry.ids import AgentId, TenantId
from tenantry.jsonutil import digest

Q = load(__package__)

NOT_FOUND = "No agent with this id."
VERSION_NOT_FOUND = "No such version of this agent."


@dataclass(frozen=True, slots=True)
class AgentVersion:
    """One immutable published version of an agent: runs pin the version they start on."""

    agent_id: AgentId
    name: str
    version: int
    spec: AgentSpec
    created_at: datetime
    # tool → {server, sha256}: the server and tool list each tool resolved to at publishing.
    tool_pins: dict[str, dict[str, str]] = field(default_factory=dict)
    # The agent's live version (what a run without a version uses), as read with this one.
    live_version: int = 1


@dataclass(frozen=True, slots=True)
class AgentSummary:
    agent_id: AgentId
    name: str
    latest_version: int
    created_at: datetime
    live_version: int


@dataclass(frozen=True, slots=True)
class Promotion:
    """One promotion: who made ``version`` live instead of ``previous_version``, and on
    which evaluation's evidence, if any."""

    promotion_id: uuid.UUID
    version: int
    previous_version: int
    promoted_by: str
    evaluation_id: uuid.UUID | None
    promoted_at: datetime


async def create_agent(db: Database, tenant: TenantId, name: str, spec: AgentSpec) -> AgentVersion:
    agent_id = AgentId.new()
    body = spec.to_json()
    async with db.tenant_tx(tenant) as conn:
        created = await conn.fetchval(Q.insert_agent, tenant.value, agent_id.uuid, name)
        if created is None:
            raise Conflict("An agent with this name already exists.", field="name")
        pins = await _tool_pins(conn, tenant, spec)
        created = await conn.fetchval(
            Q.insert_version, tenant.value, agent_id.uuid, 1, body, digest(body), pins
        )
    return AgentVersion(agent_id, name, 1, spec, created, pins)


async def _tool_pins(
    conn: Connection, tenant: TenantId, spec: AgentSpec
) -> dict[str, dict[str, str]]:
    rows = await conn.fetch(Q.current_tool_pins, tenant.value, list(spec.tools))
    return {r["tool"]: {"server": r["server"], "sha256": r["sha256"]} for r in rows}


async def create_version(
    db: Database, tenant: TenantId, agent_id: AgentId, spec: AgentSpec,
    expected_version: int | None = None,
) -> AgentVersion:
    """Publish version latest+1. ``expected_version`` lets a caller say which number it
    means to create: naming one that exists is an attempt to change it, refused with 409."""
    body = spec.to_json()
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.lock_agent, tenant.value, agent_id.uuid)
        if row is None:
            raise NotFound(NOT_FOUND)
        version = row["latest_version"] + 1
        if expected_version is not None and expected_version != version:
            if expected_version < version:
                raise Conflict(
                    f"Version {expected_version} already exists and versions are immutable; "
                    f"the next version is {version}.",
                    next_version=version,
                )
            raise Conflict(f"The next version is {version}.", next_version=version)
        await conn.execute(Q.bump_latest_version, tenant.value, agent_id.uuid, version)
        pins = await _tool_pins(conn, tenant, spec)
        created = await conn.fetchval(
            Q.insert_version, tenant.value, agent_id.uuid, version, body, digest(body), pins
        )
    return AgentVersion(agent_id, row["name"], version, spec, created, pins,
                        row["live_version"])


async def promote(db: Database, tenant: TenantId, agent_id: AgentId, version: int, *,
                  by: str, evaluation_id: uuid.UUID | None = None) -> Promotion:
    """Make ``version`` the live one (promoting the live version again is recorded too:
    who confirmed it, and on what evidence)."""
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.lock_agent, tenant.value, agent_id.uuid)
        if row is None:
            raise NotFound(NOT_FOUND)
        if version > row["latest_version"]:
            raise NotFound(VERSION_NOT_FOUND)
        await conn.execute(Q.set_live_version, tenant.value, agent_id.uuid, version)
        promotion_id = uuid.uuid4()
        at = await conn.fetchval(Q.insert_promotion, tenant.value, agent_id.uuid, promotion_id,
                                 version, row["live_version"], by, evaluation_id)
    return Promotion(promotion_id, version, row["live_version"], by, evaluation_id, at)


async def promotions(db: Database, tenant: TenantId, agent_id: AgentId, *,
                     limit: int = 50) -> list[Promotion]:
    async with db.tenant_tx(tenant) as conn:
        rows = await conn.fetch(Q.list_promotions, tenant.value, agent_id.uuid, limit)
    return [Promotion(r["promotion_id"], r["version"], r["previous_version"], r["promoted_by"],
                      r["evaluation_id"], r["promoted_at"]) for r in rows]


async def get_live(db: Database, tenant: TenantId, agent_id: AgentId,
                   conn: Connection) -> AgentVersion:
    """The agent's live version, on the caller's connection."""
    found = await conn.fetchrow(Q.get_live_agent, tenant.value, agent_id.uuid)
    if found is None:
        raise NotFound(NOT_FOUND)
    return _version(agent_id, found)


async def get_agent(db: Database, tenant: TenantId, agent_id: AgentId,
                    conn: Connection | None = None) -> AgentVersion:
    """The agent with its latest version (read on ``conn``, the caller's transaction, when
    given: a caller holding a connection must never wait for a second one)."""
    if conn is None:
        row = await db.tenant_row(tenant, Q.get_agent, agent_id.uuid, missing=NOT_FOUND)
        return _version(agent_id, row)
    found = await conn.fetchrow(Q.get_agent, tenant.value, agent_id.uuid)
    if found is None:
        raise NotFound(NOT_FOUND)
    return _version(agent_id, found)


async def get_version(
    db: Database, tenant: TenantId, agent_id: AgentId, version: int,
    conn: Connection | None = None,
) -> AgentVersion:
    if conn is None:
        async with db.tenant_tx(tenant) as own:
            return await get_version(db, tenant, agent_id, version, own)
    row = await conn.fetchrow(Q.get_version, tenant.value, agent_id.uuid, version)
    if row is None:
        raise NotFound(VERSION_NOT_FOUND)
    return _version(agent_id, row)


def _version(agent_id: AgentId, row: asyncpg.Record) -> AgentVersion:
    """A row of get_agent or get_version (the same columns)."""
    return AgentVersion(agent_id, row["name"], row["version"], AgentSpec.from_json(row["spec"]),
                        row["created_at"], row["tool_pins"], row["live_version"])


async def list_agents(
    db: Database, tenant: TenantId, *, before: AgentId | None = None, limit: int = 50
) -> list[AgentSummary]:
    async with db.tenant_tx(tenant) as conn:
        rows = await conn.fetch(
            Q.list_agents, tenant.value, before.uuid if before else None, limit
        )
    return [
        AgentSummary(AgentId(r["agent_id"]), r["name"], r["latest_version"], r["created_at"],
                     r["live_version"])
        for r in rows
    ]


