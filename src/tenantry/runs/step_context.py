"""What a step may touch of the run it carries out: the driver, seen through a protocol.

A step (``model_step.py``, ``tool_step.py``, ``waiting.py``, ``activity_step.py``,
``child_step.py``, ``end_step.py``) reads the run as the driver holds it and writes only
through ``append``, ``end`` and ``absorb``, which keep invariants 1 and 2 (nothing acted on
before it is in the log; every write fenced by the lease epoch). Steps import this module,
never the driver: the driver imports them (through ``steps.py``), so there is no cycle, and
the driver's loop, its catch-up and its commit stay its own. ``RunDriver`` implements it
with plain attributes: reading one costs what it did before."""

from __future__ import annotations

from typing import Any, Protocol

from tenantry.agents.spec import AgentSpec
from tenantry.ids import AgentId
from tenantry.ledger import budget
from tenantry.ledger.tokens import TokenUsage
from tenantry.models.types import SnapshotPin
from tenantry.runs.engine import Engine
from tenantry.runs.events import BudgetStopped, Event, Payload, RunCancelled, RunFailed, RunFinished
from tenantry.runs.lease import Lease
from tenantry.runs.state import RunState
from tenantry.tools.audit import AuditEntry
from tenantry.tools.stand_ins import StandIn

__all__ = ["StepContext"]


class StepContext(Protocol):
    """The run as a step sees it; ``RunDriver`` is the one implementation."""

    @property
    def engine(self) -> Engine:
        """The worker's services and settings."""
    @property
    def lease(self) -> Lease:
        """The run, its tenant and the epoch every write is fenced by."""
    @property
    def run_id(self) -> str: ...
    @property
    def state(self) -> RunState:
        """The run folded from its log, up to its last event."""
    @property
    def spec(self) -> AgentSpec | None:
        """The agent version the run drives (None only before the first load)."""
    @property
    def basis(self) -> int:
        """The last seq the current decision saw: every event written says so."""
    @property
    def region(self) -> str: ...
    @property
    def agent(self) -> AgentId | None: ...
    @property
    def agent_version(self) -> int: ...
    @property
    def tenant_class(self) -> str:
        """The tenant's plan: the only tenant label a metric gets."""
    @property
    def model_pins(self) -> dict[str, SnapshotPin]:
        """Model → the provider snapshot its calls ask for (the agent's held snapshots)."""
    @property
    def tool_pins(self) -> dict[str, dict[str, str]]:
        """Tool → the server and digest the version was published against."""

    #: An evaluation's run: what answers its tool calls (read at its first call).
    stand_in: StandIn | None

    async def append(
        self, events: list[Payload], *, steps: int = 0,
        usage: TokenUsage | None = None, cost: int = 0, audit: AuditEntry | None = None,
        spend: tuple[budget.Reservation, budget.UsageFact] | None = None,
        sandbox: budget.SandboxFact | None = None, refused_egress: int = 0,
    ) -> None:
        """Commit the step's events (and its billing, audit and egress count) under the
        lease, then fold them into ``state``."""

    async def end(self, payload: RunFinished | RunFailed | RunCancelled | BudgetStopped, *,
                  error: dict[str, Any] | None = None) -> None:
        """Append the terminal event and set the run row's status, answer and error."""

    async def absorb(self, written: list[Event]) -> bool:
        """Fold events a step committed itself into ``state`` (after the commit)."""
