"""What ``tenantry activity-worker`` runs (ADR 0013): the activity dispatcher over a warm
pool of the strongest sandbox backend here, until SIGINT/SIGTERM. ``tenantry up`` runs the
same dispatcher (:func:`run_dispatcher`) as one of its services.

Production, like ``tenantry worker``: it refuses to start below
TENANTRY_SANDBOX_MIN_BOUNDARY, with no sandbox backend at all, without the vault's master
key (activities read their scoped secrets from the vault) or with migrations pending —
each a one-line error, never a traceback. With ``--metrics-port`` it serves its attempts by
outcome on ``/metrics`` there (the operator token), as ``tenantry worker`` does its own."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import uvicorn

from tenantry import logs
from tenantry.activities.code.warmup import warm_attempt_path
from tenantry.activities.tasks.dispatcher import Dispatcher
from tenantry.activities.tasks.metrics import watch_dispatcher
from tenantry.bootstrap import StartupFailed
from tenantry.bootstrap.database import ResolvedDatabase, require_current_schema, resolve_database
from tenantry.bootstrap.http_server import ApiServer, api_service
from tenantry.bootstrap.secrets import master_key, operator_token
from tenantry.bootstrap.services import Service, run_until_signalled
from tenantry.config import Settings
from tenantry.db import DATABASE_DOWN, Database
from tenantry.db.outage import Outage
from tenantry.db.reach import describe_failure
from tenantry.sandbox import probe as sandbox_probe
from tenantry.sandbox.pool import PooledDriver
from tenantry.telemetry.worker import WorkerMetrics
from tenantry.vault import MasterKey, Vault

logger = logging.getLogger(__name__)


def serve(settings: Settings) -> None:
    logs.configure(settings.log_format)
    found = sandbox_probe.require_boundary(settings)
    if found.backend is None:
        raise StartupFailed("tenantry activity-worker needs a sandbox backend and none "
                            "works here; see `tenantry sandbox probe`")
    master = master_key(settings)
    if master is None:
        raise StartupFailed("tenantry activity-worker needs the vault's master key (its "
                            "activities read their secrets): set TENANTRY_MASTER_KEY")
    database = resolve_database(settings)
    try:
        asyncio.run(_serve(settings, database, master, found.backend))
    except DATABASE_DOWN as exc:
        raise StartupFailed(describe_failure(database.dsn, exc)) from None
    finally:
        database.stop()


async def _serve(settings: Settings, database: ResolvedDatabase, master: MasterKey,
                 backend: str) -> None:
    await require_current_schema(database.dsn)
    plan = DispatcherPlan(database.app_dsn, master, backend)
    metrics = WorkerMetrics()
    services: list[Service] = [lambda stop: run_dispatcher(settings, plan, stop,
                                                           metrics=metrics)]
    if settings.worker_metrics_port:
        from tenantry.telemetry.http import metrics_app

        services.append(api_service(ApiServer(uvicorn.Config(
            metrics_app(metrics, operator_token(settings)), host=settings.host,
            port=settings.worker_metrics_port, log_config=None, access_log=False,
            lifespan="off"))))
    await run_until_signalled(*services)


@dataclass(frozen=True, slots=True)
class DispatcherPlan:
    """What a dispatcher is started with: the serving login's DSN (never the owner's),
    the vault's master key and the sandbox backend chosen for this process."""

    dsn: str
    master: MasterKey
    backend: str


async def run_dispatcher(settings: Settings, plan: DispatcherPlan, stop: asyncio.Event, *,
                         metrics: WorkerMetrics | None = None,
                         outage: Outage | None = None) -> None:
    """The dispatcher until ``stop``: its own pool and warm sandbox pool, its slots from
    TENANTRY_ACTIVITY_WORKER_SLOTS. Stopping cancels the attempts in flight (their
    sandboxes are destroyed, their tasks go back uncounted). ``metrics``: the process's,
    to show its attempts by outcome on /metrics; ``outage``: the process's record of
    database outages."""
    slots = settings.activity_worker_slots
    db = await Database.connect(plan.dsn, role=settings.db_role or None, min_size=1,
                                max_size=min(settings.db_pool_max, slots + 2), outage=outage)
    try:
        limits = sandbox_probe.default_limits(settings)
        driver = PooledDriver(sandbox_probe.build_backend(plan.backend, settings),
                              pool_size=settings.sandbox_pool_size, limits=limits,
                              warm_up=warm_attempt_path)
        driver.start()
        dispatcher = Dispatcher(db, Vault(db, plan.master), driver, slots=slots,
                                claim_batch=slots, lease_seconds=float(settings.lease_seconds),
                                limits=limits, warm_max=settings.sandbox_kept_max,
                                warm_per_tenant=settings.sandbox_kept_per_tenant,
                                session_dsn=plan.dsn, session_role=settings.db_role or None,
                                egress=driver.egress,
                                egress_flag_threshold=settings.egress_flag_threshold)
        unwatch = (watch_dispatcher(metrics.registry, lambda: dispatcher.outcomes,
                                    lambda: dispatcher.egress_refused)
                   if metrics is not None else None)
        try:
            dispatcher.start()
            logger.info("activity dispatcher started", extra={
                "worker": dispatcher.worker_id, "backend": plan.backend, "slots": slots})
            await stop.wait()
            await dispatcher.stop()
        finally:
            if unwatch is not None:
                unwatch()
            await driver.close()
    finally:
        await db.close()
