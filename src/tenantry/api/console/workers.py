"""What only a worker process knows (model breakers, its sandbox pool), read from the workers
sharing the API's process. Elsewhere the console says it cannot know, rather than guess."""

from __future__ import annotations

from dataclasses import dataclass

from tenantry.models.accounts import ModelAccount
from tenantry.models.gateway import ModelGateway
from tenantry.runs.inprocess import LocalWorkers
from tenantry.sandbox.pool import PoolStats


@dataclass(frozen=True, slots=True)
class WorkerBreakers:
    worker: str
    states: dict[str, str]  # account id → closed | open | half_open
    accounts: list[ModelAccount]  # what this worker routes over, configured ones included


@dataclass(frozen=True, slots=True)
class SandboxView:
    worker: str
    backend: str | None  # None: this worker has no sandboxes (code tools unavailable)
    live: int
    hibernated: int
    pool_size: int | None  # None: this backend has no warm pool
    pool_ready: int | None
    claims: int
    warm: int
    cold: int
    launched: int
    launch_failures: int
    claim_ms_last: float | None  # None: no claim yet (shown as —, not 0.0 ms)


def breakers(local: LocalWorkers | None) -> list[WorkerBreakers] | None:
    """Per in-process worker; None when no worker shares this process."""
    if local is None or not local.engines:
        return None
    found = []
    for engine in local.engines:
        model = engine.model
        if isinstance(model, ModelGateway):
            found.append(WorkerBreakers(engine.worker, model.breaker_states(), model.accounts()))
    return found


def sandboxes(local: LocalWorkers | None) -> list[SandboxView] | None:
    if local is None or not local.engines:
        return None
    views = []
    for engine in local.engines:
        manager = engine.sandboxes
        if manager is None:
            views.append(SandboxView(engine.worker, None, 0, 0, None, None, 0, 0, 0, 0, 0, None))
            continue
        # Only the pooled driver keeps clones warm; other drivers start one per claim.
        pool = manager.pool()
        stats = pool.stats if pool is not None else PoolStats()
        views.append(SandboxView(
            worker=engine.worker, backend=manager.backend, live=manager.live,
            hibernated=manager.hibernated,
            pool_size=pool.size if pool is not None else None,
            pool_ready=pool.ready if pool is not None else None,
            claims=stats.claims, warm=stats.warm, cold=stats.cold, launched=stats.launched,
            launch_failures=stats.launch_failures, claim_ms_last=last_claim_ms(stats)))
    return views


def last_claim_ms(stats: PoolStats) -> float | None:
    """The last claim's time; None before the first claim (the pool starts at 0.0)."""
    return stats.claim_ms_last if stats.claims else None
