"""What ``tenantry up``, ``api`` and ``worker`` run: one process, one event loop, from the
database check to the signal that stops it.

``worker`` is production: it refuses to start when the sandbox boundary it would get is
below TENANTRY_SANDBOX_MIN_BOUNDARY. ``up`` is development: it starts anyway, with the
warning in its banner. (``api`` runs no worker loops, so no sandboxes.) ``up`` also runs
the activity dispatcher (``tenantry activity-worker``'s, on the backend its worker loops
got), and its banner says so — or why it is off.

Before anything serves, the database is checked alone: a database that is missing,
unreachable or refuses us is one line naming where and what to do, not a traceback from
whatever touched it first.

What only the API or the activity dispatcher needs (FastAPI, uvicorn, the console, the
dispatcher's sandboxes) is imported where they are built: a ``tenantry worker`` process
never loads it, so it claims its first run sooner (tests/e2e/test_worker_start.py)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from tenantry import logs
from tenantry.bootstrap import StartupFailed
from tenantry.bootstrap.blob_store import check_object_store
from tenantry.bootstrap.database import (
    ResolvedDatabase,
    apply_migrations,
    require_current_schema,
    reseal_legacy_keys,
    resolve_database,
    warn_of_powerful_logins,
)
from tenantry.bootstrap.keep_postgres import keeper
from tenantry.bootstrap.secrets import master_key, operator_token
from tenantry.bootstrap.services import Service, run_until_signalled
from tenantry.bootstrap.worker import process_metrics, run_worker
from tenantry.config import Settings
from tenantry.db import DATABASE_DOWN
from tenantry.db.outage import Outage
from tenantry.db.reach import check_database, describe_failure
from tenantry.runs.inprocess import LocalWorkers
from tenantry.sandbox import probe as sandbox_probe
from tenantry.telemetry.worker import WorkerMetrics

if TYPE_CHECKING:
    from tenantry.bootstrap.activities import DispatcherPlan


def serve(settings: Settings, *, migrate: bool, demo: bool, api: bool, workers: int,
          production: bool, activities: bool = False) -> None:
    """Run until SIGINT/SIGTERM: the API if ``api``, ``workers`` worker loops; ``migrate``
    (``up``) brings the schema current first, else a schema behind is refused. Raises a
    :class:`~tenantry.errors.TenantryError` whose detail is the one line to show.
    ``production``: worker loops need the minimum sandbox boundary, checked before
    anything starts (else a warning line in the banner). ``activities``: run the activity
    dispatcher too (``up``), when it runs worker loops and a sandbox backend and the vault's
    master key are here."""
    logs.configure(settings.log_format)
    warnings: list[str] = []
    weak_boundary = None
    if workers and production:
        sandbox_probe.require_boundary(settings)
    elif workers:
        warnings += filter(None, [sandbox_probe.downgrade(settings)])
        weak_boundary = sandbox_probe.shortfall(settings)
    generated_token = settings.operator_token is None
    settings = settings.with_(operator_token=operator_token(settings))
    if migrate:  # `up`: a development vault key in the data dir unless one is configured
        master_key(settings, create=True)
    database = resolve_database(settings, create=migrate)
    try:
        # With no worker loops (`--workers 0`: an API-only process) nothing runs attempts
        # either: no dispatcher, and no warm pool of sandboxes idling beside the API.
        dispatcher = (None if not activities else _dispatcher_plan(settings, database)
                      if workers else "activity dispatcher: off (no worker loops: --workers 0)")
        asyncio.run(_serve(settings, database, migrate=migrate, demo=demo, api=api,
                           workers=workers, generated_token=generated_token,
                           warnings=warnings, dispatcher=dispatcher,
                           weak_boundary=weak_boundary))
    except DATABASE_DOWN as exc:  # it went away after the check, before serving
        raise StartupFailed(describe_failure(database.dsn, exc)) from None
    finally:
        database.stop()


async def _serve(
    settings: Settings, database: ResolvedDatabase, *, migrate: bool, demo: bool, api: bool,
    workers: int, generated_token: bool, warnings: list[str],
    dispatcher: DispatcherPlan | str | None = None, weak_boundary: str | None = None,
) -> None:
    """``dispatcher``: the activity dispatcher to run, or the line saying why it is off;
    ``weak_boundary``: why the sandbox boundary is below the minimum (``/readyz``)."""
    if migrate:
        await check_database(database.dsn)
        await apply_migrations(database.dsn)
        await reseal_legacy_keys(database.dsn, master_key(settings))
    else:
        await require_current_schema(database.dsn)
    await check_object_store(settings)
    # From here on the serving logins, never the owner's (ADR 0011).
    dsn = database.app_dsn
    await warn_of_powerful_logins(database, console=api)
    services: list[Service] = []
    if database.embedded is not None and database.embedded.started_here:
        # Whoever started the embedded Postgres keeps it up: a server that died under a
        # running `tenantry up` would otherwise leave its API answering 503 for good.
        services.append(keeper(database.embedded))
    # One record of database outages for the whole process: an outage is one line when it
    # starts and one when it ends, however many loops and pools notice it.
    outage = Outage()
    # The API sees the workers of its own process (console: breakers, sandbox pool), and
    # /readyz (the API's, or a standalone worker's on --metrics-port) their sessions.
    local = LocalWorkers(weak_boundary=weak_boundary) if workers else None
    if api:
        from tenantry.bootstrap.banner import banner
        from tenantry.bootstrap.demo import ensure_demo

        demo_info = await ensure_demo(dsn, settings) if demo else None
        base = f"http://{settings.host}:{settings.port}"
        print(banner(base, settings.operator_token if generated_token else None, demo_info,
                     database.kind, warnings, running=_running(settings, dispatcher)),
              flush=True)
        services.append(_api(settings, dsn, database.console_dsn, local, outage))
    # One metrics object for the process: the API's /metrics renders it with the database
    # gauges; a standalone worker serves it on --metrics-port.
    metrics = process_metrics(settings)
    if not api and workers and settings.worker_metrics_port:
        import uvicorn

        from tenantry.bootstrap.http_server import ApiServer, api_service
        from tenantry.telemetry.http import metrics_app
        from tenantry.telemetry.readiness import Readiness

        assert settings.operator_token is not None and local is not None
        services.append(api_service(ApiServer(uvicorn.Config(
            metrics_app(metrics, settings.operator_token, Readiness(local.checks())),
            host=settings.host,
            port=settings.worker_metrics_port, log_config=None, access_log=False,
            lifespan="off"))))
    for index in range(workers):
        services.append(_worker(settings, dsn, local, metrics, outage, cleaner=index == 0))
    if dispatcher is not None and not isinstance(dispatcher, str):
        from tenantry.bootstrap.activities import run_dispatcher

        plan = dispatcher
        services.append(lambda stop: run_dispatcher(settings, plan, stop, metrics=metrics,
                                                    outage=outage))
    await run_until_signalled(*services)
    metrics.spans.shutdown()


def _worker(settings: Settings, dsn: str, local: LocalWorkers | None, metrics: WorkerMetrics,
            outage: Outage, *, cleaner: bool) -> Service:
    """One worker loop; ``cleaner``: it runs the process's one retention cleaner (a
    second in the same process would only contend for the same tenants' leases)."""
    return lambda stop: run_worker(settings, dsn, stop, local, metrics, outage,
                                   cleaner=cleaner)


def _dispatcher_plan(settings: Settings, database: ResolvedDatabase) -> DispatcherPlan | str:
    """The dispatcher ``up`` runs: on the sandbox backend its worker loops use (the same
    probe), or the banner line saying why there is none."""
    from tenantry.bootstrap.activities import DispatcherPlan

    backend = sandbox_probe.boundary(settings).backend
    if backend is None:
        return ("activity dispatcher: off (no sandbox backend works here; see "
                "`tenantry sandbox probe`)")
    master = master_key(settings)
    if master is None:
        return "activity dispatcher: off (no vault master key: set TENANTRY_MASTER_KEY)"
    return DispatcherPlan(database.app_dsn, master, backend)


def _running(settings: Settings, dispatcher: DispatcherPlan | str | None) -> list[str]:
    if dispatcher is None:
        return []
    if isinstance(dispatcher, str):
        return [dispatcher]
    return [f"activity dispatcher: {settings.activity_worker_slots} slots on "
            f"{dispatcher.backend} (TENANTRY_ACTIVITY_WORKER_SLOTS)"]


def _api(settings: Settings, dsn: str, console_dsn: str, local: LocalWorkers | None,
         outage: Outage) -> Service:
    import uvicorn

    from tenantry.bootstrap.api import build_app
    from tenantry.bootstrap.http_server import ApiServer, api_service

    app = build_app(settings, dsn, console_dsn=console_dsn, local=local, outage=outage)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None,
                            access_log=False, lifespan="on", timeout_graceful_shutdown=5)

    def closing() -> None:
        platform = getattr(app.state, "platform", None)
        if platform is not None:
            platform.closing.set()

    return api_service(ApiServer(config), closing)
