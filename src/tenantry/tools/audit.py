"""The audit log: one append-only row per tool call (tenant, run, tool, server, key, a digest
of the arguments, outcome, duration) — never the credential, never the arguments in clear.

Rows are written in the same transaction as the call's ToolCompleted event, so the audit
and the run's log cannot disagree, and auditing costs one statement, not a transaction."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from tenantry.db import Connection
from tenantry.db.queries import load
from tenantry.ids import RunId, TenantId
from tenantry.jsonutil import digest

Q = load(__package__, "audit_queries.sql")


@dataclass(frozen=True, slots=True)
class AuditEntry:
    tool: str
    key: str
    arguments_sha256: bytes | None
    outcome: str  # ok | error | refused | unavailable | unknown
    server: str | None = None
    detail: str | None = None
    duration_ms: float = 0.0

    @classmethod
    def of(
        cls, tool: str, key: str, arguments: dict[str, Any] | None, outcome: str, *,
        server: str | None = None, detail: str | None = None, duration_ms: float = 0.0,
    ) -> AuditEntry:
        return cls(tool, key, digest(arguments) if arguments is not None else None, outcome,
                   server, detail[:500] if detail else None, duration_ms)


    def to_json(self) -> dict[str, Any]:
        """The row as tenantry_commit_step takes it (with the step that made the call)."""
        return {"audit_id": str(uuid.uuid4()), "tool": self.tool, "server": self.server,
                "key": self.key,
                "arguments_sha256": (self.arguments_sha256.hex()
                                     if self.arguments_sha256 is not None else None),
                "outcome": self.outcome, "detail": self.detail,
                "duration_ms": self.duration_ms}


async def record(conn: Connection, tenant: TenantId, run: RunId, entry: AuditEntry) -> None:
    await conn.execute(Q.insert_audit, tenant.value, uuid.uuid4(), run.uuid, entry.tool,
                       entry.server, entry.key, entry.arguments_sha256, entry.outcome,
                       entry.detail, entry.duration_ms)
