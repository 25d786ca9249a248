"""The durable budget ledger (invariant 9): reserve before a model call, settle to the
provider-reported usage in the transaction that appends the reply, release when the call is
abandoned; a sweeper forfeits what owners that lost their lease left open. Every step names
the run's lease epoch, so a stale owner can neither spend nor release.

Usage facts (one immutable row per reply) are the billing record; the run's totals, the
tenant's month spend and ``/v1/usage`` are projections of them, written in the same
transaction."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import LeaseLost
from tenantry.ids import AgentId, RunId, TenantId
from tenantry.ledger.pricing import Quote
from tenantry.ledger.tokens import TokenUsage, estimate_tokens

Q = load(__package__)


class Prompt(Protocol):
    """What a reservation is estimated from: a model call's prompt and reply budget
    (``models.types.ModelRequest`` is one; the ledger sits below the model gateway)."""

    @property
    def messages(self) -> Sequence[dict[str, Any]]: ...
    @property
    def tools(self) -> Sequence[dict[str, Any]]: ...
    @property
    def max_tokens(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class Reservation:
    reservation_id: uuid.UUID
    tokens: int
    cost_micros: int


@dataclass(frozen=True, slots=True)
class MustWait:
    """The tenant's token bucket is short: try again in ``seconds``."""

    seconds: float


@dataclass(frozen=True, slots=True)
class OverCap:
    """This call would take the tenant past its monthly spend cap: ``spent_micros`` (spent
    and reserved this month) plus the call's estimate is more than ``cap_micros``. The
    month's spend starts again from zero at ``period_ends`` (the start of the next month, as
    the database's clock counts months)."""

    spent_micros: int
    cap_micros: int
    period_ends: datetime


def estimate(quote: Quote, request: Prompt) -> tuple[int, int]:
    """Tokens and cost to reserve for a call (at its model's price, ``quote``); settled to
    the real numbers afterwards."""
    prompt, output = estimate_tokens(request.messages, request.tools, request.max_tokens)
    usage = TokenUsage(input_tokens=prompt, output_tokens=output)
    return usage.total_tokens, quote.cost_micros(usage)


async def reserve(
    conn: Connection, tenant: TenantId, run: RunId, epoch: int, tokens: int, cost: int,
) -> Reservation | MustWait | OverCap:
    """Reserve in the caller's transaction (the tenant set on it)."""
    reservation = uuid.uuid4()
    row = await conn.fetchrow(Q.reserve, tenant.value, run.uuid, epoch, reservation, tokens,
                              cost)
    return _reserved(row, reservation, tokens, cost)


async def reserve_now(
    db: Database, tenant: TenantId, run: RunId, epoch: int, tokens: int, cost: int,
) -> Reservation | MustWait | OverCap:
    """Reserve in a transaction of its own: one statement, one round trip (the model
    step's, just before its call)."""
    reservation = uuid.uuid4()
    row = await db.statement(Q.reserve_step, tenant.value, run.uuid, epoch, reservation,
                             tokens, cost)
    return _reserved(row, reservation, tokens, cost)


def _reserved(row: Any, reservation: uuid.UUID, tokens: int,
              cost: int) -> Reservation | MustWait | OverCap:
    assert row is not None
    match row["outcome"]:
        case "ok":
            return Reservation(reservation, tokens, cost)
        case "wait":
            return MustWait(float(row["wait_seconds"]))
        case "over_cap":
            return OverCap(int(row["spent"]), int(row["cap"]), row["period_ends"])
    raise LeaseLost("the run is no longer held under this lease")


async def settle(
    conn: Connection, tenant: TenantId, run: RunId, epoch: int, reservation: Reservation,
    usage: TokenUsage, cost: int,
) -> None:
    """Close the reservation to what the provider reported (in the reply's transaction)."""
    closed = await conn.fetchval(Q.close_reservation, tenant.value, run.uuid, epoch,
                                 reservation.reservation_id, "settled", usage.total_tokens,
                                 cost)
    if not closed:
        raise LeaseLost("the budget reservation is no longer this owner's to settle")


async def release(
    conn: Connection, tenant: TenantId, run: RunId, epoch: int, reservation: Reservation,
) -> bool:
    """Give the whole reservation back (the call was not made or not answered)."""
    return bool(await conn.fetchval(Q.close_reservation, tenant.value, run.uuid, epoch,
                                    reservation.reservation_id, "released", 0, 0))


@dataclass(frozen=True, slots=True)
class UsageFact:
    seq: int
    agent: AgentId
    agent_version: int
    provider: str
    account: str
    model: str
    usage: TokenUsage
    cost_micros: int
    price_version: str
    # Whose account served the call: "platform", or "tenant" (the tenant's own key);
    # "" where nobody said (a fact of the previous release): stored as NULL.
    account_owner: str = ""

    def to_json(self) -> dict[str, Any]:
        """The fact as tenantry_commit_step takes it (its seq is the step's last event)."""
        usage = self.usage
        return {"agent_id": str(self.agent.uuid), "agent_version": self.agent_version,
                "provider": self.provider, "account": self.account, "model": self.model,
                "input_tokens": usage.input_tokens,
                "cached_input_tokens": usage.cached_input_tokens,
                "cache_write_input_tokens": usage.cache_write_input_tokens,
                "output_tokens": usage.output_tokens, "cost_micros": self.cost_micros,
                "price_version": self.price_version,
                "account_owner": self.account_owner or None}


async def record(conn: Connection, tenant: TenantId, run: RunId, fact: UsageFact) -> None:
    usage = fact.usage
    await conn.execute(
        Q.insert_usage_fact, tenant.value, run.uuid, fact.seq, fact.agent.uuid,
        fact.agent_version, fact.provider, fact.account, fact.model, usage.input_tokens,
        usage.cached_input_tokens, usage.cache_write_input_tokens, usage.output_tokens,
        fact.cost_micros, fact.price_version, fact.account_owner or None,
    )


@dataclass(frozen=True, slots=True)
class SandboxFact:
    """The time one built-in tool call spent in the run's sandbox, and its cost at the
    sandbox price (per second) in force when it completed."""

    seq: int  # its ToolCompleted
    agent: AgentId
    agent_version: int
    backend: str
    sandbox_ms: int
    cost_micros: int
    price_version: str


async def record_sandbox(conn: Connection, tenant: TenantId, run: RunId,
                         fact: SandboxFact) -> None:
    """The fact, and its cost into the tenant's month spend (the spend cap counts it)."""
    await conn.execute(Q.insert_sandbox_usage_fact, tenant.value, run.uuid, fact.seq,
                       fact.agent.uuid, fact.agent_version, fact.backend, fact.sandbox_ms,
                       fact.cost_micros, fact.price_version)
    if fact.cost_micros:
        await conn.execute(Q.add_sandbox_spend, tenant.value, fact.cost_micros)


async def sweep(db: Database, limit: int = 1000) -> int:
    """Forfeit reservations whose owner lost the run; returns how many."""
    row = await db.statement(Q.sweep_reservations, limit)  # no reset: it sets nothing
    return int(row[0] or 0) if row is not None else 0
