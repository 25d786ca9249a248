"""Writing an account change, and reading the whole trail a page at a time."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal
from uuid import UUID

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.ids import RunId, TenantId, uuid7

Q = load(__package__)

Kind = Literal["tool_call", "change"]

#: A position in the trail: the last entry's time (Unix microseconds) and its id.
CURSOR_RE = r"^[0-9]{1,17}\.[0-9a-f]{32}$"
_CURSOR = re.compile(CURSOR_RE)


@dataclass(frozen=True, slots=True)
class Change:
    """One change to a tenant's account: who made it, by which request, with what answer."""

    actor: str  # key:<key id> | user:<user id> | operator
    action: str  # the route: "POST /v1/tool-servers"
    target: str  # the request's path: "/v1/tool-servers/crm"
    status: int


async def record_change(db: Database, tenant: TenantId, change: Change) -> None:
    async with db.tenant_tx(tenant) as conn:
        await conn.execute(Q.insert_change, tenant.value, uuid7(), change.actor[:200],
                           change.action[:300], change.target[:2000], change.status)


@dataclass(frozen=True, slots=True)
class Entry:
    """An entry of the trail: a tool call (``run_id`` … ``duration_ms`` set) or an
    account change (``actor`` … ``status`` set)."""

    kind: Kind
    id: UUID
    at: datetime
    actor: str | None = None
    action: str | None = None
    target: str | None = None
    status: int | None = None
    run_id: RunId | None = None
    tool: str | None = None
    server: str | None = None
    key: str | None = None
    arguments_sha256: str | None = None
    outcome: str | None = None
    detail: str | None = None
    duration_ms: float | None = None

    @property
    def cursor(self) -> str:
        micros = int(self.at.timestamp()) * 1_000_000 + self.at.microsecond
        return f"{micros}.{self.id.hex}"


@dataclass(frozen=True, slots=True)
class TrailQuery:
    kind: Kind | None = None
    run: RunId | None = None  # that run's tool calls only
    actor: str | None = None  # that actor's changes only
    since: datetime | None = None


def parse_cursor(text: str) -> tuple[datetime, UUID]:
    if not _CURSOR.fullmatch(text):
        raise ValueError("not an audit cursor")
    micros, _, hexid = text.partition(".")
    seconds, rest = divmod(int(micros), 1_000_000)
    try:
        at = datetime.fromtimestamp(seconds, UTC).replace(microsecond=rest)
    except (OverflowError, ValueError, OSError):
        raise ValueError("not an audit cursor") from None
    return at, UUID(hexid)


async def trail_page(db: Database, tenant: TenantId, query: TrailQuery, *,
                     after: tuple[datetime, UUID] | None, limit: int) -> list[Entry]:
    """The tenant's trail, newest first: at most ``limit`` entries older than ``after``."""
    at, last = after if after is not None else (None, None)
    async with db.tenant_tx(tenant) as conn:
        rows = await conn.fetch(Q.trail_page, tenant.value, at, last, limit, query.kind,
                                query.run.uuid if query.run else None, query.actor,
                                query.since)
    return [Entry(
        kind=r["kind"], id=r["id"], at=r["created_at"], actor=r["actor"], action=r["action"],
        target=r["target"], status=r["status"],
        run_id=RunId(r["run_id"]) if r["run_id"] is not None else None, tool=r["tool"],
        server=r["server"], key=r["key"],
        arguments_sha256=r["arguments_sha256"].hex() if r["arguments_sha256"] else None,
        outcome=r["outcome"], detail=r["detail"], duration_ms=r["duration_ms"],
    ) for r in rows]
