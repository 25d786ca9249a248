"""What an API key may do: its scopes (issue 41, ADR 0043).

Every tenant route names the one scope it needs (``tenantry.api.auth.tenant_may``); a key
without it is refused with a 403 naming the scope. A key made before scopes existed has
none recorded and holds them all, as it always did. Roles are the scopes a tenant's
people get together (the tenant console signs them in with one)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from tenantry.errors import ValidationFailed
from tenantry.ids import ApiKeyId, TenantId


class Scope(StrEnum):
    RUNS_READ = "runs:read"  # runs, their events, traces and blobs; agents; usage; approvals
    RUNS_WRITE = "runs:write"  # start and cancel runs and activity tasks; delete a run
    APPROVALS_DECIDE = "approvals:decide"
    AGENTS_MANAGE = "agents:manage"  # agents, versions, test sets, evaluations, promotion,
    #                                  activities' code, model snapshots
    INTEGRATIONS_MANAGE = "integrations:manage"  # tool servers, secrets, model accounts,
    #                                              webhooks
    KEYS_MANAGE = "keys:manage"  # the tenant's API keys
    AUDIT_READ = "audit:read"  # the audit trail
    DATA_EXPORT = "data:export"  # everything the tenant has, in one archive


ALL_SCOPES: frozenset[Scope] = frozenset(Scope)

#: A tenant user's role, as the scopes it grants (each role holds the one before).
ROLES: dict[str, frozenset[Scope]] = {}
ROLES["viewer"] = frozenset({Scope.RUNS_READ})
ROLES["approver"] = ROLES["viewer"] | {Scope.APPROVALS_DECIDE}
ROLES["developer"] = ROLES["approver"] | {Scope.RUNS_WRITE, Scope.AGENTS_MANAGE,
                                          Scope.INTEGRATIONS_MANAGE}
ROLES["admin"] = ALL_SCOPES


def parse_scopes(names: Iterable[str], *, field: str = "scopes") -> frozenset[Scope]:
    """Scopes named by a request; a name that is no scope is a 400 naming the known ones."""
    found: set[Scope] = set()
    for name in names:
        try:
            found.add(Scope(name))
        except ValueError:
            known = ", ".join(sorted(ALL_SCOPES))
            raise ValidationFailed(f"{field}: {name!r} is not a scope (known: {known})",
                                   field=field) from None
    return frozenset(found)


def stored(scopes: Iterable[str] | None) -> frozenset[Scope]:
    """A key's scopes as its row holds them: none recorded (a key older than scopes) is
    every scope. A name this release does not know (a later release's) grants nothing."""
    if scopes is None:
        return ALL_SCOPES
    return frozenset(Scope(s) for s in scopes if s in Scope.__members__.values())


@dataclass(frozen=True, slots=True)
class KeyGrant:
    """What one API key is: whose, which, what it may do, and until when."""

    tenant: TenantId
    key_id: ApiKeyId
    scopes: frozenset[Scope]
    expires_at: datetime | None

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now
