"""Provider model snapshots per agent: which snapshot of a model (``gpt-4o-2024-08-06``)
the provider says it served an agent's runs, noticed when it changes, and held back until
the tenant promotes it.

An agent version names a model; the provider decides what answers to that name and says so
in each reply. The first snapshot seen is accepted; a different one later is a change,
shown on the agent (``model_snapshot_changed``) while the accepted one stays. A tenant may
hold a model: its runs then ask for the accepted snapshot by its id, which OpenAI and
Anthropic serve, until the tenant promotes the new one (or keeps the old, by promoting it).

The worker notes every reply's snapshot, but writes only when it differs from what its
process last saw for the agent, model and account owner: a steady run costs no statement.

A snapshot is noted with the owner of the account that reported it — the platform's
accounts, or the tenant's own (bring your own key) — and a held one is asked for only on
accounts of those owners (``ModelRequest.on_account``). A tenant's own account may report
any id at all; sent on a platform account, it would be served and billed there under the
platform's name for the model."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from tenantry.cache import BoundedCache
from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound
from tenantry.ids import AgentId, ApiKeyId, TenantId, uuid7

Q = load(__package__, "snapshots.sql")

AGENT_NOT_FOUND = "No agent with this id."
#: A Conflict, not a NotFound: the agent exists, and the model will have a snapshot once
#: one of its runs is served it (the request can succeed later, unchanged).
NO_SNAPSHOT = "This agent has no snapshot recorded for this model (none of its runs used it yet)."
#: The longest snapshot id kept; a longer one (or one with control characters) is no id.
MAX_ID_CHARS = 200
#: Promotions listed with an agent's snapshots, newest first.
PROMOTIONS_LISTED = 100


def snapshot_id(reported: str) -> str | None:
    """The snapshot id a provider reported, if it is one a person can read; else None."""
    if not reported or len(reported) > MAX_ID_CHARS or not reported.isprintable():
        return None
    return reported


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One agent's snapshot of one platform model."""

    model: str
    accepted: str  # the first seen, or the one the tenant promoted
    accepted_at: datetime
    changed_to: str | None  # another one the provider served since, if any
    changed_at: datetime | None
    held: bool  # its runs ask for ``accepted`` by id, on accounts of ``accepted_on``
    # The owners ("platform", "tenant") of the accounts that reported each; empty: not
    # known (noted before owners were), held on no account until one reports it.
    accepted_on: tuple[str, ...] = ()
    changed_on: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Promotion:
    model: str
    previous: str
    provider_model: str
    promoted_by: ApiKeyId
    promoted_at: datetime


class SnapshotNotes:
    """A worker process's memory of the last snapshot each (tenant, agent, model) was
    answered with, so that only a different one is written. Bounded: the least recently
    noted entries are forgotten first (forgetting costs one more write, never a miss). The
    same snapshot is written again after ``refresh_seconds``: a change the tenant cleared
    (promoting the accepted snapshot) while the provider still serves the new one is
    noticed again within that time, by every process alike."""

    def __init__(self, *, capacity: int = 50_000, refresh_seconds: float = 600.0) -> None:
        # key → the snapshot last written, forgotten ``refresh_seconds`` after the write
        # (None: with 0, every note is written).
        self._seen: BoundedCache[tuple[str, str, str, str], str] | None = BoundedCache(
            max_entries=capacity, ttl_seconds=refresh_seconds) if refresh_seconds > 0 else None

    async def note(self, db: Database, tenant: TenantId, agent: AgentId, model: str,
                   seen: str, owner: str) -> bool:
        """Record that ``seen`` served ``model`` for ``agent`` on an account of ``owner``
        ("platform" or "tenant"; "" not known); True when this noticed a change (counted
        once, whichever worker notices it). Raises what the database raises: the caller
        decides that a failure here fails nothing."""
        key = (tenant.value, str(agent), model, owner)
        if self._seen is not None and self._seen.get(key) == seen:
            return False
        row = await db.statement(Q.note, tenant.value, agent.uuid, model, seen, owner or None)
        if self._seen is not None:
            self._seen.put(key, seen)  # only once written: a failed write is tried again
        return bool(row is not None and row["changed"])


async def listed(
    db: Database, tenant: TenantId, agent: AgentId
) -> tuple[list[Snapshot], list[Promotion]]:
    """The agent's snapshots by model, and its latest promotions (NotFound: no such agent
    for this tenant)."""
    async with db.tenant_tx(tenant) as conn:
        if not await conn.fetchval(Q.agent_exists, tenant.value, agent.uuid):
            raise NotFound(AGENT_NOT_FOUND)
        rows = await conn.fetch(Q.list, tenant.value, agent.uuid)
        promoted = await conn.fetch(Q.promotions, tenant.value, agent.uuid, PROMOTIONS_LISTED)
    return [_snapshot(r) for r in rows], [
        Promotion(r["model"], r["previous"], r["provider_model"],
                  ApiKeyId(r["promoted_by"]), r["promoted_at"]) for r in promoted]


async def any_changed(db: Database, tenant: TenantId, agent: AgentId) -> bool:
    """Whether a provider served any of the agent's models with a snapshot it has not
    accepted."""
    async with db.tenant_tx(tenant) as conn:
        return bool(await conn.fetchval(Q.any_changed, tenant.value, agent.uuid))


async def hold(db: Database, tenant: TenantId, agent: AgentId, model: str,
               held: bool) -> Snapshot:
    """Hold (or release) the agent's runs on the accepted snapshot of ``model``: runs
    loaded from now on ask for it by id. NotFound: no agent; Conflict: no snapshot of
    ``model`` yet."""
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.hold, tenant.value, agent.uuid, model, held)
        if row is None:
            await _agent_or_404(conn, tenant, agent)
            raise Conflict(NO_SNAPSHOT, field="model")
    return _snapshot(row)


async def promote(db: Database, tenant: TenantId, agent: AgentId, model: str,
                  provider_model: str, by: ApiKeyId) -> Snapshot:
    """Accept ``provider_model`` (the changed-to snapshot, or the accepted one to keep it)
    and clear the change; who asked is recorded. Conflict: it is neither, or there is no
    snapshot of ``model`` yet."""
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.lock, tenant.value, agent.uuid, model)
        if row is None:
            await _agent_or_404(conn, tenant, agent)
            raise Conflict(NO_SNAPSHOT, field="model")
        if provider_model not in (row["accepted"], row["changed_to"]):
            raise Conflict(
                f"{provider_model!r} is neither the accepted snapshot ({row['accepted']!r}) "
                "nor the one the provider changed to "
                f"({row['changed_to']!r}); only those can be promoted.",
                field="provider_model")
        promoted = await conn.fetchrow(Q.promote, tenant.value, agent.uuid, model,
                                       provider_model)
        await conn.execute(Q.record_promotion, tenant.value, agent.uuid, model, uuid7(),
                           row["accepted"], provider_model, by.uuid)
    assert promoted is not None  # the row is locked
    return _snapshot(promoted)


async def _agent_or_404(conn: Connection, tenant: TenantId, agent: AgentId) -> None:
    if not await conn.fetchval(Q.agent_exists, tenant.value, agent.uuid):
        raise NotFound(AGENT_NOT_FOUND)


def _snapshot(row: asyncpg.Record) -> Snapshot:
    return Snapshot(row["model"], row["accepted"], row["accepted_at"], row["changed_to"],
                    row["changed_at"], row["held"], tuple(row["accepted_on"]),
                    tuple(row["changed_on"]))
