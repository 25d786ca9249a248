"""What the model gateway keeps per account (:class:`Route`: its client, breaker, capacity
and probe state, as this process sees them) and per call (:class:`Attempts`: why the
ladder's earlier rungs did not answer)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tenantry.breaker import CircuitBreaker
from tenantry.models.accounts import ModelAccount
from tenantry.models.capacity import AccountCapacity
from tenantry.models.types import ProviderClient


@dataclass(slots=True)
class Route:
    """One account as this process sees it: client, breaker, capacity."""

    account: ModelAccount
    breaker: CircuitBreaker
    capacity: AccountCapacity
    client: ProviderClient | None = None
    credential_read_at: float = 0.0
    warmed: bool = False  # its client was built ahead of its first call (or tried to be)
    probing: bool = False
    probe_after: float = 0.0  # monotonic: no probe before then
    # Runs woken to probe the account with their real call: for which opening of the
    # breaker, and how many the last time.
    woken_for: float | None = None
    woken: int = 0


@dataclass(slots=True)
class Attempts:
    """Why earlier rungs of the ladder did not answer (for the record and the park)."""

    notes: list[str] = field(default_factory=list)

    def add(self, note: str) -> None:
        if len(self.notes) < 20:
            self.notes.append(note)

    def summary(self) -> str:
        return "; ".join(self.notes)[:500] or "no account tried"
