"""What a worker process builds once for all the runs it drives: its services (database,
model and tool gateways, prices, sandboxes, metrics, live deltas) and its settings. The
driver and every step read them (``StepContext.engine``); nothing here is per run."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tenantry.agents.snapshots import SnapshotNotes
from tenantry.blobs import Blobs
from tenantry.db import Database
from tenantry.ledger.prices import PriceBook
from tenantry.models.types import Model
from tenantry.runs.deltas import DeltaPublisher
from tenantry.sandbox.manager import SandboxManager
from tenantry.telemetry.worker import WorkerMetrics
from tenantry.tools.gateway import ToolGateway

__all__ = ["Engine", "EngineSettings", "StepStats"]


@dataclass(frozen=True, slots=True)
class EngineSettings:
    lease_seconds: float = 30.0
    # When no account can serve a run's model, the run parks (its slot is freed) instead of
    # failing: an outage costs time, not runs. The model gateway wakes it when an account
    # serving its model is back; failing that it is looked at again after this long,
    # doubling each time up to the maximum — which bounds how long a parked run can wait
    # after recovery when no worker remembers the outage (all restarted, ADR 0009).
    park_recheck_seconds: float = 30.0
    park_recheck_max_seconds: float = 120.0
    # A run whose log this worker cannot read (an event type or format from a newer
    # release) is handed back and held off this long, so that older workers do not
    # claim it in a loop while a newer one is rolled out.
    newer_worker_recheck_seconds: float = 60.0
    # Refused egress attempts of one agent version's sandboxes before the version is
    # flagged for review (TENANTRY_EGRESS_FLAG_THRESHOLD).
    egress_flag_threshold: int = 20
    # Child runs (TENANTRY_CHILD_MAX_DEPTH, TENANTRY_CHILD_MAX_PER_RUN): past either, a
    # start_agent call is answered with a tool error and nothing is started.
    child_max_depth: int = 3
    child_max_per_run: int = 20


@dataclass(slots=True)
class StepStats:
    """Platform time per step (wall time minus model and tool time), most recent first."""

    platform_ms: deque[float] = field(default_factory=lambda: deque(maxlen=100_000))
    steps: int = 0
    runs_ended: int = 0
    runs_failed_ours: int = 0

    def record(self, ms: float) -> None:
        self.platform_ms.append(ms)
        self.steps += 1


@dataclass(slots=True)
class Engine:
    """What a driver needs; built once per worker process."""

    db: Database
    model: Model
    tools: ToolGateway
    prices: PriceBook  # the operator's prices over the built-in defaults
    worker: str
    settings: EngineSettings = field(default_factory=EngineSettings)
    stats: StepStats = field(default_factory=StepStats)
    sandboxes: SandboxManager | None = None  # None: built-in code tools are unavailable
    # The blob store its gateways and sandboxes write to (retention's cleaner beside the
    # worker deletes from it); None in engines built without one (tests of the engine).
    blobs: Blobs | None = None
    # This process's metrics and step spans (one per process, shared by its worker loops).
    metrics: WorkerMetrics = field(default_factory=WorkerMetrics)
    # Live model deltas for the runs API processes watch (ADR 0030); the worker loop
    # feeds it their announcements and lends it its session connection.
    deltas: DeltaPublisher = field(default_factory=DeltaPublisher)
    # The provider snapshots this process last saw per agent and model (written on change).
    snapshots: SnapshotNotes = field(default_factory=SnapshotNotes)
